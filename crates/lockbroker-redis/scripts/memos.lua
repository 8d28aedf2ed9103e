-- Release memos, prepended to every script: the last few leases of a lock
-- released by their holders, kept in the lock's own lease hash so that a
-- release or an extend re-sent after the next holder's grant still learns
-- that its lease was released (fred re-sends a command after a reconnect).
--
-- Fields: m1 .. m4 hold '<token> <fence>' of a released lease each, written
-- in turn (mn: the slot written last); mu is when they are forgotten (ms):
-- the latest release plus its memo time. A grant and an extend keep the
-- hash at least that long, so memos cost no key of their own, and at most
-- MEMO_SLOTS of them are kept per lock. A force release of a held lock
-- keeps them (force_release.lua ends the lease's fields only).

local MEMO_SLOTS = 4

-- The fields a release sets to remember `token`'s lease of `fence_text`
-- until `until_ms`, after the slot written last (`last_slot`, nil for none).
local function memo_fields(last_slot, token, fence_text, until_ms)
  local slot = (tonumber(last_slot) or 0) % MEMO_SLOTS + 1
  return 'm' .. slot, token .. ' ' .. fence_text, 'mn', tostring(slot),
    'mu', string.format('%d', until_ms)
end

-- The fence of `token`'s lease when its holder released it and the memo
-- lasts at `now_ms`, else nil.
local function memo_fence(lease_key, token, now_ms)
  local memo = redis.call('HMGET', lease_key, 'mu', 'm1', 'm2', 'm3', 'm4')
  if tonumber(memo[1] or '0') <= now_ms then
    return nil
  end
  local prefix = token .. ' '
  for i = 2, #memo do
    local entry = memo[i]
    if entry and string.sub(entry, 1, #prefix) == prefix then
      return tonumber(string.sub(entry, #prefix + 1))
    end
  end
  return nil
end

-- How long the lease hash must live for a lease that keeps the lock for
-- `keep_ms` from `now_ms`: that, or until the memos end (`memo_until`).
local function keep_ms_with_memos(keep_ms, memo_until, now_ms)
  return math.max(keep_ms, (tonumber(memo_until) or 0) - now_ms)
end
