-- What the shapers (leaky_queue.lua, smooth.lua) share; included only in their scripts.

-- As `store`, for a state that replaces one the key may hold: a fresh result deletes the key.
local function replace(key, value, us, sub)
  local ms = ttl_ms(us, sub)
  if ms then
    redis.call('SET', key, value, 'PX', ms)
    known[key] = value
  else
    redis.call('DEL', key)
    known[key] = false
  end
end

-- A shaper's reply (leaky queue, smooth): `reply`'s, then the limit and the wait
-- (us, sub), which only shapers have.
local function shaped(r, limit, wait_us, wait_sub)
  extended(r)
  r[8], r[9], r[10] = limit, wait_us, wait_sub
  return r
end
