#!lua flags=allow-oom
-- A session's record beside its lease: its terms and the leases taken under
-- it (lockbroker-core's service/sessions.rs). A lease joins only while the
-- session's lease is valid, in this one step with the check, so a close (or
-- an expiry) never misses one.
--
-- KEYS[1] the session's lease hash  KEYS[2] its record hash
-- ARGV[1] the step: 'write', 'read' or 'forget'
-- write:  ARGV[2] the session's token  ARGV[3] the most leases the record may
--         hold (0: the terms are written)  ARGV[4..] field, value pairs: a
--         member lease's token and its name, or the terms ('#ttl', '#delay')
--   Returns {1, valid_for_ms, the session's expiry (Unix ms)} when written,
--   {0} when the token holds no
--   valid lease, {-1} when the record holds as many leases as it may.
-- read:   ARGV[2] the session's token, or '' to read without it
--   Returns {valid_for_ms (-1: no token, or it holds no valid lease),
--   the session's owner ('' without a valid token, or none), field, value,
--   ...}.
-- forget: ARGV[2..] the member tokens to take out; none: the whole record.
--   Returns {1}.
-- The record lives as long as the session's lease plus a grace, so a close
-- or a keepalive just after the lease's end still finds its leases.
-- Flagged allow-oom: a keepalive starts here, and a holder must keep its
-- leases when Redis is out of memory; a join adds one short field.

local lease_key, record_key = KEYS[1], KEYS[2]
local step = ARGV[1]
local GRACE_MS = 60000

local _, now_ms = clock()

-- How long `token`'s lease stays valid, and when it expires; nil when it
-- is not valid.
local function valid_for(token)
  if token == '' then
    return nil
  end
  local cur = redis.call('HMGET', lease_key, 'token', 'exp', 'rel')
  if cur[1] ~= token or cur[3] == '1' then
    return nil
  end
  local exp = tonumber(cur[2])
  if exp <= now_ms then
    return nil
  end
  return exp - now_ms, exp
end

local function keep(left)
  local until_ms = left + GRACE_MS
  if redis.call('PTTL', record_key) < until_ms then
    redis.call('PEXPIRE', record_key, until_ms)
  end
end

if step == 'write' then
  local left, exp = valid_for(ARGV[2])
  if not left then
    return {0}
  end
  local max = tonumber(ARGV[3])
  if max > 0 and redis.call('HEXISTS', record_key, ARGV[4]) == 0 then
    local members = redis.call('HLEN', record_key) - redis.call('HEXISTS', record_key, '#ttl')
      - redis.call('HEXISTS', record_key, '#delay')
    if members >= max then
      return {-1}
    end
  end
  local fields = {}
  for i = 4, #ARGV do
    fields[#fields + 1] = ARGV[i]
  end
  redis.call('HSET', record_key, unpack(fields))
  keep(left)
  return {1, left, exp}
end

if step == 'read' then
  local left = valid_for(ARGV[2])
  local reply = {left or -1, ''}
  if left then
    keep(left)
    reply[2] = redis.call('HGET', lease_key, 'owner') or ''
  end
  for _, item in ipairs(redis.call('HGETALL', record_key)) do
    reply[#reply + 1] = item
  end
  return reply
end

if step == 'forget' then
  if #ARGV == 1 then
    redis.call('DEL', record_key)
  else
    local tokens = {}
    for i = 2, #ARGV do
      tokens[#tokens + 1] = ARGV[i]
    end
    redis.call('HDEL', record_key, unpack(tokens))
  end
  return {1}
end

return redis.error_reply('lockbroker session.lua: unknown step ' .. tostring(step))
