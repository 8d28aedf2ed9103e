#!/usr/bin/env bash
# Compares two benchmark runs written with --json, for example before and
# after a change:
#   git checkout A; scripts/bench.sh --json /tmp/a.json
#   git checkout B; scripts/bench.sh --json /tmp/b.json
#   scripts/bench-compare.sh /tmp/a.json /tmp/b.json
# Prints every figure both runs have, A, B and the ratio B/A, and whether it
# moved the better or the worse way (by more than 5%) or newly met or missed
# its goal. Figures of this shared machine move by more than that between
# runs on their own: compare several runs, or the CPU-per-pair figures,
# which move least.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 A.json B.json" >&2
  exit 64
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
bench="${CARGO_TARGET_DIR:-$root/target}/release/lockbroker-bench"
if [ ! -x "$bench" ]; then
  cargo build --release --manifest-path "$root/Cargo.toml" -p lockbroker-bench
fi
exec "$bench" compare "$1" "$2"
