#!/usr/bin/env bash
# What the broker's acquire costs inside Redis as it runs it (FCALL of its
# Functions library), what one EVALSHA of the same body with its helpers
# costs, what its parts cost, and what the thin broker's acquire (the
# bench's `thin` target: SET NX PX, INCR) costs beside it: the table "What a lock cycle
# costs Redis" in docs/performance.md. Starts a redis-server of its own on
# a free loopback port, loads each script body below with the acquire's key
# (the lease hash, from which the script names the lock's other keys) and
# the 8 arguments of an acquire that names an owner (the thin broker's body
# with its own 2 keys and 2 arguments), runs redis-benchmark on it (random
# lock names, so each call grants a fresh lock) and prints the µs per call
# from INFO commandstats.
#   scripts/script-costs.sh [calls per body, default 300000]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_packages redis-server

calls="${1:-300000}"
dir="$(mktemp -d)"
port="$(free_port)"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --daemonize yes --pidfile "$dir/redis.pid" >/dev/null
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null || true; rm -rf "$dir"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done

# The bodies, as the broker assembles them (scripts.rs): the prelude and the
# queue, holder-set and memo helpers first. The sixth is the thin broker's
# whole acquire, sent its own keys (lease, fence) and arguments (token, TTL).
python3 - "$dir" <<'EOF'
import pathlib, sys
out = pathlib.Path(sys.argv[1])
scripts = pathlib.Path("crates/lockbroker-redis/scripts")
prelude = "\n".join((scripts / f).read_text()
                    for f in ["prelude.lua", "queue.lua", "holders.lua", "memos.lua"])
acquire = (scripts / "acquire.lua").read_text()
bodies = {
    "1 return 1, with the acquire's keys and arguments": "return 1",
    "2 the helper functions defined, then return 1": prelude + "\nreturn 1",
    "3 the same plus one TIME": prelude + "\nlocal a, b = clock() return 1",
    "4 TIME and four EXISTS": "redis.call('TIME') " + "redis.call('EXISTS', KEYS[1]) " * 4 + "return 1",
    "5 acquire.lua granting a fresh lock": prelude + "\n" + acquire,
    "6 the thin broker's acquire granting a fresh lock":
        pathlib.Path("crates/lockbroker-bench/scripts/thin-acquire.lua").read_text(),
}
for name, body in bodies.items():
    (out / (name + ".lua")).write_text(body)
EOF

# The broker's own acquire, as it runs it: FCALL of its Functions library
# (the helpers defined once, at load), granting a fresh lock.
cargo build --release -q -p lockbroker-bench
"${CARGO_TARGET_DIR:-target}/release/lockbroker-bench" __library > "$dir/library.txt"
library="$(redis-cli -p "$port" -x FUNCTION LOAD REPLACE < "$dir/library.txt")"

# An acquire's key and arguments (acquire.lua's header): token, TTL,
# lock-delay, fence_idle_ms, floor, what an announcement needs, no epoch,
# an owner.
acquire=(1 'lb:{l__rand_int__}:lease'
  tok__rand_int__ 100 0 100 0 'lb:wake b1 l__rand_int__' '' owner)
thin=(2 'lb:{l__rand_int__}:lease' 'lb:{l__rand_int__}:fence' tok__rand_int__ 100)

printf '%-55s %s\n' "script body" "µs per call"
for body in "$dir"/*.lua; do
  sha="$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$body")")"
  call=("${acquire[@]}")
  case "$body" in *"thin broker"*) call=("${thin[@]}") ;; esac
  redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
  redis-benchmark -p "$port" -c 8 -n "$calls" -r 100000000 -q EVALSHA "$sha" "${call[@]}" \
    >/dev/null
  usec="$(redis-cli -p "$port" INFO commandstats | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p')"
  name="$(basename "$body" .lua)"
  printf '%-55s %s\n' "${name#* }" "$usec"
done
redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
redis-benchmark -p "$port" -c 8 -n "$calls" -r 100000000 -q FCALL "${library}_acquire" \
  "${acquire[@]}" >/dev/null
usec="$(redis-cli -p "$port" INFO commandstats | sed -n 's/^cmdstat_fcall:.*usec_per_call=\([0-9.]*\).*/\1/p')"
printf '%-55s %s\n' "the broker's acquire, FCALL of its library" "$usec"
