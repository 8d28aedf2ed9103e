#!/usr/bin/env bash
# Tests the TypeScript client against a real broker and Redis with node's own
# test runner: installs the dev dependencies from package-lock.json (npm ci),
# builds dist/ with tsc, compiles the tests and examples, and runs node --test.
# The claim-first tests also use PostgreSQL at 127.0.0.1:5432 (skipped when it
# is unreachable).
#
# Builds the broker (cargo build -p lockbroker-server) unless LOCKBROKER_BIN
# names one. The tests start their own redis-server and broker on free ports.
#
# Arguments name test files (relative to clients/typescript) to run instead of
# all of them: run-tests.sh test/scenarios.test.ts
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

for tool in node npm redis-server; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "run-tests.sh: $tool is not installed (apt-get install nodejs npm redis-server)" >&2
        exit 2
    }
done
if [[ -z "${LOCKBROKER_BIN:-}" ]]; then
    echo "==> cargo build -p lockbroker-server"
    (cd "$repo" && cargo build --quiet -p lockbroker-server)
    export LOCKBROKER_BIN="$repo/target/debug/lockbroker"
fi

cd "$here"
# Reinstall only when the lock file changed since the last install.
if [[ ! -d node_modules ]] || ! cmp -s package-lock.json node_modules/.package-lock.json.installed; then
    echo "==> npm ci"
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
    cp package-lock.json node_modules/.package-lock.json.installed
fi
if [[ $# -eq 0 ]]; then
    echo "==> npm test (tsc, node --test)"
    exec npm test --silent
fi
# The same build as npm test, then only the named files, compiled.
compiled=()
for file in "$@"; do
    [[ "$file" == test/*.test.ts && -f "$file" ]] || {
        echo "run-tests.sh: $file is not a test file (test/NAME.test.ts)" >&2
        exit 2
    }
    compiled+=("build/${file%.ts}.js")
done
echo "==> tsc, node --test ${compiled[*]}"
npm run --silent clean && npm run --silent build && npm run --silent build:test
exec node --test "${compiled[@]}"
