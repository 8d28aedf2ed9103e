-- Tells whether Redis takes writes, leaving nothing behind: a Redis out of
-- memory under noeviction (or a read-only replica) refuses the SET with its
-- own error, and the caller reports that Redis refuses writes.
--
-- KEYS[1] a key of the broker's own, absent before and after
--
-- Returns 1.

redis.call('SET', KEYS[1], '1')
redis.call('DEL', KEYS[1])
return 1
