-- The thin broker's release: deletes the lease only if the token still
-- holds it. 1 released, 0 lost.
-- KEYS: lease. ARGV: token.
local lease_key, token = KEYS[1], ARGV[1]
if redis.call('GET', lease_key) == token then
  return redis.call('DEL', lease_key)
end
return 0
