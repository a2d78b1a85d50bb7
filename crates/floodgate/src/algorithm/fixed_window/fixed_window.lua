-- Fixed window (algorithm/fixed_window.rs). a[1], a[2]: the window w as whole microseconds
-- and the nanoseconds beyond them (0..999), a[3]: limit, a[4]: cost (at most limit + 1), or
-- minus the cost of a refund (at most 2^50); a[5]: -1 for a refund, 1 for a charge, counted
-- even past the limit (its cost at most 2^50; the count stops at 2^52, where Rust's goes on).
-- State 'F:start_us:start_sub:count'. Needs align.lua.
local function fixed_window(key, now_us, a)
  local w_us, w_sub = tonumber(a[1]), tonumber(a[2])
  local limit, cost = tonumber(a[3]), tonumber(a[4])
  local state, found = load(key, 'F')
  if state == false then return {-1, found} end

  local s_us, s_sub, count
  if state then
    s_us, s_sub, count = state[2], state[3], state[4]
    local du = now_us - s_us
    -- into = now - start; a new window once into >= w, that is once
    -- (du - w_us) * 1000 >= s_sub + w_sub (a `now` before the start stays in it). du - w_us is
    -- exact; its product is exact below 2^43, and beyond, its sign alone decides.
    if du >= 0 and (du - w_us) * 1000 >= s_sub + w_sub then
      s_us, s_sub = window_start(now_us, w_us, w_sub)
      count = 0
    end
  else
    s_us, s_sub = window_start(now_us, w_us, w_sub)
    count = 0
  end

  -- to_end = start + w - now.
  local eu, es = pair(s_us - now_us + w_us, s_sub + w_sub)
  if tonumber(a[5]) == -1 then
    -- A refund: the window's count lowered, never below 0; written only when it changes.
    local left = math.max(0, count + cost)
    if left ~= count then
      store(key, 'F:' .. int(s_us) .. ':' .. int(s_sub) .. ':' .. int(left), eu, es)
    end
    if left == 0 then return reply(true, limit, 0, 0) end
    return reply(true, math.max(0, limit - left), eu, es)
  end
  if tonumber(a[5]) == 1 then
    -- A charge: counted in full, past the limit if need be; over once past it.
    local after = math.min(count + cost, 4503599627370496)
    if cost > 0 then
      store(key, 'F:' .. int(s_us) .. ':' .. int(s_sub) .. ':' .. int(after), eu, es)
    end
    if after == 0 then return reply(true, limit, 0, 0) end
    if after <= limit then return reply(true, limit - after, eu, es) end
    return reply(false, 0, eu, es, eu, es)
  end
  -- Nothing is free once a charge has counted past the limit.
  local free = math.max(0, limit - count)
  if cost == 0 then
    if count == 0 then return reply(true, free, 0, 0) end
    if count > limit then return reply(false, 0, eu, es, eu, es) end
    return reply(true, free, eu, es)
  end
  if cost <= free then
    store(key, 'F:' .. int(s_us) .. ':' .. int(s_sub) .. ':' .. int(count + cost), eu, es)
    return reply(true, free - cost, eu, es)
  end
  local reset_us, reset_sub = eu, es
  if count == 0 then reset_us, reset_sub = 0, 0 end
  if cost <= limit then return reply(false, free, reset_us, reset_sub, eu, es) end
  return reply(false, free, reset_us, reset_sub)
end
