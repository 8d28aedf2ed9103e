#!lua flags=allow-oom
-- Ends whatever lease holds a lock (an operator override) and announces the
-- release to every broker, exactly as release.lua does.
--
-- KEYS[1] lease hash  KEYS[2] fair queue  KEYS[3] queue expiries
-- ARGV[1] wake channel  ARGV[2] calling broker id  ARGV[3] lock name
--
-- Returns {1, fence, owner} when a lease (or its lock-delay) was ended,
--         {0} when nothing held the lock.
--
-- The lease hash is deleted, not marked released: the former holder's token
-- must stop working at once, and a release it sends later must answer "lost"
-- rather than "already released", since another holder may run by then. The
-- fence key stays, so the next grant still gets a larger fence.

local lease_key, queue_key, expiry_key = KEYS[1], KEYS[2], KEYS[3]
local channel, broker_id, name = ARGV[1], ARGV[2], ARGV[3]

local cur = redis.call('HMGET', lease_key, 'fence', 'owner', 'rel')
if not cur[1] or cur[3] == '1' then
  return {0}
end
redis.call('DEL', lease_key)

local _, now_ms = clock()
local head
if redis.call('EXISTS', queue_key) == 1 then
  head = queue_head(queue_key, expiry_key, now_ms)
end
announce(channel, broker_id, 'released', name, head)
return {1, tonumber(cur[1]), cur[2] or ''}
