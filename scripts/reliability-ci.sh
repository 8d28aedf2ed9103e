#!/usr/bin/env bash
# CI-sized reliability runs beyond the test suite (which holds the fault
# tests): the history checker on one and on two brokers, then the
# lost-update lab, which must see claim-first lose nothing and no fencing
# lose something.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/check.sh --seconds 15 --clients 16 --locks 3
scripts/check.sh --seconds 10 --clients 16 --locks 2 --brokers 2
scripts/lab.sh --sections 400 --rates 0.05 --check
