#!/usr/bin/env bash
# Tests the Go client against a real broker and Redis: go vet and go test in the
# client module and in the claim-first example module (which also needs
# PostgreSQL at 127.0.0.1:5432; its tests skip when it is unreachable).
#
# Builds the broker (cargo build -p lockbroker-server) unless LOCKBROKER_BIN
# names one. The tests start their own redis-server and broker on free ports.
# Extra arguments go to go test (for example -v or -run NAME).
#
# The example's one dependency, github.com/lib/pq, comes from Debian's
# golang-github-lib-pq-dev when that is installed (no network needed), else
# from the Go module proxy, checked against go.sum.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

for tool in go redis-server; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "run-tests.sh: $tool is not installed (apt-get install golang-go redis-server)" >&2
        exit 2
    }
done
if [[ -z "${LOCKBROKER_BIN:-}" ]]; then
    echo "==> cargo build -p lockbroker-server"
    (cd "$repo" && cargo build --quiet -p lockbroker-server)
    export LOCKBROKER_BIN="$repo/target/debug/lockbroker"
fi
# The client has no dependencies, and the example's come from go.sum: never
# let go switch toolchains or reach for a newer module.
export GOTOOLCHAIN=local

status=0
echo "==> clients/go: gofmt, go vet, go test"
cd "$here"
unformatted="$(gofmt -l .)"
if [[ -n "$unformatted" ]]; then
    echo "gofmt would change: $unformatted" >&2
    status=1
fi
go vet ./... || status=1
go test -count=1 "$@" ./... || status=1

echo "==> clients/go/examples/claimfirst: go vet, go test"
cd "$here/examples/claimfirst"
debian_pq=/usr/share/gocode/src/github.com/lib/pq
if [[ -f "$debian_pq/go.mod" ]]; then
    # A workspace of its own points the example at Debian's copy of lib/pq.
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    printf 'go 1.19\n\nuse %s\n\nreplace github.com/lib/pq v1.10.7 => %s\n' "$PWD" "$debian_pq" >"$work/go.work"
    export GOWORK="$work/go.work" GOPROXY=off
fi
go vet ./... || status=1
go test -count=1 "$@" ./... || status=1
exit $status
