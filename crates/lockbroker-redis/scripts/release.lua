-- Frees a held lock at once.
--
-- KEYS[1] lease hash
-- ARGV[1] token  ARGV[2] memo_ms: how long a released lease is remembered so
--         that a re-sent release reports success instead of a lost lease
--
-- Returns {1, fence} when released (now or by an earlier send of the same
-- release), {0} when the token holds no valid lease.

local lease_key = KEYS[1]
local token, memo_ms = ARGV[1], tonumber(ARGV[2])

local time = redis.call('TIME')
local now_ms = math.floor((tonumber(time[1]) * 1000000 + tonumber(time[2])) / 1000)

local cur = redis.call('HMGET', lease_key, 'token', 'fence', 'exp', 'rel')
if not cur[1] or cur[1] ~= token then
  return {0}
end
if cur[4] == '1' then
  return {1, tonumber(cur[2])}
end
if tonumber(cur[3]) <= now_ms then
  return {0}
end

-- Keep the hash as a short memo marked released; acquire treats it as free.
redis.call('HSET', lease_key, 'rel', '1', 'exp', string.format('%d', now_ms))
redis.call('PEXPIRE', lease_key, memo_ms)
return {1, tonumber(cur[2])}
