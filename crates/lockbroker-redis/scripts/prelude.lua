-- Shared by every script (Redis has no `require`, so this text is prepended):
-- Redis's clock, a lock's keys, and the announcements brokers subscribe to.

-- Redis's clock: microseconds and milliseconds since the Unix epoch.
local function clock()
  local time = redis.call('TIME')
  local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  return now_us, math.floor(now_us / 1000)
end

-- Another key of the lock whose lease hash is `lease_key`: the keys of one
-- lock differ only in their last part (keys.rs: '<prefix>:{<name>}:lease',
-- ':queue', ...), so a step is sent the lease hash's name alone and names
-- the others itself, and only those it touches. They share its hash tag,
-- and so its Cluster slot.
local function lock_key(lease_key, part)
  return string.sub(lease_key, 1, -6) .. part
end

-- Tells every broker that a lock freed (kind 'released') or that a fair
-- waiter is now first in line (kind 'turn'), as one Pub/Sub message:
-- '<broker id> <kind> <lock name> <fair waiter id, or ->'. wakes.rs reads it.
-- `from` is the step's one argument for announcing, split only here:
-- '<channel> <broker id> <lock name>' (neither of the last two holds a
-- space). A channel with a hash tag is the lock's own in a Redis Cluster
-- (key prefixes cannot hold braces): it is published on the lock's shard
-- only.
local function announce(from, kind, waiter)
  local channel, broker_id, name = string.match(from, '^(.*) (%S+) (%S+)$')
  local command = 'PUBLISH'
  if string.find(channel, '{', 1, true) then
    command = 'SPUBLISH'
  end
  redis.call(command, channel, broker_id .. ' ' .. kind .. ' ' .. name .. ' ' .. (waiter or '-'))
end

-- Quorum mode: how far beyond what a grant needs a node's lease horizon
-- (ms) and its highest fence (µs, as quorum fences count) are raised. The
-- grants that follow within that margin need no write of either, so a busy
-- node writes each about once a second instead of on every grant. Both are
-- bounds, never exact: a horizon ahead keeps a node that restarts empty out
-- of majorities up to a second longer, and a highest fence ahead raises a
-- readmitted node's floor (and so the next fences) by up to a second's worth.
local QUORUM_MARK_LEAD = 1000000

-- Quorum mode: raises a node's lease horizon (the latest instant, ms, that
-- any lease on it may stay valid) to at least `until_ms`, a second beyond it
-- when it must move. The key lives as long as the horizon it records, so it
-- never outlasts the leases it speaks for by more than that second.
local function raise_horizon(horizon_key, until_ms, now_ms)
  local horizon = tonumber(redis.call('GET', horizon_key) or '0')
  if until_ms > horizon and until_ms > now_ms then
    local ahead = until_ms + QUORUM_MARK_LEAD / 1000
    redis.call('SET', horizon_key, string.format('%d', ahead), 'PX', ahead - now_ms)
  end
end

-- Quorum mode: whether a node may grant: its epoch must be the one the broker
-- knows, past the time it stays out of majorities after a restart, with its
-- fence marks in place. Returns {the fence floor after a restart without
-- data, the node's highest fence}, or nil. Outside quorum mode (no epoch
-- id) every node may: {0, 0}.
local function quorum_standing(epoch_key, epoch_id, now_ms)
  if epoch_id == '' then
    return {0, 0}
  end
  local epoch = redis.call('HMGET', epoch_key, 'id', 'until', 'pending', 'floor', 'max')
  if epoch[1] ~= epoch_id or tonumber(epoch[2]) > now_ms or epoch[3] == '1' then
    return nil
  end
  return {tonumber(epoch[4] or '0'), tonumber(epoch[5] or '0')}
end

-- The last fence issued for a name: the lease hash keeps it (`f`, beside
-- the fence of the lease it holds, `fence`). A hash without `f` was written
-- by a broker that kept the fence in a key of its own (the lock's 'fence'
-- key beside `lease_key`), which is read then, and only then: one Redis
-- shared by both during an upgrade never issues a fence below one either
-- issued.
local function last_fence(f, lease_fence, lease_key)
  local last = tonumber(lease_fence or '0')
  if f then
    return math.max(tonumber(f), last)
  end
  return math.max(tonumber(redis.call('GET', lock_key(lease_key, 'fence')) or '0'), last)
end

-- Issues the fence of a grant: above the last one issued (`last`), the time
-- in microseconds and the broker's floor, so it grows even when Redis lost
-- the counter. The caller keeps it as the name's last fence (`f` in the
-- lease hash). Returns the fence, its text, and 1 when the broker's floor
-- set it (Redis lost its data and its clock runs behind), else 0.
local function issue_fence(last, now_us, floor)
  local fence = math.max(last + 1, now_us, floor + 1)
  if fence >= 9007199254740992 then
    error('lockbroker fence would exceed 2^53')
  end
  local floor_raised = 0
  if floor + 1 > last + 1 and floor + 1 > now_us then
    floor_raised = 1
  end
  return fence, string.format('%d', fence), floor_raised
end

-- Quorum mode: after a grant valid until `until_ms`, raises the node's lease
-- horizon, and its highest fence (from which a node that restarts empty is
-- readmitted), each with QUORUM_MARK_LEAD to spare.
local function record_grant(horizon_key, epoch_key, until_ms, fence, node_max, now_ms)
  raise_horizon(horizon_key, until_ms, now_ms)
  if fence > node_max then
    redis.call('HSET', epoch_key, 'max', string.format('%d', fence + QUORUM_MARK_LEAD))
  end
end

-- The parts of a step over several leases (acquire_together.lua,
-- extend_together.lua): ARGV[1] how many; then per part its step (a
-- number), how many KEYS and how many ARGV it takes; then every part's ARGV
-- in turn. KEYS: every part's KEYS in turn. Returns {{step, keys, args}...}.
local function parts_of(keys_in, argv)
  local n = tonumber(argv[1])
  local parts = {}
  local key_at, arg_at = 1, 2 + 3 * n
  for i = 1, n do
    local head = 2 + 3 * (i - 1)
    local key_count, arg_count = tonumber(argv[head + 1]), tonumber(argv[head + 2])
    local keys, args = {}, {}
    for k = 1, key_count do
      keys[k] = keys_in[key_at + k - 1]
    end
    for a = 1, arg_count do
      args[a] = argv[arg_at + a - 1]
    end
    key_at, arg_at = key_at + key_count, arg_at + arg_count
    parts[i] = {tonumber(argv[head]), keys, args}
  end
  return parts
end

-- Appends one part's answer to `reply`: its length, then its items.
local function append_answer(reply, answer)
  reply[#reply + 1] = #answer
  for _, item in ipairs(answer) do
    reply[#reply + 1] = item
  end
end
