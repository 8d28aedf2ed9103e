-- Quorum mode: readmits a node that restarted without its data. Its fence
-- marks are gone, so before it counts toward any majority its fence floor is
-- raised to the highest fence the other nodes know: every grant it makes
-- from then on issues a fence above every fence issued before the restart.
-- Brokers call it for a node whose epoch still has marks pending; it is
-- idempotent, and any broker may finish what another began.
--
-- KEYS[1] epoch hash
-- ARGV[1] the node's epoch id, as the broker read it  ARGV[2] the floor
--
-- Returns 1 when the floor is in place, 0 when the epoch changed meanwhile.

local epoch_key = KEYS[1]
local epoch = redis.call('HMGET', epoch_key, 'id', 'floor')
if epoch[1] ~= ARGV[1] then
  return 0
end
local floor = tonumber(ARGV[2])
if floor > tonumber(epoch[2] or '0') then
  redis.call('HSET', epoch_key, 'floor', string.format('%d', floor))
end
redis.call('HDEL', epoch_key, 'pending')
return 1
