#!/usr/bin/env bash
# Runs the benchmarks: the broker beside Redis driven directly with the
# broker's own scripts, on this machine, over loopback. Builds release
# binaries of the broker and the benchmark, then runs
#   lockbroker-bench all "$@"
# which starts its own redis-server and brokers on free ports and stops them
# when done. Options (see `lockbroker-bench --help`):
#   --duration SECS  time per target for each latency/throughput case (default 6)
#   --slices N       alternate broker and direct Redis in N slices (default 3)
#   --rounds N       handoff rounds per case (default 200)
#   --waiters N      waiting acquires in the memory and churn cases (default 10000)
#   --waiter-rounds N rounds of waiters in the churn case (default 10)
# Exits non-zero when a run was wrong (an error, a fence that did not grow).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_cargo
ensure_packages redis-server
cargo build --release -p lockbroker-server -p lockbroker-bench
# The memory case holds 10,000 waiting connections open on each side.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), kernel $(uname -r)"
exec "${CARGO_TARGET_DIR:-target}/release/lockbroker-bench" all "$@"
