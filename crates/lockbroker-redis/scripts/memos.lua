-- Release memos, prepended to every script: the last few leases of a lock
-- released by their holders or force-released by an operator, kept in the
-- lock's own lease hash so that a release or an extend re-sent after the
-- next holder's grant still learns that its lease was released (fred
-- re-sends a command after a reconnect), and a force-released holder
-- learns who ended its lease instead of "lost".
--
-- Fields: m1 .. m4 hold '<token> <fence>' of a released lease each, or
-- '<token> <fence> !<principal>' of a force-released one (the principal
-- empty for a broker without API keys), written in turn (mn: the slot
-- written last); mu is when they are forgotten (ms): the latest release
-- plus its memo time. A grant and an extend keep the hash at least that
-- long, so memos cost no key of their own, and at most MEMO_SLOTS of them
-- are kept per lock; a force release keeps them too.

local MEMO_SLOTS = 4
-- Each slot's number and field as text, written without converting a Lua
-- number to text on every release (that conversion formats a float).
local MEMO_SLOT_TEXT = {'1', '2', '3', '4'}
local MEMO_SLOT_FIELD = {'m1', 'm2', 'm3', 'm4'}

-- The fields a release sets to remember `token`'s lease of `fence_text`
-- until `until_ms`, after the slot written last (`last_slot`, nil for none);
-- `forced_by` is the principal of a force release, nil for the holder's own.
local function memo_fields(last_slot, token, fence_text, until_ms, forced_by)
  local slot = (tonumber(last_slot) or 0) % MEMO_SLOTS + 1
  local entry = token .. ' ' .. fence_text
  if forced_by then
    entry = entry .. ' !' .. forced_by
  end
  return MEMO_SLOT_FIELD[slot], entry, 'mn', MEMO_SLOT_TEXT[slot], 'mu', string.format('%d', until_ms)
end

-- The fence of `token`'s lease when it was released and the memo lasts at
-- `now_ms`, else nil; then, for a force release, the principal that ended it
-- (nil when its holder released it).
local function memo_fence(lease_key, token, now_ms)
  local memo = redis.call('HMGET', lease_key, 'mu', 'm1', 'm2', 'm3', 'm4')
  if tonumber(memo[1] or '0') <= now_ms then
    return nil
  end
  local prefix = token .. ' '
  for i = 2, #memo do
    local entry = memo[i]
    if entry and string.sub(entry, 1, #prefix) == prefix then
      local rest = string.sub(entry, #prefix + 1)
      local gap = string.find(rest, ' !', 1, true)
      if gap then
        return tonumber(string.sub(rest, 1, gap - 1)), string.sub(rest, gap + 2)
      end
      return tonumber(rest)
    end
  end
  return nil
end

-- How long the lease hash must live for a lease that keeps the lock for
-- `keep_ms` from `now_ms`: that, or until the memos end (`memo_until`).
local function keep_ms_with_memos(keep_ms, memo_until, now_ms)
  return math.max(keep_ms, (tonumber(memo_until) or 0) - now_ms)
end

-- How long the lease hash must live for a lease that needs the lock
-- `lease_ms` from `now_ms` (TTL plus lock-delay), for its memos (until
-- `memo_until`) and for the name's last fence (`fence_idle` ms), without a
-- `PEXPIRE` on every grant and extend: the hash's expiry is set an eighth of
-- `fence_idle` beyond what is needed and recorded (field `ke`), and set
-- again only once the record falls short. Returns nil when the record
-- covers the need; else the expiry to set, in ms from now, and the text to
-- record in `ke` ('' for none). The caller writes `ke` with its `HSET`, then
-- sets the expiry: the `HSET` may be what creates the key.
--
-- Every script of this library that sets the hash's expiry sets it from
-- here, so it never falls below `ke`. A broker of an older version sets it
-- without recording it, but always at least `fence_idle` past its own
-- write, after `ke` was recorded; so a record is trusted only while its
-- slack cannot have run out (the lease needs at most `fence_idle` less the
-- slack), and it is made only for such leases. A hash without the name's
-- last fence (`f`, `has_fence` false) was written by a broker that lets a
-- release shorten the hash to its memo time: it gets its expiry every time.
local function lease_hash_expiry(ke, has_fence, lease_ms, memo_until, fence_idle, now_ms)
  local slack = math.floor(fence_idle / 8)
  local need = keep_ms_with_memos(math.max(lease_ms, fence_idle), memo_until, now_ms)
  local fits = need == fence_idle and lease_ms + slack <= fence_idle
  if has_fence and fits and (tonumber(ke) or 0) >= now_ms + need then
    return nil
  end
  if not fits then
    return need, ''
  end
  return need + slack, string.format('%d', now_ms + need + slack)
end
