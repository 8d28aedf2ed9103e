#!lua flags=allow-oom
-- Sets the remaining validity of a shared lease or a permit to ttl_ms, as
-- extend.lua does for an exclusive lease.
--
-- KEYS[1] the name's lease hash, from which its holder set ('holders') and
-- holder leases ('members') are named (lock_key)
-- KEYS[2] lease horizon (quorum mode only)
-- ARGV[1] token  ARGV[2] ttl_ms  ARGV[3] max_hold_ms (0: no limit)
--
-- Returns as extend.lua, with the semaphore's limit in force (-1 for none)
-- after an extended lease's owner.

local holders_key, members_key = lock_key(KEYS[1], 'holders'), lock_key(KEYS[1], 'members')
local token, ttl, max_hold = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local _, now_ms = clock()

local lease = holder_read(members_key, token)
if not lease then
  return {0}
end
if lease.k then
  return {-3, lease.k}
end
if lease.x == '1' then
  return {-2}
end
local exp = tonumber(lease.e)
if exp <= now_ms then
  return {0}
end
local new_exp = now_ms + ttl
if max_hold > 0 and new_exp > tonumber(lease.a) + max_hold then
  return {-1, exp - now_ms}
end

local delay = tonumber(lease.d)
lease.e = string.format('%d', new_exp)
holder_write(members_key, token, lease)
redis.call('ZADD', holders_key, 'XX', new_exp + delay, token)
keep_for(holders_key, ttl + delay)
keep_for(members_key, ttl + delay)
if KEYS[2] then
  raise_horizon(KEYS[2], new_exp + delay, now_ms)
end
return {1, tonumber(lease.f), ttl, new_exp, lease.o,
  tonumber(redis.call('HGET', members_key, '#limit') or '-1')}
