-- Grants a lock if no valid lease, lock-delay or earlier fair waiter is in the way.
--
-- KEYS[1] lease hash; the lock's other keys are named from it (lock_key):
-- 'fence', the fence key of brokers before the fence moved into the lease
-- hash (read only when the hash has no fence of its own), 'queue' and
-- 'queue:expiry', its fair queue, 'holders' and 'members', its shared
-- holders and their leases (holders.lua)
-- KEYS[2] lease horizon  KEYS[3] epoch hash (quorum mode only)
--
-- ARGV[1..6] are always sent: ARGV[1] token  ARGV[2] ttl_ms
-- ARGV[3] lock_delay_ms  ARGV[4] fence_idle_ms
-- ARGV[5] fence floor: the highest fence the calling broker has seen; in
--         quorum mode the round's proposal, which the fence must be exactly
--         one above (every granting node then issues the same fence)
-- ARGV[6] what an announcement needs: '<wake channel> <calling broker id>
--         <lock name>' (prelude.lua's announce)
-- ARGV[7..15] are what most requests leave empty; the broker leaves off
-- every empty one at the end (a missing one reads as ''):
-- ARGV[7] quorum mode: the node's epoch as the broker knows it ('' in
--         single mode). A node with another epoch, or still out of
--         majorities after a restart without its data, grants nothing; a
--         readmitted one issues fences above its epoch's floor, and keeps
--         its highest fence in the epoch hash.
-- ARGV[8] owner  ARGV[9] request_id
-- ARGV[10] principal: who asks ('' for a broker without API keys)
-- ARGV[11] fair waiter id  ARGV[12] queue entry ttl_ms
-- ARGV[13] the fair waiter's arrival in Unix µs, its place in the queue ('' to
--          use this Redis's clock: one server, one clock; a quorum passes the
--          broker's, so every node's copy of the queue has the same order)
-- ARGV[14] '1' when the caller waits for the lock if it is busy: a busy
--          answer then marks the lease (field w), so that its release is
--          announced to every broker; releases nobody waits for are not.
-- ARGV[15] '1' when the caller joins the queue whenever it is turned away (a
--          fair waiter); a waiter that is not fair (ARGV[11] set, this '')
--          joins only when the queue exists or shared leases are in the way,
--          so no newer shared request passes a waiting exclusive one.
--
-- Returns {1, fence, expires_at_ms, floor_raised} when granted to this
--         request (floor_raised 1 when the broker's floor, not Redis's
--         counter or clock, set the fence; its token, TTL and owner are the
--         request's), {2, token, fence, expires_in_ms, expires_at_ms, owner}
--         when the same request already holds the lease (re-sent, or retried
--         with its request_id),
--         {0, owner, fence, expires_in_ms, available_in_ms, queue_position,
--         what is in the way} when busy (queue_position -1 for a caller not
--         in the queue; what: 'exclusive' for a lease or its lock-delay,
--         'queue' for a free lock owed to an earlier waiter, 'holders' for
--         shared leases, followed by those shown, as holders.lua lists them),
--         {-1} from a quorum node not in good standing, {-2, fence} from a
--         quorum node whose fence runs ahead of the proposal (its last fence,
--         clock or readmission floor): it grants nothing, and the broker asks
--         again above that fence, so no copy of a lease ever carries a fence
--         other than the one its grant returns.
--
-- The lease hash holds: token, fence, owner, rid, by (principal), acq (acquired at, ms),
-- exp (valid until, ms), delay (lock_delay_ms), rel ('1' once released) and
-- w ('1' once a caller waits for it to end), beside the lock's release memos
-- (memos.lua), f, the last fence issued for the name (of any kind of
-- lease: hold.lua keeps it here too), and ke, the key's recorded expiry
-- (lease_hash_expiry, memos.lua). An expired lease keeps the lock
-- unavailable until exp + delay (its lock-delay); a released one frees it at
-- once. The key lives at least fence_idle_ms past the last grant (so the fence
-- outlives every lease), or longer while a lease, its lock-delay or a memo
-- needs it: one key per lock, however often it changes hands.
--
-- The common case (no shared holders, no fair queue, the same owner as the
-- lease before) costs one TIME, one HMGET, one EXISTS of both and one HSET
-- of the fields that change; a PEXPIRE about once per eighth of
-- fence_idle_ms.

local lease_key = KEYS[1]
local queue_key, expiry_key = lock_key(lease_key, 'queue'), lock_key(lease_key, 'queue:expiry')
local token, ttl, delay = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local fence_idle, floor = tonumber(ARGV[4]), tonumber(ARGV[5])
local from = ARGV[6]
local epoch_id = ARGV[7] or ''
local owner, rid, principal = ARGV[8] or '', ARGV[9] or '', ARGV[10] or ''
local waiter_id, entry_ttl = ARGV[11] or '', tonumber(ARGV[12] or '0')

local now_us, now_ms = clock()
local arrival_us = tonumber(ARGV[13]) or now_us
local waits, always_queues = ARGV[14] == '1', ARGV[15] == '1'

-- Quorum mode: the node must be in good standing; after a restart without
-- data, its fences start above those issued before it (readmit.lua).
local node_max = 0
if epoch_id ~= '' then
  local standing = quorum_standing(KEYS[3], epoch_id, now_ms)
  if not standing then
    return {-1}
  end
  floor, node_max = math.max(floor, standing[1]), standing[2]
end

local cur = redis.call('HMGET', lease_key, 'token', 'fence', 'owner', 'rid', 'exp', 'rel', 'by', 'w',
  'delay', 'mu', 'f', 'ke')
if cur[1] and cur[6] ~= '1' then
  local exp = tonumber(cur[5])
  local available_in = exp + tonumber(cur[9] or '0') - now_ms
  if exp > now_ms then
    -- The same request again (re-sent by the client library, or retried by the
    -- caller with its request_id) gets back the lease it already holds; a
    -- request_id is matched only within the principal that took the lease,
    -- so another API key cannot obtain the token by guessing it.
    local same_retry = rid ~= '' and cur[4] == rid and cur[3] == owner and (cur[7] or '') == principal
    if cur[1] == token or same_retry then
      return {2, cur[1], tonumber(cur[2]), exp - now_ms, exp, cur[3]}
    end
    if waits and cur[8] ~= '1' then
      redis.call('HSET', lease_key, 'w', '1')
    end
  end
  -- Held, or expired unreleased while its lock-delay keeps the lock
  -- unavailable until the key itself expires. A waiter that is turned away
  -- keeps (or takes) its place in the queue (queue_place): a fair one
  -- always, another once a queue exists or shared leases block it.
  if available_in > 0 then
    local place = queue_place(queue_key, expiry_key, waiter_id, always_queues, false, arrival_us,
      now_ms, entry_ttl)
    return {0, cur[3], tonumber(cur[2]), math.max(exp - now_ms, 0), available_in, place, 'exclusive'}
  end
end

local last = last_fence(cur[11], cur[2], lease_key)

-- Shared leases (or their lock-delay), or fair waiters, may be in the way:
-- one EXISTS tells whether either exists at all.
local holders_key = lock_key(lease_key, 'holders')
local others = redis.call('EXISTS', holders_key, queue_key)
if others > 0 then
  -- Shared leases (or their lock-delay) hold the lock: the last to free
  -- decides when to look again.
  local until_ms = redis.call('ZRANGE', holders_key, -1, -1, 'WITHSCORES')[2]
  if until_ms and tonumber(until_ms) > now_ms then
    if waits then
      redis.call('HSET', lock_key(lease_key, 'members'), '#w', '1')
    end
    local place = queue_place(queue_key, expiry_key, waiter_id, always_queues, true, arrival_us,
      now_ms, entry_ttl)
    local busy = {0, '', last, 0, tonumber(until_ms) - now_ms, place, 'holders'}
    local shown = holders_view(holders_key, lock_key(lease_key, 'members'), now_ms, 20)
    if #shown > 0 then
      busy[2], busy[3], busy[4] = shown[1], shown[2], shown[3]
    end
    for _, value in ipairs(shown) do
      busy[#busy + 1] = value
    end
    return busy
  end
  -- The lock is free. Once fair waiters queue for it, they go first, in
  -- arrival order, whoever else asks.
  if not queue_lets_in(queue_key, expiry_key, waiter_id, now_ms) then
    local place = queue_place(queue_key, expiry_key, waiter_id, always_queues, false, arrival_us,
      now_ms, entry_ttl)
    return {0, '', last, 0, 0, place, 'queue'}
  end
end

-- The fence exceeds the last one issued, the time in microseconds and the
-- broker's floor, so it grows even when Redis lost the counter.
local fence, fence_text, floor_raised = issue_fence(last, now_us, floor)
if epoch_id ~= '' and fence ~= tonumber(ARGV[5]) + 1 then
  return {-2, fence}
end
local exp = now_ms + ttl

-- A released or expired lease's hash may still be there: this grant
-- overwrites every field of a lease that differs (clearing rel and w), and
-- keeps the lock's release memos (memos.lua). A lock taken again and again
-- by one owner rewrites only its token, fence and times.
local fields = {'token', token, 'fence', fence_text, 'f', fence_text,
  'acq', string.format('%d', now_ms), 'exp', string.format('%d', exp)}
local n = #fields
if cur[3] ~= owner then
  fields[n + 1], fields[n + 2], n = 'owner', owner, n + 2
end
if cur[4] ~= rid then
  fields[n + 1], fields[n + 2], n = 'rid', rid, n + 2
end
if cur[7] ~= principal then
  fields[n + 1], fields[n + 2], n = 'by', principal, n + 2
end
if cur[9] ~= ARGV[3] then
  fields[n + 1], fields[n + 2], n = 'delay', ARGV[3], n + 2
end
if cur[6] == '1' then
  fields[n + 1], fields[n + 2], n = 'rel', '', n + 2
end
if cur[8] == '1' then
  fields[n + 1], fields[n + 2], n = 'w', '', n + 2
end
local expire_ms, ke = lease_hash_expiry(cur[12], cur[11] ~= false, ttl + delay, cur[10],
  fence_idle, now_ms)
if expire_ms then
  fields[n + 1], fields[n + 2] = 'ke', ke
end
redis.call('HSET', lease_key, unpack(fields))
if expire_ms then
  redis.call('PEXPIRE', lease_key, expire_ms)
end
if epoch_id ~= '' then
  record_grant(KEYS[2], KEYS[3], exp + delay, fence, node_max, now_ms)
end
if others > 0 then
  queue_tell_next(queue_key, expiry_key, waiter_id, now_ms, from)
end
return {1, fence, exp, floor_raised}
