#!/usr/bin/env bash
# Runs the lost-update lab: makes sure redis-server and PostgreSQL
# (127.0.0.1:5432, user postgres, database test) are there, installing and
# starting PostgreSQL when missing, builds the broker and the lab, and runs
#   lockbroker-lostupdate "$@"
# which starts its own redis-server and broker on free loopback ports
# (with --nodes N, N redis-servers and the broker in quorum mode over them).
# With no arguments: the full table (10,000 sections, 0.1%/1%/5% stalls).
# Set LAB_PROFILE=release for an optimised build.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
. scripts/postgres.sh

ensure_cargo
ensure_packages redis-server
ensure_postgres

profile="${LAB_PROFILE:-debug}"
flag=()
[ "$profile" = release ] && flag=(--release)
cargo build "${flag[@]}" -p lockbroker-server -p lockbroker-lab
bin="${CARGO_TARGET_DIR:-target}/$profile"
exec "$bin/lockbroker-lostupdate" --broker-bin "$bin/lockbroker" "$@"
