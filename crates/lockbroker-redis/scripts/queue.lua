-- Fair queue helpers, prepended to the scripts that use them.
--
-- A lock's fair queue is a sorted set of waiter ids scored by arrival (Redis
-- time in microseconds) beside a hash of each entry's expiry (ms). Waiters
-- refresh their entry while they wait; an entry whose waiter or broker
-- disappeared expires and is pruned from the front, so it never blocks the line
-- for longer than its entry TTL.

-- The first live waiter id, pruning expired entries in front of it.
local function queue_head(queue_key, expiry_key, now_ms)
  for _ = 1, 100 do
    local head = redis.call('ZRANGE', queue_key, 0, 0)[1]
    if not head then
      return nil
    end
    if tonumber(redis.call('HGET', expiry_key, head) or '0') > now_ms then
      return head
    end
    redis.call('ZREM', queue_key, head)
    redis.call('HDEL', expiry_key, head)
  end
  -- Bounded work per call: the rest is pruned by later calls.
  return redis.call('ZRANGE', queue_key, 0, 0)[1]
end

-- Joins the queue (keeping the first arrival time) or refreshes the entry;
-- returns how many waiters are ahead.
local function queue_join(queue_key, expiry_key, waiter_id, now_us, now_ms, entry_ttl)
  redis.call('ZADD', queue_key, 'NX', now_us, waiter_id)
  redis.call('HSET', expiry_key, waiter_id, string.format('%d', now_ms + entry_ttl))
  redis.call('PEXPIRE', queue_key, entry_ttl * 2)
  redis.call('PEXPIRE', expiry_key, entry_ttl * 2)
  return redis.call('ZRANK', queue_key, waiter_id)
end

local function queue_leave(queue_key, expiry_key, waiter_id)
  redis.call('ZREM', queue_key, waiter_id)
  redis.call('HDEL', expiry_key, waiter_id)
end

-- Where a caller that is turned away stands in the queue: a waiter keeps
-- (or takes) its place when it always joins (`always`), when the queue
-- exists, or when `blocked` says it must (shared leases in an exclusive
-- waiter's way); how many are ahead, or -1 outside the queue.
local function queue_place(queue_key, expiry_key, waiter_id, always, blocked, arrival_us,
    now_ms, entry_ttl)
  if waiter_id == '' then
    return -1
  end
  if not always and not blocked and redis.call('EXISTS', queue_key) == 0 then
    return -1
  end
  return queue_join(queue_key, expiry_key, waiter_id, arrival_us, now_ms, entry_ttl)
end

-- Before a grant: waiters queued for the name go first, in arrival order.
-- Returns false when an earlier waiter is first in line (the caller is
-- busy); otherwise takes the caller's own entry out if it was first.
local function queue_lets_in(queue_key, expiry_key, waiter_id, now_ms)
  if redis.call('EXISTS', queue_key) == 0 then
    return true
  end
  local head = queue_head(queue_key, expiry_key, now_ms)
  if head and head ~= waiter_id then
    return false
  end
  if head then
    queue_leave(queue_key, expiry_key, waiter_id)
  end
  return true
end

-- After a grant to a waiter: the waiter now first in line learns it, so it
-- can sleep until a lease frees instead of until its next refresh (or take
-- a place that is still free).
local function queue_tell_next(queue_key, expiry_key, waiter_id, now_ms, from)
  if waiter_id == '' then
    return
  end
  local next_head = queue_head(queue_key, expiry_key, now_ms)
  if next_head then
    announce(from, 'turn', next_head)
  end
end
