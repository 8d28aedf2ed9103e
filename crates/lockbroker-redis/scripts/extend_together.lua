#!lua flags=allow-oom
-- Renews several leases in one step, where every one lives on this server
-- (single and Sentinel mode): a session's keepalive renews the session's
-- lease and every lease under it at one Redis instant, whatever their
-- number, in one call. Each lease's renewal runs as its own extend would
-- (extend.lua or hold_extend.lua), with its own answer.
--
-- ARGV[1] how many leases; then per lease three numbers: its step (1:
-- extend.lua, 2: hold_extend.lua), how many KEYS and how many ARGV it
-- takes; then every lease's ARGV in turn. KEYS: every lease's KEYS in turn.
--
-- Returns {length, reply, length, reply, ...}: each lease's answer as its
-- own step gives it, in order.
-- Flagged allow-oom, as extend.lua: a holder must keep its leases when
-- Redis is out of memory.

local n = tonumber(ARGV[1])
local reply = {}
local key_at, arg_at = 1, 2 + 3 * n
for i = 1, n do
  local head = 2 + 3 * (i - 1)
  local step, key_count, arg_count = tonumber(ARGV[head]), tonumber(ARGV[head + 1]),
    tonumber(ARGV[head + 2])
  local keys, args = {}, {}
  for k = 1, key_count do
    keys[k] = KEYS[key_at + k - 1]
  end
  for a = 1, arg_count do
    args[a] = ARGV[arg_at + a - 1]
  end
  key_at, arg_at = key_at + key_count, arg_at + arg_count
  local answer
  if step == 1 then
    answer = extend(keys, args)
  else
    answer = hold_extend(keys, args)
  end
  reply[#reply + 1] = #answer
  for _, item in ipairs(answer) do
    reply[#reply + 1] = item
  end
end
return reply
