-- The start of the window of w = w_us * 1000 + w_sub nanoseconds (w_sub 0..999) that holds the
-- instant us (whole microseconds): us*1000 - (us*1000 mod w), as a pair (start_us, start_sub).
local function window_start(us, w_us, w_sub)
  local w = w_us * 1000 + w_sub
  if w <= 1125899906842624 then
    -- w ≤ 2^50 ns. us*1000 is beyond 2^53, so its remainder is built bit by bit from us mod w
    -- (every step below 2^52).
    local r = math.fmod(us, w)
    local acc = 0
    for _, bit in ipairs({1, 1, 1, 1, 1, 0, 1, 0, 0, 0}) do -- 1000 in binary
      acc = math.fmod(acc * 2, w)
      if bit == 1 then acc = math.fmod(acc + r, w) end
    end
    local q, s = divmod(acc, 1000)
    if s == 0 then return us - q, 0 end
    return us - q - 1, 1000 - s
  end
  -- A longer window (over 13 days): the window's number q = floor(us*1000 / w) is below 2^13
  -- for every instant below 2^53 us, so q*w is an exact pair (q*w_us below 2^53, q*w_sub below
  -- 2^23); q is found by division, then made exact by comparing whole pairs.
  local function start(n)
    local p = n * w_sub
    local sub = p % 1000
    return n * w_us + (p - sub) / 1000, sub
  end
  local q = math.floor(us / (w_us + w_sub / 1000))
  local s_us, s_sub = start(q)
  while s_us > us or (s_us == us and s_sub > 0) do
    q = q - 1
    s_us, s_sub = start(q)
  end
  while true do
    local e_us, e_sub = pair(s_us + w_us, s_sub + w_sub)
    if e_us > us or (e_us == us and e_sub > 0) then return s_us, s_sub end
    s_us, s_sub = e_us, e_sub
  end
end
