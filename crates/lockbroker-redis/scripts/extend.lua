#!lua flags=allow-oom
-- Sets the remaining validity of a held lease to ttl_ms (replace, not add).
--
-- KEYS[1] lease hash  KEYS[2] lease horizon (quorum mode only)
-- ARGV[1] token  ARGV[2] ttl_ms  ARGV[3] max_hold_ms (0: no limit)
-- ARGV[4] fence_idle_ms: how long the hash keeps the name's last fence (acquire.lua)
--
-- Returns {1, fence, ttl_ms, expires_at_ms, owner} when extended,
--         {0} when the token holds no valid lease,
--         {-2} when the token's lease was released by its holder (while the
--         release is remembered, also after the lock was granted again),
--         {-1, expires_in_ms} when the max hold would be exceeded,
--         {-3, principal} when an operator force-released the lease (while
--         remembered; principal '' for a broker without API keys).
-- Re-sending the same extend is harmless: it sets the same kind of expiry.
-- Flagged allow-oom: it only rewrites a field of an existing hash, and a
-- holder must keep (or shorten) its lease even when Redis is out of memory.

local lease_key = KEYS[1]
local token, ttl, max_hold = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local fence_idle = tonumber(ARGV[4])

local _, now_ms = clock()

local cur = redis.call('HMGET', lease_key, 'token', 'fence', 'owner', 'acq', 'exp', 'delay', 'rel',
  'mu', 'f', 'ke')
if not cur[1] then
  return {0}
end
if cur[1] ~= token then
  -- Released (or force-released), and the lock perhaps granted again since
  -- (memos.lua).
  local fence, forced_by = memo_fence(lease_key, token, now_ms)
  if forced_by then
    return {-3, forced_by}
  end
  if fence then
    return {-2}
  end
  return {0}
end
if cur[7] == '1' then
  return {-2}
end
local exp = tonumber(cur[5])
if exp <= now_ms then
  return {0}
end
local new_exp = now_ms + ttl
if max_hold > 0 and new_exp > tonumber(cur[4]) + max_hold then
  return {-1, exp - now_ms}
end

local expire_ms, ke = lease_hash_expiry(cur[10], cur[9] ~= false, ttl + tonumber(cur[6]), cur[8],
  fence_idle, now_ms)
if expire_ms then
  redis.call('HSET', lease_key, 'exp', string.format('%d', new_exp), 'ke', ke)
  redis.call('PEXPIRE', lease_key, expire_ms)
else
  redis.call('HSET', lease_key, 'exp', string.format('%d', new_exp))
end
if KEYS[2] then
  raise_horizon(KEYS[2], new_exp + tonumber(cur[6]), now_ms)
end
return {1, tonumber(cur[2]), ttl, new_exp, cur[3]}
