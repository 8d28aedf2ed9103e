-- Grants a place in a holder set: a shared lease on a lock, or a semaphore
-- permit. Shared leases coexist with each other and never with a valid
-- exclusive lease (or its lock-delay); permits coexist up to the limit.
--
-- KEYS[1] the exclusive lease hash (a semaphore's holds only its last fence,
--         `f`, as acquire.lua keeps it); the name's other keys are named
--         from it (lock_key): 'fence' (of older brokers, acquire.lua),
--         'queue', 'queue:expiry', 'holders', 'members' (holder leases) and
--         'released' (released holders)
-- KEYS[2] lease horizon  KEYS[3] epoch hash (quorum mode only)
-- ARGV[1..14] as acquire.lua, always all sent
-- ARGV[15] '1' when the caller joins the queue whenever it is turned away
--          (every waiting shared or permit request does)
-- ARGV[16] the semaphore's limit ('' for a shared lease: no limit)
--
-- Returns as acquire.lua ({-2, fence} included: a quorum node whose fence
-- runs ahead of the proposal grants nothing), and {-3, limit} when permits
-- take places under another limit.

local lease_key = KEYS[1]
local queue_key, expiry_key = lock_key(lease_key, 'queue'), lock_key(lease_key, 'queue:expiry')
local holders_key, members_key = lock_key(lease_key, 'holders'), lock_key(lease_key, 'members')
local released_key = lock_key(lease_key, 'released')
local token, ttl, delay = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local fence_idle, floor = tonumber(ARGV[4]), tonumber(ARGV[5])
local from = ARGV[6]
local epoch_id = ARGV[7] or ''
local owner, rid, principal = ARGV[8], ARGV[9], ARGV[10]
local waiter_id, entry_ttl = ARGV[11], tonumber(ARGV[12])
local limit = tonumber(ARGV[16])

local now_us, now_ms = clock()
local arrival_us = tonumber(ARGV[13]) or now_us
local waits = ARGV[14] == '1'

local standing = quorum_standing(KEYS[3], epoch_id, now_ms)
if not standing then
  return {-1}
end
floor = math.max(floor, standing[1])
local node_max = standing[2]

holders_prune(holders_key, members_key, released_key, now_ms)

-- A permit under another limit conflicts, a retry's included.
local occupying = redis.call('ZCARD', holders_key)
if limit and occupying > 0 then
  local in_force = tonumber(redis.call('HGET', members_key, '#limit') or limit)
  if in_force ~= limit then
    return {-3, in_force}
  end
end

-- The same request again, by token or by request_id within its principal.
local mine = token
if rid ~= '' then
  mine = redis.call('HGET', members_key, 'r:' .. principal .. ':' .. rid) or token
end
local held = holder_read(members_key, mine)
if held and held.x ~= '1' and tonumber(held.e) > now_ms and (mine == token or held.o == owner) then
  return {2, mine, tonumber(held.f), tonumber(held.e) - now_ms, tonumber(held.e), held.o}
end

local function wait_in_line()
  return queue_place(queue_key, expiry_key, waiter_id, ARGV[15] == '1', false, arrival_us,
    now_ms, entry_ttl)
end

-- A valid exclusive lease, or its lock-delay, is in the way.
local cur = redis.call('HMGET', lease_key, 'token', 'fence', 'owner', 'exp', 'rel', 'w', 'delay', 'f',
  'mu', 'ke')
if cur[1] and cur[5] ~= '1' then
  local exp = tonumber(cur[4])
  local available_in = exp + tonumber(cur[7] or '0') - now_ms
  if exp > now_ms or available_in > 0 then
    if waits and exp > now_ms and cur[6] ~= '1' then
      redis.call('HSET', lease_key, 'w', '1')
    end
    return {0, cur[3], tonumber(cur[2]), math.max(exp - now_ms, 0), available_in,
      wait_in_line(), 'exclusive'}
  end
end

local last = last_fence(cur[8], cur[2], lease_key)

-- Every permit is taken: the first to free decides when to look again.
if limit and occupying >= limit then
  if waits then
    redis.call('HSET', members_key, '#w', '1')
  end
  local busy = {0, '', last, 0, 0, wait_in_line(), 'holders'}
  local shown = holders_view(holders_key, members_key, now_ms, 20)
  if #shown > 0 then
    busy[2], busy[3], busy[4], busy[5] = shown[1], shown[2], shown[3], shown[4]
  end
  for _, value in ipairs(shown) do
    busy[#busy + 1] = value
  end
  return busy
end

-- Waiters queue for the name: they go first, in arrival order.
-- (The leases that hold the name meanwhile are shown.)
if not queue_lets_in(queue_key, expiry_key, waiter_id, now_ms) then
  local busy = {0, '', last, 0, 0, wait_in_line(), 'queue'}
  for _, value in ipairs(holders_view(holders_key, members_key, now_ms, 20)) do
    busy[#busy + 1] = value
  end
  return busy
end

-- In quorum mode the fence is exactly one above the round's proposal, as
-- for an exclusive lease (acquire.lua): every copy of a lease then carries
-- the fence its grant returns, even while the grant is being decided, so
-- no read ever counts one lease's copies under two fences.
local fence, fence_text, floor_raised = issue_fence(last, now_us, floor)
if epoch_id ~= '' and fence ~= tonumber(ARGV[5]) + 1 then
  return {-2, fence}
end
local exp = now_ms + ttl

redis.call('ZREM', released_key, token)
redis.call('ZADD', holders_key, exp + delay, token)
holder_write(members_key, token, {
  f = fence_text, o = owner, r = rid, b = principal, a = string.format('%d', now_ms),
  e = string.format('%d', exp), d = string.format('%d', delay), x = '0'})
if rid ~= '' then
  redis.call('HSET', members_key, 'r:' .. principal .. ':' .. rid, token)
end
if limit then
  redis.call('HSET', members_key, '#limit', string.format('%d', limit))
end
keep_for(holders_key, ttl + delay)
keep_for(members_key, ttl + delay)
-- The name's last fence, kept fence_idle_ms as acquire.lua keeps it.
local expire_ms, ke = lease_hash_expiry(cur[10], cur[8] ~= false, 0, cur[9], fence_idle, now_ms)
if expire_ms then
  redis.call('HSET', lease_key, 'f', fence_text, 'ke', ke)
  redis.call('PEXPIRE', lease_key, expire_ms)
else
  redis.call('HSET', lease_key, 'f', fence_text)
end
if epoch_id ~= '' then
  record_grant(KEYS[2], KEYS[3], exp + delay, fence, node_max, now_ms)
end
queue_tell_next(queue_key, expiry_key, waiter_id, now_ms, from)
return {1, fence, exp, floor_raised}
