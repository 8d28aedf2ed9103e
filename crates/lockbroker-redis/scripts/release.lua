#!lua flags=allow-oom
-- Frees a held lock at once and announces it to every broker when somebody
-- waits for it.
--
-- Flagged allow-oom: a Redis out of memory under noeviction refuses writes
-- that grow memory, and a holder must still be able to free its lock rather
-- than leave it held for its full TTL. The script only shrinks what it keeps,
-- apart from the one queue entry a quorum's undone grant puts back and the
-- release memo it writes over the oldest of the lock's few (memos.lua).
--
-- KEYS[1] lease hash; the lock's fair queue ('queue', 'queue:expiry') is
-- named from it (lock_key)
-- ARGV[1] token  ARGV[2] memo_ms (0 when a quorum undoes a grant a majority
--         did not make: no memo then): how long a released lease is remembered so
--         that a re-sent release reports success instead of a lost lease
-- ARGV[3] what an announcement needs (acquire.lua's ARGV[6])
-- ARGV[4] quorum mode, undoing a grant a majority did not make: the fair
--         waiter it went to ('' for none), put back in line at its arrival
--         ARGV[5] (Unix µs) for ARGV[6] ms, so a grant that did not happen
--         costs nobody their place
--
-- Returns {1, fence, held_ms} when released ({1, fence, -1} for a re-send of
-- a release that already succeeded, also after the lock was granted again,
-- while the release is remembered), {-3, principal} when an operator
-- force-released the lease (while remembered; principal '' for a broker
-- without API keys), {0} when the token holds no valid lease.

local lease_key = KEYS[1]
local queue_key, expiry_key = lock_key(lease_key, 'queue'), lock_key(lease_key, 'queue:expiry')
local token, memo_ms, from = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local _, now_ms = clock()

if (ARGV[4] or '') ~= '' then
  queue_join(queue_key, expiry_key, ARGV[4], tonumber(ARGV[5]), now_ms, tonumber(ARGV[6]))
end

local cur = redis.call('HMGET', lease_key, 'token', 'fence', 'exp', 'rel', 'acq', 'w', 'mn', 'f')
if not cur[1] then
  return {0}
end
if cur[1] ~= token then
  -- Released (or force-released) already, and the lock perhaps granted
  -- again since (memos.lua). A force-released lease never reads as released.
  local fence, forced_by = memo_fence(lease_key, token, now_ms)
  if forced_by then
    return {-3, forced_by}
  end
  if fence then
    return {1, fence, -1}
  end
  return {0}
end
if cur[4] == '1' then
  return {1, tonumber(cur[2]), -1}
end
if tonumber(cur[3]) <= now_ms then
  return {0}
end

if memo_ms == 0 then
  -- A quorum undoing a grant a majority did not make: nobody released this
  -- copy, so it leaves no memo, and its token no longer names it. The same
  -- token may be granted again on other nodes (a waiting acquire tries
  -- again), and that lease's release must never be answered with this
  -- copy's fence.
  redis.call('HSET', lease_key, 'rel', '1', 'exp', string.format('%d', now_ms), 'token', '')
else
  -- Keep the hash marked released (acquire treats it as free), with the
  -- lease among the lock's release memos.
  redis.call('HSET', lease_key, 'rel', '1', 'exp', string.format('%d', now_ms),
    memo_fields(cur[7], token, cur[2], now_ms + memo_ms))
  -- The hash outlives the memo already: a grant keeps it fence_idle_ms, for
  -- the fence it keeps (acquire.lua). One granted by an older broker, which
  -- kept its fence elsewhere, lives as long as the memo.
  if not cur[8] then
    redis.call('PEXPIRE', lease_key, memo_ms)
  end
end

-- One message for all brokers: each wakes its first waiter for this lock, and
-- the one holding the head of the fair queue wakes that waiter. A release
-- that no caller waited for (acquire.lua marks the lease) and no fair waiter
-- queues for is not announced: an uncontended lock cycle publishes nothing.
local head
if redis.call('EXISTS', queue_key) == 1 then
  head = queue_head(queue_key, expiry_key, now_ms)
end
if cur[6] == '1' or head then
  announce(from, 'released', head)
end
return {1, tonumber(cur[2]), now_ms - tonumber(cur[5])}
