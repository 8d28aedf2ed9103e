-- Holder-set helpers, prepended to every script: the leases of a name that
-- many may hold at once (a lock's shared leases, a semaphore's permits).
--
-- A holder set is a sorted set of tokens scored by the instant (ms) each
-- lease stops occupying its place (expiry plus lock-delay), beside a hash of
-- each token's lease as JSON text (numbers as strings, so fences keep every
-- digit; x '1' once released, k the principal of a force release) and, while a released lease is remembered, a sorted set of released
-- tokens scored by when the memo ends. The hash also keeps the request_id
-- index ('r:<principal>:<request_id>' -> token), the limit in force of a
-- semaphore ('#limit') and whether a turned-away caller waits ('#w').
-- Lookups and grants are O(log holders); pruning takes at most 100 entries
-- per call, leaving the rest to later calls. Released leases are
-- remembered for the memo time, at most HOLDER_MEMOS of them per name (the
-- latest), so that a re-sent release still reports its release after other
-- grants, and the memos stay bounded however fast places change hands.

local HOLDER_MEMOS = 64

local function holder_read(members_key, token)
  local text = redis.call('HGET', members_key, token)
  if not text then
    return nil
  end
  return cjson.decode(text)
end

local function holder_write(members_key, token, lease)
  redis.call('HSET', members_key, token, cjson.encode(lease))
end

-- Forgets a token's lease and its request_id index entry.
local function holder_forget(members_key, token)
  local lease = holder_read(members_key, token)
  if lease and lease.r ~= '' then
    redis.call('HDEL', members_key, 'r:' .. lease.b .. ':' .. lease.r)
  end
  redis.call('HDEL', members_key, token)
end

-- Drops holders that stopped occupying their place and memos past their time.
local function holders_prune(holders_key, members_key, released_key, now_ms)
  for _, key in ipairs({holders_key, released_key}) do
    local gone = redis.call('ZRANGEBYSCORE', key, '-inf', now_ms, 'LIMIT', 0, 100)
    for _, token in ipairs(gone) do
      holder_forget(members_key, token)
    end
    if #gone > 0 then
      redis.call('ZREM', key, unpack(gone))
    end
  end
end

-- Keeps `key` alive for at least `ms` more.
local function keep_for(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Up to `max` holders occupying a place at `now_ms`, soonest free first, as
-- {owner, fence, expires_in_ms, available_in_ms} each, flattened. Reads only.
local function holders_view(holders_key, members_key, now_ms, max)
  local view = {}
  local entries = redis.call('ZRANGEBYSCORE', holders_key, '(' .. now_ms, '+inf',
    'WITHSCORES', 'LIMIT', 0, max)
  for i = 1, #entries, 2 do
    local lease = holder_read(members_key, entries[i])
    if lease then
      local exp = tonumber(lease.e)
      view[#view + 1] = lease.o
      view[#view + 1] = tonumber(lease.f)
      view[#view + 1] = math.max(exp - now_ms, 0)
      view[#view + 1] = tonumber(entries[i + 1]) - now_ms
    end
  end
  return view
end

-- How many holders occupy a place at `now_ms`, and how many of them are
-- valid (the rest wait out their lock-delay). Reads only.
local function holders_count(holders_key, members_key, now_ms)
  local occupying = redis.call('ZCOUNT', holders_key, '(' .. now_ms, '+inf')
  if occupying == 0 then
    return 0, 0
  end
  local valid = 0
  local tokens = redis.call('ZRANGEBYSCORE', holders_key, '(' .. now_ms, '+inf')
  for _, token in ipairs(tokens) do
    local lease = holder_read(members_key, token)
    if lease and tonumber(lease.e) > now_ms then
      valid = valid + 1
    end
  end
  return occupying, valid
end
