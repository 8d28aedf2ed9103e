#!lua flags=allow-oom
-- Renews several leases in one step, where every one lives on this server
-- (single and Sentinel mode): a session's keepalive renews the session's
-- lease and every lease under it at one Redis instant, whatever their
-- number, in one call. Each lease's renewal runs as its own extend would
-- (extend.lua or hold_extend.lua), with its own answer.
--
-- KEYS and ARGV: one part per lease (prelude.lua's parts_of), its step 1
-- for extend.lua, 2 for hold_extend.lua.
--
-- Returns {length, reply, length, reply, ...}: each lease's answer as its
-- own step gives it, in order.
-- Flagged allow-oom, as extend.lua: a holder must keep its leases when
-- Redis is out of memory.

local reply = {}
for _, part in ipairs(parts_of(KEYS, ARGV)) do
  local step, keys, args = part[1], part[2], part[3]
  if step == 1 then
    append_answer(reply, extend(keys, args))
  else
    append_answer(reply, hold_extend(keys, args))
  end
end
return reply
