-- Fixed window (algorithm/fixed_window.rs). a[1]: window w (ns), a[2]: limit,
-- a[3]: cost (at most limit + 1). State 'F:start_us:start_sub:count'.
local function fixed_window(key, now_us, a)
  local w, limit, cost = tonumber(a[1]), tonumber(a[2]), tonumber(a[3])
  local state, found = load(key, 'F')
  if state == false then return {-1, found} end

  -- The start of now's window, now_ns - (now_ns mod w), as a pair. now_ns = now_us * 1000 is
  -- beyond 2^53, so its remainder is built bit by bit from now_us mod w (every step below 2^52).
  local function align()
    local r = math.fmod(now_us, w)
    local acc = 0
    for _, bit in ipairs({1, 1, 1, 1, 1, 0, 1, 0, 0, 0}) do -- 1000 in binary
      acc = math.fmod(acc * 2, w)
      if bit == 1 then acc = math.fmod(acc + r, w) end
    end
    local q, s = divmod(acc, 1000)
    if s == 0 then return now_us - q, 0 end
    return now_us - q - 1, 1000 - s
  end

  local s_us, s_sub, count
  if state then
    s_us, s_sub, count = state[2], state[3], state[4]
    local du = now_us - s_us
    -- into = now - start; a new window once into >= w (a `now` before the start stays in it).
    if du >= 0 and (du * 1000 > w + 1000 or du * 1000 - s_sub >= w) then
      s_us, s_sub = align()
      count = 0
    end
  else
    s_us, s_sub = align()
    count = 0
  end

  -- to_end = start + w - now.
  local eu, es = pair(s_us - now_us, s_sub + w)
  local free = limit - count
  if cost == 0 then
    if count == 0 then return reply(true, free, 0, 0) end
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
