#!lua flags=allow-oom
-- Ends whatever holds a name (an operator override): its exclusive lease (or
-- lock-delay) and every lease of its holder set, and announces the release
-- to every broker, exactly as release.lua does.
--
-- KEYS[1] lease hash; the name's other keys are named from it (lock_key):
-- 'queue' and 'queue:expiry' (its fair queue), 'holders', 'members' (holder
-- leases) and 'released' (released holders)
-- ARGV[1] what an announcement needs (acquire.lua's ARGV[6])
-- ARGV[2] memo_ms: how long each lease ended is remembered as
--         force-released (0: not at all)
-- ARGV[3] principal: the operator who asks ('' for a broker without API keys)
--
-- Returns {leases ended, highest fence among them, owner of the exclusive
-- lease ('' for none), 1 when an exclusive lease was among them else 0};
-- {0, 0, '', 0} when nothing held the name.
--
-- A former holder's token stops working at once, and a release it sends
-- later must never answer "released", since another holder may run by
-- then. Each valid lease ended is remembered instead, with the principal,
-- where releases are (no key of its own): an exclusive lease among the
-- lock's release memos (memos.lua) in a hash left as a released lease's is,
-- a shared lease or a permit as a released place marked with k, among the
-- holder set's latest HOLDER_MEMOS releases (holders.lua). Its extend and
-- release then answer that it was force-released, and by whom, until the
-- memo ends; then lost. A lease past its expiry (only its lock-delay left)
-- was lost before and is not remembered. The name's last fence (`f`,
-- acquire.lua) stays with the hash, so the next grant still gets a larger
-- fence.

local lease_key = KEYS[1]
local queue_key, expiry_key = lock_key(lease_key, 'queue'), lock_key(lease_key, 'queue:expiry')
local holders_key, members_key = lock_key(lease_key, 'holders'), lock_key(lease_key, 'members')
local released_key = lock_key(lease_key, 'released')
local from, memo_ms, principal = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local _, now_ms = clock()
local ended, fence, owner, exclusive = 0, 0, '', 0

-- A lease that ended unreleased past its lock-delay holds nothing, though
-- its hash may outlive it with the lock's release memos.
local cur = redis.call('HMGET', lease_key, 'fence', 'owner', 'rel', 'exp', 'delay', 'token',
  'mn', 'mu', 'f')
-- A hash that keeps the name's last fence lives as long as a grant made it
-- (fence_idle_ms, past every memo); one from an older broker, which kept the
-- fence in a key of its own, lives only as long as its memos.
local keeps_fence = cur[9] ~= false and cur[9] ~= nil
if cur[1] and cur[3] ~= '1' and tonumber(cur[4]) + tonumber(cur[5] or '0') > now_ms then
  ended, fence, owner, exclusive = 1, tonumber(cur[1]), cur[2] or '', 1
  if memo_ms > 0 and tonumber(cur[4]) > now_ms then
    -- Left as a released lease whose token names no lease (acquire and
    -- status treat it as free), with this one among the memos.
    redis.call('HSET', lease_key, 'rel', '1', 'exp', string.format('%d', now_ms), 'token', '',
      memo_fields(cur[7], cur[6], cur[1], now_ms + memo_ms, principal))
    if not keeps_fence then
      redis.call('PEXPIRE', lease_key, memo_ms)
    end
  else
    local keep_ms = keep_ms_with_memos(0, cur[8], now_ms)
    if keeps_fence then
      redis.call('HSET', lease_key, 'rel', '1', 'exp', string.format('%d', now_ms), 'token', '')
    elseif keep_ms > 0 then
      redis.call('HSET', lease_key, 'rel', '1', 'exp', string.format('%d', now_ms), 'token', '')
      redis.call('PEXPIRE', lease_key, keep_ms)
    else
      redis.call('DEL', lease_key)
    end
  end
end

local entries = redis.call('ZRANGE', holders_key, 0, -1, 'WITHSCORES')
for i = 1, #entries, 2 do
  local token, until_ms = entries[i], tonumber(entries[i + 1])
  local lease = holder_read(members_key, token)
  if lease and until_ms > now_ms then
    ended = ended + 1
    fence = math.max(fence, tonumber(lease.f))
  end
  if lease and memo_ms > 0 and tonumber(lease.e) > now_ms then
    lease.x, lease.k, lease.e = '1', principal, string.format('%d', now_ms)
    holder_write(members_key, token, lease)
    redis.call('ZADD', released_key, now_ms + memo_ms, token)
  else
    holder_forget(members_key, token)
  end
end
redis.call('DEL', holders_key)
redis.call('HDEL', members_key, '#limit', '#w')
if memo_ms > 0 and redis.call('EXISTS', released_key) == 1 then
  -- The latest HOLDER_MEMOS releases stay remembered, as hold_release.lua keeps them.
  local excess = redis.call('ZCARD', released_key) - HOLDER_MEMOS
  if excess > 0 then
    local popped = redis.call('ZPOPMIN', released_key, excess)
    for i = 1, #popped, 2 do
      holder_forget(members_key, popped[i])
    end
  end
  keep_for(released_key, memo_ms)
  keep_for(members_key, memo_ms)
end

if ended > 0 then
  local head
  if redis.call('EXISTS', queue_key) == 1 then
    head = queue_head(queue_key, expiry_key, now_ms)
  end
  announce(from, 'released', head)
end
return {ended, fence, owner, exclusive}
