#!/usr/bin/env bash
# Hostile-input campaign: schemathesis generates requests from openapi.yaml,
# valid and invalid, and sends them to a live broker (with API keys) over a
# redis-server of its own on a free port. Fails on any 5xx, any response the
# spec does not describe, any invalid request the broker accepts, and any panic
# in the broker's log.
#
#   scripts/schemathesis.sh [extra schemathesis arguments]
#
# SCHEMATHESIS_MAX_EXAMPLES bounds the generated cases per operation (default 100).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_cargo
ensure_packages redis-server redis-tools python3-venv curl

# 4.32.5 reads endless event streams up to `max-stream-events` and checks
# each event against the route's per-event schema.
venv=target/schemathesis-venv
wanted="schemathesis>=4.32.5,<5"
if ! "$venv/bin/python" - "$wanted" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
major, minor, patch = (int(part) for part in version("schemathesis").split(".")[:3])
sys.exit(0 if major == 4 and (minor, patch) >= (32, 5) else 1)
PY
then
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "$wanted"
fi
cargo build --quiet -p lockbroker-server

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$work" --logfile "$work/redis.log" &
pids+=($!)
for _ in $(seq 100); do redis_answers 127.0.0.1 "$redis_port" && break; sleep 0.05; done
redis_answers 127.0.0.1 "$redis_port" || { echo "redis-server did not start" >&2; exit 1; }

# A throwaway key with every scope; the broker only ever sees its hash.
key=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
hash=$(printf %s "$key" | sha256sum | cut -d' ' -f1)
broker_port=$(free_port)
LOCKBROKER_LISTEN="127.0.0.1:$broker_port" \
LOCKBROKER_REDIS_URL="redis://127.0.0.1:$redis_port/0" \
LOCKBROKER_AUTH_KEYS="[{id = \"schemathesis\", sha256 = \"$hash\", scopes = [\"lock\", \"admin\", \"metrics\"], prefixes = [\"*\"], rate_limit_per_sec = 0}]" \
LOCKBROKER_LOCKS_MAX_WAIT_MS=100 \
LOCKBROKER_LOG_LEVEL=warn \
  "${LOCKBROKER_BIN:-${CARGO_TARGET_DIR:-target}/debug/lockbroker}" >"$work/broker.log" 2>&1 &
pids+=($!)
base="http://127.0.0.1:$broker_port"
for _ in $(seq 200); do
  curl -fsS "$base/readyz" >/dev/null 2>&1 && break
  sleep 0.05
done
curl -fsS "$base/readyz" >/dev/null || { cat "$work/broker.log" >&2; echo "broker did not start" >&2; exit 1; }

report=target/schemathesis-report
mkdir -p "$report"
status=0
"$venv/bin/schemathesis" --config-file scripts/schemathesis.toml run openapi.yaml \
  --url "$base" \
  --header "Authorization: Bearer $key" \
  --checks all \
  --exclude-checks use_after_free \
  --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-100}" \
  --seed "${SCHEMATHESIS_SEED:-20261129}" \
  --workers 1 \
  --request-timeout 10 \
  --suppress-health-check all \
  --report junit,har \
  --report-dir "$report" \
  "$@" || status=$?

requests=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["log"]["entries"]))' \
  "$(ls -t "$report"/har-*.json | head -1)" 2>/dev/null || echo "?")
echo "schemathesis sent $requests requests to the broker"
if grep -qi "panicked" "$work/broker.log"; then
  echo "the broker panicked:" >&2
  grep -i -A5 "panicked" "$work/broker.log" >&2
  status=1
fi
exit "$status"
