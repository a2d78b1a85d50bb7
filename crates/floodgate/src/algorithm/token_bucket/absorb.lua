-- The token bucket's part of the cached store's sync (store/redis/cached.lua): refilled up to
-- `at` (or its last update, if later), then `cost` taken even below zero (twin.rs,
-- CachedTwin::absorb): a debt refilled before anything passes again.
local function absorb_bucket(key, rate, cap, at_us, cost)
  local state, found = load(key, 'T')
  if state == false then return found end
  local tokens, last_us = cap, at_us
  if state then tokens, last_us = state[2], state[3] end
  local t = last_us
  if at_us > t then t = at_us end
  local filled = tokens + (t - last_us) * 1000 / 1e9 * rate
  if filled > cap then filled = cap end
  local left = filled - cost
  -- Full again (fresh) (cap - left) / rate after t.
  local ru, rs = pair(t - now_us, math.ceil((cap - left) * (1e9 / rate)))
  keep(key, 'T:' .. digits17(left) .. ':' .. int(t), ru, rs)
  return nil
end
