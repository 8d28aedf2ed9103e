#!/usr/bin/env bash
# Runs the benchmarks: the broker beside Redis driven directly with the
# broker's own scripts, beside the smallest correct Redis lock, beside the
# thinnest correct HTTP broker (the `thin` rows: hyper, one Redis connection,
# two scripts), and beside etcd's lock API when etcd is installed, on this
# machine, over loopback.
# Builds release binaries of the broker and the benchmark, then runs
#   lockbroker-bench all "$@"
# which starts its own redis-server, brokers and etcd on free ports and stops
# them when done. Options (see `lockbroker-bench --help`):
#   --duration SECS  time per target for each latency/throughput case (default 6)
#   --slices N       alternate the targets in N slices (default 3)
#   --rounds N       handoff rounds per case (default 200)
#   --waiters N      waiting acquires in the memory and churn cases (default 10000)
#   --waiter-rounds N rounds of waiters in the churn case (default 10)
#   --huge           the memory case must also hold 100,000 waiting acquires
#                    (it does whenever `ulimit -n` is above 101,000; with
#                    --huge a lower limit is an error instead of a skip)
#   --huge-waiters N like --huge, with N waiting acquires
#   --json PATH      also write every figure to PATH, for scripts/bench-compare.sh
# Exits non-zero when a run was wrong (an error, a fence that did not grow).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_cargo
ensure_packages redis-server
# etcd is a peer, not a requirement: without it the bench says it skipped it.
ensure_packages etcd-server || echo "etcd-server could not be installed; the etcd peer will be skipped" >&2
cargo build --release -p lockbroker-server -p lockbroker-bench
# The memory case holds 10,000 waiting connections open on each side
# (100,000 when the limit allows); the broker inherits this limit. The bench
# also raises its soft limit to the hard one and prints what it reached.
ulimit -n 262144 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), kernel $(uname -r), open files $(ulimit -n)"
# The closing table has the thin rows: "(vs thin)" for the broker held to
# the thin broker, and "thin ..." for the thin broker's own figures.
exec "${CARGO_TARGET_DIR:-target}/release/lockbroker-bench" all "$@"
