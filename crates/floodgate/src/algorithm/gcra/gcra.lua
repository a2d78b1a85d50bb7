-- GCRA (algorithm/gcra.rs). a[1]: emission interval e (ns), a[2]: tolerance tau (ns),
-- a[3]: limit, a[4]: cost (at most limit + 1), or minus the cost of a refund; a[5]: -1 for a
-- refund, 1 for a charge, scheduled even beyond tau (their costs times e at most 2^50).
-- State 'G:tat_us:tat_sub'.
local function gcra(key, now_us, a)
  local e, tau, limit, cost = tonumber(a[1]), tonumber(a[2]), tonumber(a[3]), tonumber(a[4])
  local state, found = load(key, 'G')
  if state == false then return {-1, found} end
  local tat_us, tat_sub = 0, 0
  if state then tat_us, tat_sub = state[2], state[3] end

  -- ahead = max(tat - now, 0); `far` when it is beyond tau (then nothing passes).
  local du = tat_us - now_us
  local function remaining(ttl)
    if ttl >= tau then return 0 end
    local q = divmod(tau - ttl, e)
    return q
  end

  if tonumber(a[5]) == -1 then
    -- A refund, as in Rust: tat moved back by the cost's intervals, never before now.
    local ahead_ns = 0
    if du >= 0 then ahead_ns = du * 1000 + tat_sub end
    local after = ahead_ns + cost * e
    if after < 0 then after = 0 end
    local au, as = pair(0, after)
    if after < ahead_ns then
      keep(key, 'G:' .. int(now_us + au) .. ':' .. int(as), au, as)
    end
    return reply(true, remaining(after), au, as)
  end

  if tonumber(a[5]) == 1 then
    -- A charge, as in Rust: tat = max(tat, now) + cost * e, beyond tau if need be.
    local ahead_ns = 0
    if du >= 0 then ahead_ns = du * 1000 + tat_sub end
    local after = ahead_ns + cost * e
    local au, as = pair(0, after)
    if cost > 0 then
      store(key, 'G:' .. int(now_us + au) .. ':' .. int(as), au, as)
    end
    if after <= tau then return reply(true, remaining(after), au, as) end
    local ru, rs = pair(0, after - tau)
    return reply(false, 0, au, as, ru, rs)
  end

  local ahead, far = 0, false
  if du >= 0 then
    if du * 1000 > tau then far = true else ahead = du * 1000 + tat_sub end
  end

  if far then
    -- Denied; reset_after = tat - now, retry_after = tat - now + cost * e - tau.
    if cost > limit then return reply(false, 0, du, tat_sub) end
    local ru, rs = pair(du, tat_sub + cost * e - tau)
    return reply(false, 0, du, tat_sub, ru, rs)
  end

  if cost > limit then
    local ru, rs = pair(0, ahead)
    return reply(false, remaining(ahead), ru, rs)
  end
  local after = ahead + cost * e
  if after <= tau then
    local au, as = pair(0, after)
    if cost > 0 then
      store(key, 'G:' .. int(now_us + au) .. ':' .. int(as), au, as)
    end
    return reply(true, remaining(after), au, as)
  end
  local hu, hs = pair(0, ahead)
  local ru, rs = pair(0, after - tau)
  return reply(false, remaining(ahead), hu, hs, ru, rs)
end
