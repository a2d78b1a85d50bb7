-- Exact wide arithmetic for the twins whose products pass 2^53 (sliding_window.lua); included
-- only in the scripts that use it, so that the others do not build these closures on every call.

-- (us * 1000 + sub) mod w, exactly, for 0 < w <= 2^51, us < 2^53 and |sub| < 2^52: us * 1000
-- is beyond 2^53, so its remainder is built bit by bit (every step below 2^52).
local function nsmod(us, sub, w)
  local r = math.fmod(us, w)
  if r < 0 then r = r + w end
  local acc = 0
  for _, bit in ipairs({1, 1, 1, 1, 1, 0, 1, 0, 0, 0}) do -- 1000 in binary
    acc = math.fmod(acc * 2, w)
    if bit == 1 then acc = math.fmod(acc + r, w) end
  end
  local _, m = divmod(acc + sub, w)
  return m
end

-- floor(a * b / d) and (a * b) mod d, exactly, for integers 0 <= a <= d < 2^51 and
-- 0 <= b < 2^51: long multiplication over b's bits, every step below 2^52.
local function muldiv(a, b, d)
  local q, r = 0, 0
  local bits = {}
  while b > 0 do
    local bit = math.fmod(b, 2)
    bits[#bits + 1] = bit
    b = (b - bit) / 2
  end
  for i = #bits, 1, -1 do
    q, r = q * 2, r * 2
    if r >= d then q, r = q + 1, r - d end
    if bits[i] == 1 then
      r = r + a
      if r >= d then q, r = q + 1, r - d end
    end
  end
  return q, r
end

-- Whether a * b <= c * e, exactly, for integers 0 <= a, b, c, e < 2^51: each product as two
-- limbs (hi, lo) in base 2^52, from 26-bit halves (every partial product below 2^53).
local function mul_le(a, b, c, e)
  local function mul(x, y)
    local x1, x0 = divmod(x, 67108864) -- 2^26
    local y1, y0 = divmod(y, 67108864)
    local cross_hi, cross_lo = divmod(x1 * y0 + x0 * y1, 67108864)
    local carry, lo = divmod(x0 * y0 + cross_lo * 67108864, 4503599627370496) -- 2^52
    return x1 * y1 + cross_hi + carry, lo
  end
  local h1, l1 = mul(a, b)
  local h2, l2 = mul(c, e)
  return h1 < h2 or (h1 == h2 and l1 <= l2)
end
