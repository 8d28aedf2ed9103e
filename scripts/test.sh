#!/usr/bin/env bash
# Runs every test: installs what is missing (redis-server, cargo-nextest),
# then the Rust suite (each test starts its own redis-server on a free port).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_cargo
ensure_packages redis-server redis-tools
ensure_nextest

cargo build --workspace --all-targets
cargo nextest run --workspace --no-fail-fast
