-- Reads a name's state at one instant of Redis time. Changes nothing.
--
-- KEYS[1] lease hash (with the last issued fence); the lock's other keys are
-- named from it: 'fence', the fence key of older brokers (acquire.lua),
-- 'holders', 'members' (holder leases) and 'queue'
--
-- Returns {held (0/1), owner, last_fence (-1: none), expires_in_ms,
-- available_in_ms, mode ('exclusive', 'holders' or ''), holders valid,
-- holders occupying a place, limit in force (-1: none), soonest a holder
-- frees (ms), waiters in the queue, shown holders...}: the first five
-- describe a valid exclusive lease (or its lock-delay) when there is one,
-- otherwise the holder set (held while any holder is valid, expiring and
-- available when the last holder does). Each holder shown is four values
-- (holders.lua).

local lease_key = KEYS[1]
local holders_key, members_key = lock_key(lease_key, 'holders'), lock_key(lease_key, 'members')

local _, now_ms = clock()

local cur = redis.call('HMGET', lease_key, 'token', 'fence', 'owner', 'exp', 'rel', 'delay', 'f')
local last = -1
if cur[7] or cur[2] or redis.call('EXISTS', lock_key(lease_key, 'fence')) == 1 then
  last = last_fence(cur[7], cur[2], lease_key)
end

local occupying, valid = holders_count(holders_key, members_key, now_ms)
local state = {0, '', last, 0, 0, '', valid, occupying, -1, 0,
  redis.call('ZCARD', lock_key(lease_key, 'queue'))}
if occupying > 0 then
  local limit = redis.call('HGET', members_key, '#limit')
  state[9] = tonumber(limit or '-1')
  local shown = holders_view(holders_key, members_key, now_ms, 100)
  local latest = redis.call('ZRANGE', holders_key, -1, -1, 'WITHSCORES')
  local expires_in = 0
  for i = 3, #shown, 4 do
    expires_in = math.max(expires_in, shown[i])
  end
  if valid > 0 then
    state[1], state[6] = 1, 'holders'
  end
  state[4], state[5], state[10] = expires_in, tonumber(latest[2]) - now_ms, shown[4] or 0
  for _, value in ipairs(shown) do
    state[#state + 1] = value
  end
end

if cur[1] and cur[5] ~= '1' then
  local exp = tonumber(cur[4])
  local available_in = math.max(exp + tonumber(cur[6] or '0') - now_ms, 0)
  if exp > now_ms then
    state[1], state[2], state[4], state[5], state[6] = 1, cur[3], exp - now_ms, available_in, 'exclusive'
  elseif available_in > state[5] then
    state[5] = available_in
  end
end
return state
