-- Quorum mode: a node's epoch, made when the node is first seen empty, and
-- its lease horizon. A node restarted without its data gets a new epoch, made
-- by the first broker to notice, which also sets until when the node stays out
-- of every majority: until every lease that could have been on it has
-- expired, as the other nodes' horizons say.
--
-- KEYS[1] epoch hash  KEYS[2] lease horizon
-- ARGV[1] an epoch id to make if the node has none ('' to only read)
-- ARGV[2] for a new epoch: how long (ms) the node stays out of majorities
--
-- A new epoch starts with its fence marks pending: the node stays out of
-- majorities until a broker has raised its fence floor from the other nodes
-- (readmit.lua).
--
-- Returns {epoch id ('' for none), out of majorities until (ms), now (ms),
-- lease horizon (ms, 0 for none), marks pending (1 or 0), the highest fence
-- the node issued or took in this epoch}, times by the node's clock.

local epoch_key, horizon_key = KEYS[1], KEYS[2]
local fresh_id, quarantine_ms = ARGV[1], tonumber(ARGV[2])
local _, now_ms = clock()
local epoch = redis.call('HMGET', epoch_key, 'id', 'until', 'pending', 'max')
if not epoch[1] and fresh_id ~= '' then
  local until_text = string.format('%d', now_ms + quarantine_ms)
  redis.call('HSET', epoch_key, 'id', fresh_id, 'until', until_text, 'pending', '1')
  epoch = {fresh_id, until_text, '1', false}
end
local horizon = tonumber(redis.call('GET', horizon_key) or '0')
local pending = 0
if epoch[3] == '1' then
  pending = 1
end
return {epoch[1] or '', tonumber(epoch[2] or '0'), now_ms, horizon, pending,
  tonumber(epoch[4] or '0')}
