-- Token bucket (algorithm/token_bucket.rs), and the leaky bucket meter, which is the same
-- bucket counting the room left (algorithm/leaky_bucket.rs). a[1]: rate (tokens per second,
-- as Rust prints the f64, which reads back exactly), a[2]: capacity, a[3]: cost (at most
-- capacity + 1), or minus the cost of a refund, a[4]: the tag ('T' token bucket, 'M' leaky
-- bucket), a[5]: -1 for a refund, 1 for a charge, taken even below zero (a debt); their costs
-- at most 2^50.
-- State 'T:tokens:last_us' (or 'M:room:last_us'), tokens printed with 17 significant digits
-- (exact round trip).
local function token_bucket(key, now_us, a)
  local rate, cap, cost, tag = tonumber(a[1]), tonumber(a[2]), tonumber(a[3]), a[4]
  local state, found = load(key, tag)
  if state == false then return {-1, found} end
  local tokens, last_us = cap, now_us
  if state then tokens, last_us = state[2], state[3] end

  -- The same f64 operations, in the same order, as the Rust bucket.
  local function refill(ns) return ns / 1e9 * rate end
  local ns_per_token = 1e9 / rate
  local function time_until(from, target)
    if from >= target then return 0 end
    local d = math.floor((target - from) * ns_per_token)
    local step = 1
    while from + refill(d) < target do
      d = d + step
      step = step * 2
    end
    return d
  end

  local elapsed = 0
  if now_us > last_us then elapsed = (now_us - last_us) * 1000 end
  local filled = tokens + refill(elapsed)
  local avail = cap
  if filled < cap then avail = filled end
  local lag_us = 0
  if last_us > now_us then lag_us = last_us - now_us end

  if tonumber(a[5]) == -1 then
    -- A refund, as the Rust bucket gives back: the refill folded in, the tokens put back,
    -- full at most.
    local back = avail - cost
    if back > cap then back = cap end
    local left = math.floor(back)
    if left > cap then left = cap end
    -- Still in debt after a charge: nothing left.
    if left < 0 then left = 0 end
    local reset_us, reset_sub = pair(lag_us, time_until(back, cap))
    -- A refund of nothing writes nothing, as in Rust (folding the refill in at another
    -- instant would round differently later).
    if cost < 0 then
      local kept = last_us
      if now_us > kept then kept = now_us end
      keep(key, tag .. ':' .. digits17(back) .. ':' .. int(kept), reset_us, reset_sub)
    end
    return reply(true, left, reset_us, reset_sub)
  end
  if tonumber(a[5]) == 1 then
    -- A charge, as the Rust bucket takes it: the refill folded in, the cost taken even into
    -- debt; over while in debt.
    local left = avail - cost
    local reset_us, reset_sub = pair(lag_us, time_until(left, cap))
    if cost > 0 then
      local kept = last_us
      if now_us > kept then kept = now_us end
      store(key, tag .. ':' .. digits17(left) .. ':' .. int(kept), reset_us, reset_sub)
    end
    if left < 0 then
      local ru, rs = pair(lag_us, time_until(left, 0))
      return reply(false, 0, reset_us, reset_sub, ru, rs)
    end
    local remaining = math.floor(left)
    if remaining > cap then remaining = cap end
    return reply(true, remaining, reset_us, reset_sub)
  end
  local allowed = cost <= cap and avail >= cost
  local left = avail
  if allowed then left = avail - cost end
  local remaining = math.floor(left)
  if remaining > cap then remaining = cap end
  -- A bucket in debt (after a charge) has nothing left.
  if remaining < 0 then remaining = 0 end
  local reset_us, reset_sub = pair(lag_us, time_until(left, cap))
  -- Only an admission is recorded, as in Rust: a denial changes nothing.
  if cost > 0 and allowed then
    local kept = last_us
    if now_us > kept then kept = now_us end
    store(key, tag .. ':' .. digits17(left) .. ':' .. int(kept), reset_us, reset_sub)
  end
  if allowed then return reply(true, remaining, reset_us, reset_sub) end
  if cost > cap then return reply(false, remaining, reset_us, reset_sub) end
  local ru, rs = pair(lag_us, time_until(avail, cost))
  return reply(false, remaining, reset_us, reset_sub, ru, rs)
end
