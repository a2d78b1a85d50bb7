-- Leaky bucket as a queue (algorithm/leaky_queue.rs). a[1]: slot (ns), a[2]: queue,
-- a[3]: cost (at most queue + 2). State 'Q:free_us:free_sub', the instant the next slot is
-- free (virtual scheduling: only where the queue ends is kept).
local function leaky_queue(key, now_us, a)
  local slot, queue, cost = tonumber(a[1]), tonumber(a[2]), tonumber(a[3])
  local limit = queue + 1
  local horizon = queue * slot
  local state, found = load(key, 'Q')
  if state == false then return {-1, found} end

  -- room(b) = limit - ceil(b / slot), at least 0.
  local function room(b)
    if b == 0 then return limit end
    local q, r = divmod(b, slot)
    if r > 0 then q = q + 1 end
    if q >= limit then return 0 end
    return limit - q
  end

  -- ahead = max(next_free - now, 0) as a pair; `far` when beyond limit * slot (then no cost
  -- fits and nothing is left: ahead's nanoseconds need not be exact).
  local du, dsub = 0, 0
  if state then
    du, dsub = state[2] - now_us, state[3]
    if du < 0 then du, dsub = 0, 0 end
  end
  local far = du * 1000 > limit * slot
  local ahead = 0
  if not far then ahead = du * 1000 + dsub end
  local left = 0
  if not far then left = room(ahead) end

  if cost == 0 then return shaped(reply(true, left, du, dsub), limit, 0, 0) end
  if cost > limit then return shaped(reply(false, left, du, dsub), limit, 0, 0) end
  if far then
    -- The last unit's wait is beyond the horizon: retry once it is not.
    local ru, rs = pair(du, dsub + (cost - 1) * slot - horizon)
    return shaped(reply(false, 0, du, dsub, ru, rs), limit, 0, 0)
  end
  local last = ahead + (cost - 1) * slot
  if last > horizon then
    local ru, rs = pair(0, last - horizon)
    return shaped(reply(false, left, du, dsub, ru, rs), limit, 0, 0)
  end
  local backlog = ahead + cost * slot
  local bu, bs = pair(0, backlog)
  store(key, 'Q:' .. int(now_us + bu) .. ':' .. int(bs), bu, bs)
  return shaped(reply(true, room(backlog), bu, bs), limit, du, dsub)
end
