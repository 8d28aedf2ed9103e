#!/usr/bin/env bash
# What one keepalive of a session costs as its number of leases grows: for
# each count, a session takes that many leases, then 50 keepalives are sent
# one after another; prints the median keepalive latency (curl's total) and
# the Redis calls and Redis CPU (INFO commandstats, FCALL) per keepalive.
# Starts a redis-server and a broker of its own on free loopback ports, in
# single mode.
#   scripts/session-cost.sh [lease counts, default "1 10 100"]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_cargo
ensure_packages redis-server redis-tools curl jq

counts="${1:-1 10 100}"
cargo build --quiet -p lockbroker-server
dir="$(mktemp -d)"
redis_port="$(free_port)"
broker_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --daemonize yes --pidfile "$dir/redis.pid" >/dev/null
LOCKBROKER_LISTEN="127.0.0.1:$broker_port" LOCKBROKER_REDIS_URL="redis://127.0.0.1:$redis_port" \
  LOCKBROKER_LOG_LEVEL=warn "${CARGO_TARGET_DIR:-target}/debug/lockbroker" >"$dir/broker.log" 2>&1 &
broker=$!
trap 'kill "$broker" 2>/dev/null || true; kill "$(cat "$dir/redis.pid")" 2>/dev/null || true; rm -rf "$dir"' EXIT
base="http://127.0.0.1:$broker_port"
until curl -fsS "$base/readyz" >/dev/null 2>&1; do sleep 0.05; done

fcall() { # calls and µs of FCALL so far
  redis-cli -p "$redis_port" info commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_fcall:calls=\([0-9]*\),usec=\([0-9]*\),.*/\1 \2/p'
}
printf '%-8s %14s %16s %20s\n' leases "keepalive p50" "FCALLs/keepalive" "Redis µs/keepalive"
for count in $counts; do
  session="$(curl -fsS --json '{"ttl_ms": 60000}' "$base/v1/sessions")"
  id="$(jq -r .id <<<"$session")" token="$(jq -r .token <<<"$session")"
  for n in $(seq "$count"); do
    curl -fsS -o /dev/null --json "{\"session\": \"$token\"}" "$base/v1/locks/cost-$id-$n/acquire"
  done
  read -r calls_before usec_before < <(fcall)
  times=()
  for _ in $(seq 50); do
    times+=("$(curl -fsS -o /dev/null -w '%{time_total}' --json "{\"token\": \"$token\"}" \
      "$base/v1/sessions/$id/keepalive")")
  done
  read -r calls_after usec_after < <(fcall)
  median="$(printf '%s\n' "${times[@]}" | sort -n | sed -n '25p')"
  python3 - "$count" "$median" "$calls_before" "$calls_after" "$usec_before" "$usec_after" <<'PY'
import sys
count, median, c0, c1, u0, u1 = sys.argv[1], float(sys.argv[2]), *map(int, sys.argv[3:])
print(f"{count:<8} {median * 1000:11.2f} ms {(c1 - c0) / 50:16.1f} {(u1 - u0) / 50:20.1f}")
PY
  curl -fsS -o /dev/null --json "{\"token\": \"$token\"}" "$base/v1/sessions/$id/close"
done
