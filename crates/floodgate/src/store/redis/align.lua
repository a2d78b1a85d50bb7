-- The start of the window of w nanoseconds holding the instant us (whole microseconds):
-- us*1000 - (us*1000 mod w), as a pair (start_us, start_sub). us*1000 is beyond 2^53, so its
-- remainder is built bit by bit from us mod w (every step below 2^52).
local function window_start(us, w)
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
