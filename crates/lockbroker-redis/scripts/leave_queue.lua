#!lua flags=allow-oom
-- Takes a fair waiter that gave up out of a lock's queue. If the lock is free,
-- the waiter now first in line is told, so the line never stalls on a leaver.
--
-- KEYS[1] lease hash; the lock's fair queue ('queue', 'queue:expiry') is
-- named from it (lock_key)
-- ARGV[1] waiter id  ARGV[2] what an announcement needs (acquire.lua's ARGV[6])

local lease_key = KEYS[1]
local queue_key, expiry_key = lock_key(lease_key, 'queue'), lock_key(lease_key, 'queue:expiry')
local waiter_id, from = ARGV[1], ARGV[2]

local _, now_ms = clock()

queue_leave(queue_key, expiry_key, waiter_id)

local cur = redis.call('HMGET', lease_key, 'exp', 'rel')
local free = not cur[1] or cur[2] == '1' or tonumber(cur[1]) <= now_ms
if free and redis.call('EXISTS', queue_key) == 1 then
  local head = queue_head(queue_key, expiry_key, now_ms)
  if head then
    announce(from, 'turn', head)
  end
end
return 1
