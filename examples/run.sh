#!/usr/bin/env bash
# Runs every example against a real broker: starts its own redis-server and
# lockbroker on free ports, then runs each example whose toolchain is installed
# (curl; go and node, which use the clients in ../clients, building the
# TypeScript one when its dist/ is missing) twice: once on a free lock (acquire, fence, extend, release)
# and once on a lock held by someone else (it must report busy and exit 75).
# Exits non-zero if any example fails.
#
# Environment: LOCKBROKER_BIN (default <repo>/target/debug/lockbroker, built here).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/lockbroker-examples.XXXXXX")"
pids=()

cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for WHAT CMD...: retries CMD for up to 15 s.
wait_for() {
    local what="$1"; shift
    for _ in $(seq 1 150); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    echo "run.sh: $what did not start" >&2
    return 1
}

for tool in redis-server python3; do
    command -v "$tool" >/dev/null 2>&1 || { echo "run.sh: $tool is required" >&2; exit 2; }
done
if [[ -z "${LOCKBROKER_BIN:-}" ]]; then
    (cd "$repo" && cargo build --quiet -p lockbroker-server)
    LOCKBROKER_BIN="$repo/target/debug/lockbroker"
fi

redis_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    >"$work/redis.log" 2>&1 &
pids+=($!)
wait_for redis-server python3 -c "import socket; socket.create_connection(('127.0.0.1', $redis_port), 1)"

broker_port="$(free_port)"
LOCKBROKER_LISTEN="127.0.0.1:$broker_port" LOCKBROKER_REDIS_URL="redis://127.0.0.1:$redis_port/0" \
    "$LOCKBROKER_BIN" >"$work/broker.log" 2>&1 &
pids+=($!)
export LOCKBROKER_URL="http://127.0.0.1:$broker_port"
wait_for lockbroker python3 -c "import urllib.request; urllib.request.urlopen('$LOCKBROKER_URL/readyz', timeout=1)"

# hold NAME: takes NAME for 30 s as another owner would (the token is discarded).
hold() {
    python3 - "$1" <<'PY'
import json, os, sys, urllib.request
body = json.dumps({"ttl_ms": 30000, "owner": "someone-else"}).encode()
url = f"{os.environ['LOCKBROKER_URL']}/v1/locks/{sys.argv[1]}/acquire"
request = urllib.request.Request(
    url, data=body, method="POST", headers={"Content-Type": "application/json"}
)
urllib.request.urlopen(request, timeout=5)
PY
}

passed=0 failed=0 skipped=0

# check LABEL CMD...: runs the example on a free lock, then on a held one.
check() {
    local label="$1"; shift
    local name="example-$label-$RANDOM" out rc
    echo "--- $label"
    rc=0; out="$("$@" "$name" 2>&1)" || rc=$?
    printf '%s\n' "$out" | sed 's/^/    /'
    if [[ $rc -ne 0 ]] || ! grep -q "acquired $name with fence [0-9]" <<<"$out" \
        || ! grep -q '^released' <<<"$out"; then
        echo "FAIL $label: expected acquire, fence and release (exit $rc)"
        failed=$((failed + 1)); return
    fi
    hold "$name-held"
    rc=0; out="$("$@" "$name-held" 2>&1)" || rc=$?
    printf '%s\n' "$out" | sed 's/^/    /'
    if [[ $rc -ne 75 ]] || ! grep -q '^busy' <<<"$out"; then
        echo "FAIL $label: expected 'busy' and exit 75 on a held lock (exit $rc)"
        failed=$((failed + 1)); return
    fi
    echo "ok   $label"
    passed=$((passed + 1))
}

skip() {
    echo "--- $1"
    echo "skipped: $2"
    skipped=$((skipped + 1))
}

if command -v curl >/dev/null 2>&1; then
    check curl bash "$here/curl/lock.sh"
else
    skip curl "curl not installed"
fi

if command -v go >/dev/null 2>&1; then
    if (cd "$here/go" && GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=mod go build -o "$work/lock-go" .) \
        >"$work/go-build.log" 2>&1; then
        check go "$work/lock-go"
    else
        echo "--- go"; sed 's/^/    /' "$work/go-build.log"
        echo "FAIL go: build failed"; failed=$((failed + 1))
    fi
else
    skip go "go not installed"
fi

ts_client="$repo/clients/typescript"
if command -v node >/dev/null 2>&1; then
    if ! node -e 'process.exit(typeof fetch === "function" ? 0 : 1)'; then
        skip node "node $(node --version) has no fetch (Node 18 or newer needed)"
    elif [[ ! -f "$ts_client/dist/index.js" ]] && ! (cd "$ts_client" \
        && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && npm run --silent build) \
        >"$work/ts-build.log" 2>&1; then
        echo "--- node"; sed 's/^/    /' "$work/ts-build.log"
        echo "FAIL node: building clients/typescript failed"; failed=$((failed + 1))
    else
        check node node "$here/node/lock.mjs"
    fi
else
    skip node "node not installed"
fi

echo "examples: $passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
