-- Grants every lease of one acquire-all, or none, in one step, where every
-- lock lives on this one server (single and Sentinel mode). Each lock's
-- grant runs as its own step would (acquire.lua or hold.lua); when one is
-- refused, each grant before it is undone by putting back every key its
-- step could change, as it was, so no other caller ever sees a part of the
-- set held, and no trace of the undone grants stays (their fences, never
-- handed out, are taken back with their hashes).
--
-- KEYS and ARGV: one part per lock (prelude.lua's parts_of), its step 1
-- for acquire.lua, 2 for hold.lua.
--
-- Returns {1, length, reply, length, reply, ...} when every lock was
-- granted (each reply as its step answers it), or {0, i, length, reply}
-- when lock i (from 1) was refused and nothing was granted.

-- A key as it is now: its type, value and remaining time to live.
local function saved(key)
  local kind = redis.call('TYPE', key)['ok']
  local value = nil
  if kind == 'hash' then
    value = redis.call('HGETALL', key)
  elseif kind == 'zset' then
    value = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  elseif kind == 'string' then
    value = redis.call('GET', key)
  elseif kind ~= 'none' then
    error('lockbroker acquire_together.lua: cannot put back a ' .. kind)
  end
  return {key, kind, value, redis.call('PTTL', key)}
end

local function put_back(copy)
  local key, kind, value, ttl = copy[1], copy[2], copy[3], copy[4]
  redis.call('DEL', key)
  if kind == 'hash' and #value > 0 then
    redis.call('HSET', key, unpack(value))
  elseif kind == 'zset' and #value > 0 then
    local scored = {}
    for j = 1, #value, 2 do
      scored[#scored + 1] = value[j + 1]
      scored[#scored + 1] = value[j]
    end
    redis.call('ZADD', key, unpack(scored))
  elseif kind == 'string' then
    redis.call('SET', key, value)
  end
  if kind ~= 'none' and ttl > 0 then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- The keys a lock's step may change, named from its lease hash (the part's
-- first key, from which the step names the rest: prelude.lua's lock_key).
-- The old brokers' fence key is only read.
local function keys_changed(step, lease_key)
  local keys = {lease_key, lock_key(lease_key, 'queue'), lock_key(lease_key, 'queue:expiry'),
    lock_key(lease_key, 'holders'), lock_key(lease_key, 'members')}
  if step == 2 then
    keys[#keys + 1] = lock_key(lease_key, 'released')
  end
  return keys
end

local reply = {1}
local copies = {}
for i, part in ipairs(parts_of(KEYS, ARGV)) do
  local step, keys, args = part[1], part[2], part[3]
  local changed = keys_changed(step, keys[1])
  for _, key in ipairs(changed) do
    copies[#copies + 1] = saved(key)
  end
  local answer
  if step == 1 then
    answer = acquire(keys, args)
  else
    answer = hold(keys, args)
  end
  if answer[1] ~= 1 and answer[1] ~= 2 then
    -- Refused: the grants before it are put back; this lock's own answer
    -- (a busy answer marking its holder for a waiter) stands.
    for c = #copies - #changed, 1, -1 do
      put_back(copies[c])
    end
    local refused = {0, i}
    append_answer(refused, answer)
    return refused
  end
  append_answer(reply, answer)
end
return reply
