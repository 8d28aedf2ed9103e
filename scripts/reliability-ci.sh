#!/usr/bin/env bash
# CI-sized reliability runs beyond the test suite (which holds the fault
# tests, and the checker on two single-mode brokers): the history checker on
# one broker, then in quorum mode (five nodes, two brokers, a minority paused
# and restarted empty), in sentinel mode (two brokers, the primary killed
# again and again) and in cluster mode (two brokers, every slot of a primary
# moved again and again), each with a mixed load (exclusive and shared leases,
# semaphore permits), then the lost-update lab on one Redis and in each
# other mode, where claim-first must lose nothing and no fencing must lose
# something.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/check.sh --seconds 10 --clients 16 --locks 3 --mix
scripts/check.sh --seconds 10 --nodes 5 --brokers 2 --chaos --mix
scripts/check.sh --seconds 10 --sentinel --brokers 2 --chaos --mix
scripts/check.sh --seconds 10 --cluster --brokers 2 --chaos --mix
scripts/lab.sh --sections 300 --rates 0.05 --check
scripts/lab.sh --sections 200 --rates 0.05 --check --nodes 3
scripts/lab.sh --sections 200 --rates 0.05 --check --sentinel
scripts/lab.sh --sections 200 --rates 0.05 --check --cluster
