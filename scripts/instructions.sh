#!/usr/bin/env bash
# Instructions per lock cycle (acquire, then release) in the broker beside
# the thin broker (the bench's `thin` target), counted by valgrind's
# callgrind: a count, not a time, so it repeats on a busy machine where the
# timed benchmarks swing. One caller on one keep-alive connection runs the
# cycles on 50 lock names in turn; each process is counted from after a
# warm-up until the last cycle. The count is of the process's user-space
# work (system calls and Redis are not in it), including what its
# background tasks did meanwhile (a few percent). Prints both counts, their
# ratio, each split by task, and the costliest functions of each with what
# they call (callgrind inclusive counts per cycle). Starts its own
# redis-server on a free port.
# With a node count, counts a quorum-mode broker over that many redis-servers
# of its own beside the single-mode broker instead of the thin broker.
#   scripts/instructions.sh [cycles, default 2000] [quorum nodes]
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_cargo
ensure_packages redis-server redis-tools valgrind curl

cycles="${1:-2000}"
nodes="${2:-}"
cargo build --release -q -p lockbroker-server -p lockbroker-bench
bin="${CARGO_TARGET_DIR:-target}/release"
dir="$(mktemp -d)"
pids=()
# Every kill may find its process gone already; none may stop the rest.
trap 'kill "${pids[@]}" 2>/dev/null || true
  for f in "$dir"/*.pid; do kill "$(cat "$f")" 2>/dev/null || true; done
  rm -rf "$dir"' EXIT
# Starts a redis-server of this script's own, named `name`, on a free port;
# prints the port once it answers.
start_redis() { # name
  local port
  port="$(free_port)"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$dir/$1.pid" >/dev/null
  until redis_answers 127.0.0.1 "$port"; do sleep 0.05; done
  echo "$port"
}
redis_port="$(start_redis redis)"
# The quorum's nodes, when asked for: redis-servers of their own.
node_urls=()
for node in $(seq 1 "${nodes:-0}"); do
  node_urls+=("redis://127.0.0.1:$(start_redis "node$node")/0")
done

# Runs `count` cycles against the broker or thin broker on `port`.
cycle() { # port count
  python3 - "$1" "$2" <<'EOF'
import http.client, json, sys
port, count = int(sys.argv[1]), int(sys.argv[2])
conn = http.client.HTTPConnection("127.0.0.1", port)
headers = {"content-type": "application/json"}
for i in range(count):
    path = "/v1/locks/cycle-%d" % (i % 50)
    conn.request("POST", path + "/acquire", body='{"ttl_ms": 30000}', headers=headers)
    answer = conn.getresponse()
    lease = json.loads(answer.read())
    assert answer.status == 200, (answer.status, lease)
    conn.request("POST", path + "/release", body=json.dumps({"token": lease["token"]}), headers=headers)
    answer = conn.getresponse()
    released = answer.read()
    assert answer.status == 200, (answer.status, released)
EOF
}

# Counts `cycles` cycles of the target `name` started by the rest of the
# arguments under callgrind, listening on `port`; prints instructions per cycle.
count() { # name port command...
  local name="$1" port="$2"
  shift 2
  valgrind --tool=callgrind --compress-strings=no --compress-pos=no \
    --callgrind-out-file="$dir/$name.out" "$@" >"$dir/$name.log" 2>&1 &
  pids+=($!)
  local pid=$!
  until cycle "$port" 1 2>/dev/null; do sleep 0.2; done
  # A broker announces every change for its first seconds (in case another
  # broker has event streams open): the count starts after that.
  sleep 5
  cycle "$port" 200
  callgrind_control -z "$pid" >/dev/null
  cycle "$port" "$cycles"
  callgrind_control -d "$pid" >/dev/null
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  awk -v n="$cycles" '/^summary:/ { printf "%.0f\n", $2 / n }' "$dir/$name.out.1"
}

broker_port="$(free_port)"
other_port="$(free_port)"
broker="$(LOCKBROKER_LISTEN="127.0.0.1:$broker_port" \
  LOCKBROKER_REDIS_URL="redis://127.0.0.1:$redis_port/0" LOCKBROKER_LOG_LEVEL=warn \
  count broker "$broker_port" "$bin/lockbroker")"
if [ -n "$nodes" ]; then
  # The quorum broker is the one whose functions are listed.
  mv "$dir/broker.out.1" "$dir/single.out.1"
  single="$broker"
  broker="$(LOCKBROKER_LISTEN="127.0.0.1:$other_port" LOCKBROKER_REDIS_MODE=quorum \
    LOCKBROKER_REDIS_NODES="$(IFS=,; echo "${node_urls[*]}")" LOCKBROKER_LOG_LEVEL=warn \
    count broker "$other_port" "$bin/lockbroker")"
  printf 'instructions per cycle: quorum-%s broker %s  single-mode broker %s  quorum/single %sx\n' \
    "$nodes" "$broker" "$single" "$(awk -v q="$broker" -v s="$single" 'BEGIN { printf "%.2f", q / s }')"
else
  thin="$(count thin "$other_port" "$bin/lockbroker-bench" __thin --port "$other_port" \
    --redis "redis://127.0.0.1:$redis_port/1")"
  printf 'instructions per cycle: broker %s  thin %s  broker/thin %sx\n' "$broker" "$thin" \
    "$(awk -v b="$broker" -v t="$thin" 'BEGIN { printf "%.2f", b / t }')"
fi
# Splits a count by task: the HTTP connections' tasks (parsing, the
# handlers, building each script call), the Redis connections' tasks
# (fred's router: encoding each command, one bulk string per key and
# argument, and reading the replies), and the rest (the runtime's own work,
# background tasks).
by_task() { # label callgrind-file http-task-function
  callgrind_annotate --inclusive=yes --threshold=100 "$2" 2>/dev/null |
    awk -v n="$cycles" -v label="$1" -v http="$3" '
      function count(line) { v = line; sub(/^ */, "", v); sub(/ .*/, "", v); gsub(",", "", v); return v / n }
      /PROGRAM TOTALS/ { total = count($0) }
      index($0, http) && !h { h = count($0) }
      index($0, "fred::runtime::_tokio::ClientLike::connect::{{closure}}") && !r { r = count($0) }
      END {
        if (!h || !r) { printf "  %-18s no count for %s or for fred'"'"'s router: renamed?\n", label, http; exit }
        printf "  %-18s HTTP connections %7.0f  Redis connections %7.0f  the rest %7.0f  all %7.0f\n",
          label, h, r, total - h - r, total }'
}
echo "instructions per cycle, by task:"
# A broker's connection task is a combinator (the peek for the HTTP/2
# preface, then the server): its flattening future's count is the
# connection's.
connection="futures_util::future::future::flatten::Flatten<Fut,<Fut as core::future::future::Future>::Output> as core::future::future::Future>::poll "
by_task "${nodes:+quorum-$nodes }broker" "$dir/broker.out.1" "$connection"
if [ -n "$nodes" ]; then
  by_task "single mode" "$dir/single.out.1" "$connection"
else
  by_task thin "$dir/thin.out.1" "lockbroker_bench::thin::serve::{{closure}}::{{closure}} "
fi
# Prints the costliest functions of a count (inclusive, per cycle): those
# of the broker's crates and of the libraries a request runs through.
costliest() { # callgrind-file how-many
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    grep -E '^ *[0-9,]+ .*(lockbroker_|fred::|serde|axum::|hyper::|tokio::time)' |
    awk -v max="$2" 'NR <= max' |
    awk -v n="$cycles" '{ v = $1; gsub(",", "", v); sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "");
      sub(/ \[.*$/, ""); sub(/^\?\?\?:/, ""); printf "%8.0f  %s\n", v / n, substr($0, 1, 110) }'
}
echo "the broker's costliest functions, instructions per cycle (inclusive):"
costliest "$dir/broker.out.1" 50
if [ -z "$nodes" ]; then
  echo "the thin broker's costliest functions, instructions per cycle (inclusive):"
  costliest "$dir/thin.out.1" 25
fi
