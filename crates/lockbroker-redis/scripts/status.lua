-- Reads a lock's state at one instant of Redis time. Changes nothing.
--
-- KEYS[1] lease hash   KEYS[2] last issued fence
--
-- Returns {held (0/1), owner, last_fence (-1: none), expires_in_ms, available_in_ms}.

local lease_key, fence_key = KEYS[1], KEYS[2]

local _, now_ms = clock()

local cur = redis.call('HMGET', lease_key, 'token', 'fence', 'owner', 'exp', 'rel')
local last = math.max(tonumber(redis.call('GET', fence_key) or '-1'), tonumber(cur[2] or '-1'))

if not cur[1] or cur[5] == '1' then
  return {0, '', last, 0, 0}
end
local exp = tonumber(cur[4])
local available_in = math.max(redis.call('PTTL', lease_key), 0)
if exp > now_ms then
  return {1, cur[3], last, exp - now_ms, available_in}
end
return {0, '', last, 0, available_in}
