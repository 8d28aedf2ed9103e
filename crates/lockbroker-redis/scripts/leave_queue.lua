#!lua flags=allow-oom
-- Takes a fair waiter that gave up out of a lock's queue. If the lock is free,
-- the waiter now first in line is told, so the line never stalls on a leaver.
--
-- KEYS[1] lease hash  KEYS[2] fair queue  KEYS[3] queue expiries
-- ARGV[1] waiter id  ARGV[2] wake channel  ARGV[3] calling broker id  ARGV[4] lock name

local lease_key, queue_key, expiry_key = KEYS[1], KEYS[2], KEYS[3]
local waiter_id, channel, broker_id, name = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local _, now_ms = clock()

queue_leave(queue_key, expiry_key, waiter_id)

local cur = redis.call('HMGET', lease_key, 'exp', 'rel')
local free = not cur[1] or cur[2] == '1' or tonumber(cur[1]) <= now_ms
if free and redis.call('EXISTS', queue_key) == 1 then
  local head = queue_head(queue_key, expiry_key, now_ms)
  if head then
    announce(channel, broker_id, 'turn', name, head)
  end
end
return 1
