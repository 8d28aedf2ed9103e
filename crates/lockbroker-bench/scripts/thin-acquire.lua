-- The thin broker's acquire: takes the lock for the token and returns the
-- lock's next fence; 0 when another lease holds it. An acquire fred sends
-- again after a dropped connection, whose first copy already took the lock,
-- finds its own token there and gets the same fence back instead of "busy".
-- KEYS: lease, fence. ARGV: token, ttl_ms.
local lease_key, fence_key = KEYS[1], KEYS[2]
local token, ttl_ms = ARGV[1], ARGV[2]
if redis.call('SET', lease_key, token, 'NX', 'PX', ttl_ms) then
  return redis.call('INCR', fence_key)
end
if redis.call('GET', lease_key) == token then
  return tonumber(redis.call('GET', fence_key))
end
return 0
