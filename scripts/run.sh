#!/usr/bin/env bash
# Runs the broker. Without LOCKBROKER_REDIS_URL it uses the Redis on
# 127.0.0.1:6379, starting one there (and installing redis-server) when none
# answers. Extra arguments go to the broker, e.g. `scripts/run.sh --config FILE`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_cargo
if [ -z "${LOCKBROKER_REDIS_URL:-}" ]; then
  ensure_packages redis-server redis-tools
  if ! redis_answers 127.0.0.1 6379; then
    mkdir -p target/redis
    # appendfsync always: a lease acknowledged to a client survives a Redis
    # crash or restart (docs/reliability.md); everysec could lose the last second.
    echo "starting redis-server on 127.0.0.1:6379 (append-only file in target/redis, fsync on every write)" >&2
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --dir "$PWD/target/redis" \
      --appendonly yes --appendfsync always --save "" --logfile "$PWD/target/redis/redis.log"
    for _ in $(seq 50); do redis_answers 127.0.0.1 6379 && break; sleep 0.1; done
  fi
  export LOCKBROKER_REDIS_URL="redis://127.0.0.1:6379/0"
fi
cargo build --release -p lockbroker-server
exec target/release/lockbroker "$@"
