#!/usr/bin/env bash
# Runs every test: installs what is missing, then each suite (the client suites
# side by side), and the Rust suite last. Every suite starts its own
# redis-server (and broker) on free loopback ports. Exits non-zero if any suite
# failed.
#
#   scripts/test.sh            everything
#   scripts/test.sh --rust     the Rust suite only
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

set -e
ensure_cargo
# curl and jq: the README and docs/ transcripts, which the Rust suite runs.
ensure_packages redis-server redis-tools curl jq prometheus python3-venv golang-go golang-github-lib-pq-dev nodejs chromium chromium-driver
# Debian's nodejs comes without npm; NodeSource's includes it.
command -v npm >/dev/null 2>&1 || ensure_packages npm
ensure_nextest
cargo build --workspace --all-targets
# The client suites start the broker binary built here, wherever the target
# directory is.
export LOCKBROKER_BIN="${LOCKBROKER_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/lockbroker}"
set +e

# Most tests spend their time waiting (on timers, TTLs, a Prometheus rule
# evaluation), so nextest runs two per core.
threads=$(( $(nproc) * 2 ))

failed=()
suite() {
  local name=$1
  shift
  echo "==> $name: $*"
  if ! "$@"; then
    failed+=("$name")
  fi
}

# The client suites spend most of their time waiting on TTLs and timers, so
# they run side by side: `beside` starts one in the background with its
# output in a log of its own, and `together` waits for every one started,
# then prints each log whole, in the order they were started. Two suites of
# one client never run at once (they share its build and its packages).
beside_jobs=()
beside() {
  local name=$1 log
  shift
  log="$(mktemp)"
  { echo "==> $name: $*"; "$@"; } >"$log" 2>&1 &
  beside_jobs+=("$!|$name|$log")
}
together() {
  local job pid name log
  for job in "${beside_jobs[@]}"; do
    IFS='|' read -r pid name log <<<"$job"
    wait "$pid" || failed+=("$name")
    cat "$log"
    rm -f "$log"
  done
  beside_jobs=()
}

if [ "${1:-}" != "--rust" ]; then
  beside "python client" clients/python/run-tests.sh -q
  beside "go client" clients/go/run-tests.sh
  beside "typescript client" clients/typescript/run-tests.sh
  together
  # The shared client scenarios again with every test broker in quorum mode
  # (LOCKBROKER_TEST_MODE=quorum: the test's Redis and two more that the
  # client's harness starts), so a client that mishandles quorum mode's
  # answers fails its own tests.
  beside "python client, quorum mode" env LOCKBROKER_TEST_MODE=quorum \
    clients/python/run-tests.sh -q tests/test_scenarios.py
  beside "go client, quorum mode" env LOCKBROKER_TEST_MODE=quorum \
    clients/go/run-tests.sh -run '^TestScenarios$'
  beside "typescript client, quorum mode" env LOCKBROKER_TEST_MODE=quorum \
    clients/typescript/run-tests.sh test/scenarios.test.ts
  together
  suite "examples" examples/run.sh
  suite "deploy files" deploy/validate.sh
  suite "schemathesis" scripts/schemathesis.sh
  suite "reliability" scripts/reliability-ci.sh
fi
suite "rust" cargo nextest run --workspace --no-fail-fast --test-threads "$threads"
# nextest runs no doc examples: the Rust client's must still compile.
suite "rust doc examples" cargo test --workspace --doc
# The API suite again with every test broker in quorum mode (the test's Redis
# and two more, shared by every broker the test starts on it). Left out: tests
# of one node's own behaviour (its script counts, a TLS Redis, a grant slowed
# by a proxy in front of it, which the other two nodes decide without).
# The shared client scenarios run there too, through the Rust client.
suite "rust, quorum mode" env LOCKBROKER_TEST_MODE=quorum cargo nextest run --workspace \
  --no-fail-fast --test-threads "$threads" -E '(package(lockbroker-tests) & (test(/^(leases|listing|waiting|validation|retries|http_errors|security|lifecycle|semaphores|events|fence_checks|multi_lock|sessions|http2)::/)
    - test(/a_grant_costs_constant_redis_work|reaches_redis_over_tls|too_little_validity/)))
    | (package(lockbroker-client) & test(/^scenarios::/))'
# The API suite again in sentinel mode: every test broker finds the test's
# Redis through a Sentinel started for it, and follows it through the outages
# the fault tests cause. Left out: a TLS Redis (the test Sentinel speaks TCP).
suite "rust, sentinel mode" env LOCKBROKER_TEST_MODE=sentinel cargo nextest run --workspace \
  --no-fail-fast --test-threads "$threads" -E 'package(lockbroker-tests) & (test(/^(leases|listing|waiting|validation|retries|http_errors|security|lifecycle|semaphores|events|fence_checks|multi_lock|sessions|fences|faults|outage|observability|keys|http2)::/)
    - test(/reaches_redis_over_tls/))'
# The API suite again in cluster mode: every test's Redis is a cluster node,
# joined with two more into a cluster of three primaries by
# `redis-cli --cluster create`. Left out: tests of one node's own behaviour
# (its script counts, a TLS Redis), a proxy in front of one node (cluster
# clients reach every node at the address the cluster gives), and brokers
# started outside the harness, which run in single mode.
suite "rust, cluster mode" env LOCKBROKER_TEST_MODE=cluster cargo nextest run --workspace \
  --no-fail-fast --test-threads "$threads" -E 'package(lockbroker-tests) & (test(/^(leases|listing|waiting|validation|retries|http_errors|security|lifecycle|semaphores|events|fence_checks|multi_lock|sessions|http2)::/)
    - test(/a_grant_costs_constant_redis_work|reaches_redis_over_tls|too_little_validity|serves_https|sigterm_answers/))'

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED suites: ${failed[*]}" >&2
  exit 1
fi
