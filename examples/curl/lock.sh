#!/usr/bin/env bash
# Acquire, show the fence, extend and release a lock with curl, and handle a
# busy lock. Needs only bash and curl.
#
#   LOCKBROKER_URL=http://127.0.0.1:7700 [LOCKBROKER_API_KEY=...] ./lock.sh [NAME]
#
# The token is a secret: it stays in a shell variable and is never printed.
set -euo pipefail

url="${LOCKBROKER_URL:-http://127.0.0.1:7700}"
name="${1:-example-curl}"
auth=()
if [[ -n "${LOCKBROKER_API_KEY:-}" ]]; then
    auth=(-H "Authorization: Bearer ${LOCKBROKER_API_KEY}")
fi

# call METHOD PATH [JSON]: sets $status (HTTP code), $body and $retry_after.
call() {
    local headers data=()
    headers="$(mktemp)"
    if [[ $# -ge 3 ]]; then data=(--data "$3"); fi
    body="$(curl -sS --max-time 15 -X "$1" "${auth[@]}" -H 'Content-Type: application/json' \
        -D "$headers" -w '\n%{http_code}' "${data[@]}" "$url$2")"
    status="${body##*$'\n'}"
    body="${body%$'\n'*}"
    retry_after="$(sed -n 's/^[Rr]etry-[Aa]fter: *\([0-9]*\).*/\1/p' "$headers")"
    rm -f "$headers"
}

# field NAME: a string or number field of $body (the API's JSON is flat enough).
field() {
    sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\)\"\{0,1\}[,}].*/\1/p" <<<"$body" | head -n1
}

call POST "/v1/locks/$name/acquire" '{"ttl_ms": 10000, "owner": "curl-example"}'
if [[ "$status" == 423 ]]; then
    echo "busy: $name is held by $(field owner) (fence $(field fence)); retry in ${retry_after}s"
    exit 75
fi
[[ "$status" == 200 ]] || { echo "acquire failed: HTTP $status $body" >&2; exit 1; }
token="$(field token)"
fence="$(field fence)"
echo "acquired $name with fence $fence"

# Another worker asking now is told who holds the lock and when to retry.
call POST "/v1/locks/$name/acquire" '{"ttl_ms": 10000, "owner": "second-worker"}'
[[ "$status" == 423 ]] || { echo "expected 423 for a second acquire, got $status" >&2; exit 1; }
echo "second worker: busy, held by $(field owner) with fence $(field fence), retry in ${retry_after}s"

call POST "/v1/locks/$name/extend" "{\"token\": \"$token\", \"ttl_ms\": 20000}"
[[ "$status" == 200 ]] || { echo "extend failed: HTTP $status $body" >&2; exit 1; }
echo "extended: fence $(field fence), ttl $(field ttl_ms) ms"

call POST "/v1/locks/$name/release" "{\"token\": \"$token\"}"
if [[ "$status" == 409 ]]; then
    echo "lease lost before release: treat the work as possibly duplicated" >&2
    exit 1
fi
[[ "$status" == 200 ]] || { echo "release failed: HTTP $status $body" >&2; exit 1; }
echo "released: fence $(field fence)"
