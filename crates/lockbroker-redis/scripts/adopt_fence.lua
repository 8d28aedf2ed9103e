-- Quorum mode: after a majority granted a lease, writes the lease's final
-- fence back to a node that granted it, and raises the node's fence
-- high-water mark to it, but only while that node still holds the lease with
-- this token (a lease that already expired or was released there is left
-- alone). Also raises the node's lease horizon: the latest instant any lease on
-- it may stay valid (lock-delay included), which bounds how long a node that
-- restarts empty must stay out of every majority.
--
-- Only a node in good standing counts: its epoch must be the one the broker
-- knows, and past the time it stays out of majorities after a restart. A
-- node that restarted empty since the broker last looked has no such epoch.
--
-- KEYS[1] lease hash (with the name's last fence, as acquire.lua keeps it)
-- KEYS[2] lease horizon  KEYS[3] epoch hash  KEYS[4] holder leases, for a
-- shared lease or a permit (holders.lua; absent for an exclusive lease)
-- ARGV[1] token  ARGV[2] fence  ARGV[3] fence_idle_ms  ARGV[4] expected epoch id
--
-- Returns {1} when written back, {0} when the node no longer holds the lease,
-- {-1} when the node is not in good standing (nothing written).

local lease_key, horizon_key, epoch_key = KEYS[1], KEYS[2], KEYS[3]
local token, fence, fence_idle = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local _, now_ms = clock()
local epoch = redis.call('HMGET', epoch_key, 'id', 'until', 'pending', 'max')
if epoch[1] ~= ARGV[4] or tonumber(epoch[2]) > now_ms or epoch[3] == '1' then
  return {-1}
end
local fence_text = string.format('%d', fence)
local cur
if KEYS[4] then
  -- A shared lease or a permit: its lease lives in the holder set.
  local lease = holder_read(KEYS[4], token)
  if not lease or lease.x == '1' or tonumber(lease.e) <= now_ms then
    return {0}
  end
  lease.f = fence_text
  holder_write(KEYS[4], token, lease)
  cur = {token, lease.e, '0', lease.d}
else
  cur = redis.call('HMGET', lease_key, 'token', 'exp', 'rel', 'delay')
  if cur[1] ~= token or cur[3] == '1' or tonumber(cur[2]) <= now_ms then
    return {0}
  end
  redis.call('HSET', lease_key, 'fence', fence_text)
end
local marks = redis.call('HMGET', lease_key, 'f', 'mu', 'ke')
if fence > last_fence(marks[1], nil, lease_key) then
  local expire_ms, ke = lease_hash_expiry(marks[3], marks[1] ~= false,
    tonumber(cur[2]) + tonumber(cur[4]) - now_ms, marks[2], fence_idle, now_ms)
  redis.call('HSET', lease_key, 'f', fence_text)
  if expire_ms then
    redis.call('HSET', lease_key, 'ke', ke)
    redis.call('PEXPIRE', lease_key, expire_ms)
  end
end
if fence > tonumber(epoch[4] or '0') then
  redis.call('HSET', epoch_key, 'max', fence_text)
end
raise_horizon(horizon_key, tonumber(cur[2]) + tonumber(cur[4]), now_ms)
return {1}
