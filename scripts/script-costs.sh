#!/usr/bin/env bash
# What one EVALSHA of the broker's acquire script costs inside Redis, and
# what its parts cost: the table "What a lock cycle costs Redis" in
# docs/performance.md. Starts a redis-server of its own on a free loopback
# port, loads each script body below with the acquire's 4 keys and 16
# arguments, runs redis-benchmark on it (random lock names, so each call
# grants a fresh lock) and prints the µs per call from INFO commandstats.
#   scripts/script-costs.sh [calls per body, default 300000]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_packages redis-server

calls="${1:-300000}"
dir="$(mktemp -d)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --daemonize yes --pidfile "$dir/redis.pid" >/dev/null
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null; rm -rf "$dir"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done

# The bodies, as the broker assembles them (scripts.rs): prelude and queue
# helpers first. The last one drops acquire.lua's fair-queue check.
python3 - "$dir" <<'EOF'
import pathlib, sys
out = pathlib.Path(sys.argv[1])
scripts = pathlib.Path("crates/lockbroker-redis/scripts")
prelude = (scripts / "prelude.lua").read_text() + "\n" + (scripts / "queue.lua").read_text()
acquire = (scripts / "acquire.lua").read_text()
check = acquire.index("if redis.call('EXISTS', queue_key) == 1 then")
end = acquire.index("\nend\n", check) + len("\nend\n")
bodies = {
    "1 return 1, with the acquire's keys and arguments": "return 1",
    "2 the helper functions defined, then return 1": prelude + "\nreturn 1",
    "3 the same plus one TIME": prelude + "\nlocal a, b = clock() return 1",
    "4 TIME and four EXISTS": "redis.call('TIME') " + "redis.call('EXISTS', KEYS[3]) " * 4 + "return 1",
    "5 acquire.lua granting a fresh lock": prelude + "\n" + acquire,
    "6 the same without the fair-queue check": prelude + "\n" + acquire[:check] + acquire[end:],
}
for name, body in bodies.items():
    (out / (name + ".lua")).write_text(body)
EOF

printf '%-55s %s\n' "script body" "µs per EVALSHA"
for body in "$dir"/*.lua; do
  sha="$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$body")")"
  redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
  redis-benchmark -p "$port" -c 8 -n "$calls" -r 100000000 -q EVALSHA "$sha" 4 \
    'lb:{l__rand_int__}:lease' 'lb:{l__rand_int__}:fence' 'lb:{l__rand_int__}:queue' \
    'lb:{l__rand_int__}:qexp' tok__rand_int__ 100 owner '' 0 100 0 '' 30000 lb:wake b1 \
    l__rand_int__ '' '' '' '' >/dev/null
  usec="$(redis-cli -p "$port" INFO commandstats | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p')"
  name="$(basename "$body" .lua)"
  printf '%-55s %s\n' "${name#* }" "$usec"
done
