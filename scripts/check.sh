#!/usr/bin/env bash
# Runs the history checker: builds the broker and lockbroker-check, which
# starts its own redis-server and broker(s) on free loopback ports (unless
# given --url), loads them with stalling clients, checks every answer, and
# exits non-zero on a violation. Arguments go to lockbroker-check.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_cargo
ensure_packages redis-server
cargo build -p lockbroker-server -p lockbroker-lab
bin="${CARGO_TARGET_DIR:-target}/debug"
exec "$bin/lockbroker-check" --broker-bin "$bin/lockbroker" "$@"
