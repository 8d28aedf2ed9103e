-- Grants a lock if no valid lease or lock-delay is in the way.
--
-- KEYS[1] lease hash   KEYS[2] last issued fence
-- ARGV[1] token  ARGV[2] ttl_ms  ARGV[3] owner ('' for none)
-- ARGV[4] request_id ('' for none)  ARGV[5] lock_delay_ms  ARGV[6] fence_idle_ms
-- ARGV[7] fence floor: the highest fence the calling broker has seen
--
-- Returns {1, token, fence, ttl_ms, expires_at_ms, owner} when granted,
--         {0, owner, fence, expires_in_ms, available_in_ms} when busy.
--
-- The lease hash holds: token, fence, owner, rid, acq (acquired at, ms),
-- exp (valid until, ms), delay (lock_delay_ms) and rel ('1' once released).
-- The key lives until exp + delay, so an expired lease keeps the lock
-- unavailable for its lock-delay; a released one frees it at once.

local lease_key, fence_key = KEYS[1], KEYS[2]
local token, ttl, owner, rid = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local delay, fence_idle, floor = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])

local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now_us / 1000)

local cur = redis.call('HMGET', lease_key, 'token', 'fence', 'owner', 'rid', 'exp', 'rel')
if cur[1] and cur[6] ~= '1' then
  local exp = tonumber(cur[5])
  local available_in = redis.call('PTTL', lease_key)
  if exp > now_ms then
    -- The same request again (re-sent by the client library, or retried by the
    -- caller with its request_id) gets back the lease it already holds.
    if cur[1] == token or (rid ~= '' and cur[4] == rid and cur[3] == owner) then
      return {1, cur[1], tonumber(cur[2]), exp - now_ms, exp, cur[3]}
    end
    return {0, cur[3], tonumber(cur[2]), exp - now_ms, available_in}
  end
  -- Expired unreleased: the lock-delay keeps the lock unavailable until the key
  -- itself expires.
  if available_in > 0 then
    return {0, cur[3], tonumber(cur[2]), 0, available_in}
  end
end

-- The fence exceeds the last one issued, the time in microseconds and the
-- broker's floor, so it grows even when Redis lost the counter.
local last = math.max(tonumber(redis.call('GET', fence_key) or '0'), tonumber(cur[2] or '0'))
local fence = math.max(last + 1, now_us, floor + 1)
if fence >= 9007199254740992 then
  return redis.error_reply('ERR lockbroker fence would exceed 2^53')
end
local fence_text = string.format('%d', fence)
local exp = now_ms + ttl

redis.call('SET', fence_key, fence_text, 'PX', fence_idle)
redis.call('DEL', lease_key)
redis.call('HSET', lease_key,
  'token', token, 'fence', fence_text, 'owner', owner, 'rid', rid,
  'acq', string.format('%d', now_ms), 'exp', string.format('%d', exp),
  'delay', string.format('%d', delay))
redis.call('PEXPIRE', lease_key, ttl + delay)
return {1, token, fence, ttl, exp, owner}
