#!lua flags=allow-oom
-- Ends whatever holds a name (an operator override): its exclusive lease (or
-- lock-delay) and every lease of its holder set, and announces the release
-- to every broker, exactly as release.lua does.
--
-- KEYS[1] lease hash  KEYS[2] fair queue  KEYS[3] queue expiries
-- KEYS[4] holders  KEYS[5] holder leases  KEYS[6] released holders
-- ARGV[1] wake channel  ARGV[2] calling broker id  ARGV[3] lock name
--
-- Returns {leases ended, highest fence among them, owner of the exclusive
-- lease ('' for none), 1 when an exclusive lease was among them else 0};
-- {0, 0, '', 0} when nothing held the name.
--
-- Leases are deleted, not marked released: a former holder's token must stop
-- working at once, and a release it sends later must answer "lost" rather
-- than "already released", since another holder may run by then. The
-- name's last fence stays, so the next grant still gets a larger fence.

local lease_key, queue_key, expiry_key = KEYS[1], KEYS[2], KEYS[3]
local holders_key, members_key, released_key = KEYS[4], KEYS[5], KEYS[6]
local channel, broker_id, name = ARGV[1], ARGV[2], ARGV[3]

local _, now_ms = clock()
local ended, fence, owner, exclusive = 0, 0, '', 0

-- A lease that ended unreleased past its lock-delay holds nothing, though
-- its hash may outlive it with the lock's release memos.
local cur = redis.call('HMGET', lease_key, 'fence', 'owner', 'rel', 'exp', 'delay')
if cur[1] and cur[3] ~= '1' and tonumber(cur[4]) + tonumber(cur[5] or '0') > now_ms then
  -- The lease's fields go; the lock's last fence (`f`, acquire.lua) and its
  -- release memos stay with the hash's own expiry.
  redis.call('HDEL', lease_key, 'token', 'fence', 'owner', 'rid', 'by', 'acq', 'exp', 'delay', 'rel',
    'w')
  ended, fence, owner, exclusive = 1, tonumber(cur[1]), cur[2] or '', 1
end

for _, token in ipairs(redis.call('ZRANGEBYSCORE', holders_key, '(' .. now_ms, '+inf')) do
  local lease = holder_read(members_key, token)
  if lease then
    ended = ended + 1
    fence = math.max(fence, tonumber(lease.f))
  end
end
redis.call('DEL', holders_key, members_key, released_key)

if ended > 0 then
  local head
  if redis.call('EXISTS', queue_key) == 1 then
    head = queue_head(queue_key, expiry_key, now_ms)
  end
  announce(channel, broker_id, 'released', name, head)
end
return {ended, fence, owner, exclusive}
