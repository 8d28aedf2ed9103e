#!/usr/bin/env bash
# Tests the Python client against a real broker and Redis.
#
# Builds the broker (cargo build -p lockbroker-server), installs the package with
# its test extras into a virtualenv under target/, and runs pytest. The tests start
# their own redis-server and broker on free ports. Extra arguments go to pytest.
#
# Environment: LOCKBROKER_VENV (default <repo>/target/python-venv),
#              LOCKBROKER_BIN (default <repo>/target/debug/lockbroker, built here).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${LOCKBROKER_VENV:-$repo/target/python-venv}"
python="${PYTHON:-python3}"

if ! command -v redis-server >/dev/null 2>&1; then
    echo "run-tests.sh: redis-server is not installed (apt-get install redis-server)" >&2
    exit 2
fi

if [[ -z "${LOCKBROKER_BIN:-}" ]]; then
    echo "==> cargo build -p lockbroker-server"
    (cd "$repo" && cargo build --quiet -p lockbroker-server)
    export LOCKBROKER_BIN="$repo/target/debug/lockbroker"
fi

if [[ ! -x "$venv/bin/python" ]]; then
    echo "==> creating virtualenv $venv"
    "$python" -m venv "$venv"
fi
# Reinstall only when the package definition changed since the last run.
stamp="$venv/.lockbroker-installed"
if [[ ! -f "$stamp" ]] || ! cmp -s "$here/pyproject.toml" "$stamp"; then
    echo "==> pip install -e clients/python[test]"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$here[test]"
    cp "$here/pyproject.toml" "$stamp"
fi

echo "==> pytest clients/python"
cd "$here"
exec "$venv/bin/python" -m pytest "$@"
