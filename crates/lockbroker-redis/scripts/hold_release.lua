#!lua flags=allow-oom
-- Gives back a shared lease or a permit at once, as release.lua does for an
-- exclusive lease, and announces it when somebody waits for the name: each
-- release frees one place and wakes one waiter.
--
-- KEYS[1] the name's lease hash, from which its other keys are named
-- (lock_key): 'holders', 'members' (holder leases), 'released' (released
-- holders), 'queue' and 'queue:expiry'
-- ARGV[1..6] as release.lua
--
-- Returns as release.lua.

local lease_key = KEYS[1]
local holders_key, members_key = lock_key(lease_key, 'holders'), lock_key(lease_key, 'members')
local released_key = lock_key(lease_key, 'released')
local queue_key, expiry_key = lock_key(lease_key, 'queue'), lock_key(lease_key, 'queue:expiry')
local token, memo_ms, from = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local _, now_ms = clock()

if (ARGV[4] or '') ~= '' then
  queue_join(queue_key, expiry_key, ARGV[4], tonumber(ARGV[5]), now_ms, tonumber(ARGV[6]))
end

local lease = holder_read(members_key, token)
if not lease then
  return {0}
end
if lease.k then
  return {-3, lease.k}
end
if lease.x == '1' then
  return {1, tonumber(lease.f), -1}
end
if tonumber(lease.e) <= now_ms then
  return {0}
end

redis.call('ZREM', holders_key, token)
if memo_ms == 0 then
  -- A quorum undoing a grant a majority did not make leaves no memo (as in
  -- release.lua): the copy is forgotten.
  holder_forget(members_key, token)
else
  -- Keep the lease as a memo marked released until memo_ms from now, among
  -- the name's latest HOLDER_MEMOS releases: the oldest memo makes room.
  lease.x = '1'
  lease.e = string.format('%d', now_ms)
  holder_write(members_key, token, lease)
  redis.call('ZADD', released_key, now_ms + memo_ms, token)
  if redis.call('ZCARD', released_key) > HOLDER_MEMOS then
    holder_forget(members_key, redis.call('ZPOPMIN', released_key)[1])
  end
  keep_for(released_key, memo_ms)
  keep_for(members_key, memo_ms)
end

local head
if redis.call('EXISTS', queue_key) == 1 then
  head = queue_head(queue_key, expiry_key, now_ms)
end
if head or redis.call('HGET', members_key, '#w') == '1' then
  announce(from, 'released', head)
end
-- With no lease left in the way, nobody waits for one any more.
if redis.call('ZCARD', holders_key) == 0 then
  redis.call('HDEL', members_key, '#w')
end
return {1, tonumber(lease.f), now_ms - tonumber(lease.a)}
