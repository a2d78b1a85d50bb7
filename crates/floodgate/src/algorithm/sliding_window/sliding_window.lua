-- Sliding window counters (algorithm/sliding_window.rs), both modes. a[1]: 'w' for the
-- two-window weighted estimate, 'b' for sub-buckets; a[2]: window W (ns), a[3]: limit L,
-- a[4]: cost (at most L + 1), or minus the cost of a refund (at most 2^50), a[5]: the number
-- of sub-buckets N ('b' only), a[6]: -1 for a refund (which gives the newest units back
-- first, as algorithm/sliding_window.rs does).
-- States: 'W:start_us:start_sub:previous:current:last_us' (weighted), and
-- 'B:N:head_us:head_sub' followed by 'age:count' for each sub-bucket still holding cost
-- (age 0 is the head, the newest bucket; ages run to N). A state of the other mode, or with
-- another N, is one the algorithm treats as fresh.
local function sliding_window(key, now_us, a)
  local mode, w, limit, cost = a[1], tonumber(a[2]), tonumber(a[3]), tonumber(a[4])
  local refund = tonumber(a[6]) == -1
  local tag = 'W'
  if mode == 'b' then tag = 'B' end
  local state, found = load(key, tag)
  local other = false
  if state == false then
    if found ~= 'W' and found ~= 'B' then return {-1, found} end
    state, other = nil, true
  end
  if state and tag == 'B' and state[2] ~= tonumber(a[5]) then state, other = nil, true end
  -- A state of other parameters is replaced by a fresh one when the request has a cost.
  local function fresh_result(r)
    if other and cost > 0 then
      redis.call('DEL', key)
      known[key] = false
    end
    return r
  end

  -- (us * 1000 + sub) - now, at least 0, for a normalised pair (sub in 0..999).
  local function since(us, sub)
    local du = us - now_us
    if du < 0 then return 0, 0 end
    return du, sub
  end

  if tag == 'W' then
    local s_us, s_sub, prev, cur, last = 0, 0, 0, 0, 0
    if state then s_us, s_sub, prev, cur, last = state[2], state[3], state[4], state[5], state[6] end
    local now_eff = now_us
    if last > now_eff then now_eff = last end
    -- Roll to now_eff's window: delta = now_eff - start, `far` when 2W or more.
    local du = now_eff - s_us
    local far = not state or du * 1000 > 2 * w + 1000
    local delta = 0
    if not far then
      delta = du * 1000 - s_sub
      if delta < 0 then delta = 0 end
      far = delta >= 2 * w
    end
    if far then
      s_us, s_sub = pair(now_eff, -nsmod(now_eff, 0, w))
      prev, cur = 0, 0
    elseif delta >= w then
      s_us, s_sub = pair(s_us, s_sub + w)
      prev, cur = cur, 0
    end
    local elapsed = (now_eff - s_us) * 1000 - s_sub
    if elapsed < 0 then elapsed = 0 end
    if refund then
      -- The newest units first: the current window's, then the previous one's.
      local from_cur = math.min(-cost, cur)
      local from_prev = math.min(-cost - from_cur, prev)
      cur, prev = cur - from_cur, prev - from_prev
      local k = 0
      if cur > 0 then k = 2 elseif prev > 0 then k = 1 end
      local reset_us, reset_sub = 0, 0
      if k > 0 then reset_us, reset_sub = since(pair(s_us, s_sub + k * w)) end
      local faded = 0
      if prev > 0 and elapsed > 0 then faded = muldiv(elapsed, prev, w) end
      local left = limit - (prev - faded) - cur
      if left < 0 then left = 0 end
      if from_cur + from_prev > 0 then
        local value = 'W:' .. int(s_us) .. ':' .. int(s_sub) .. ':' .. int(prev) .. ':'
          .. int(cur) .. ':' .. int(now_eff)
        keep(key, value, reset_us, reset_sub)
      end
      return reply(true, left, reset_us, reset_sub)
    end
    local allowed = cost <= limit and cur + cost <= limit
      and mul_le(prev, w - elapsed, limit - cur - cost, w)
    local current = cur
    if allowed then current = cur + cost end
    local k = 0
    if current > 0 then k = 2 elseif prev > 0 then k = 1 end
    local reset_us, reset_sub = 0, 0
    if k > 0 then reset_us, reset_sub = since(pair(s_us, s_sub + k * w)) end
    local faded = 0
    if prev > 0 and elapsed > 0 then faded = muldiv(elapsed, prev, w) end
    local left = limit - (prev - faded) - current
    if left < 0 then left = 0 end
    if allowed then
      if cost > 0 then
        local value = 'W:' .. int(s_us) .. ':' .. int(s_sub) .. ':' .. int(prev) .. ':'
          .. int(current) .. ':' .. int(now_eff)
        store(key, value, reset_us, reset_sub)
      end
      return reply(true, left, reset_us, reset_sub)
    end
    if cost > limit then return fresh_result(reply(false, left, reset_us, reset_sub)) end
    -- slack = min(x * W / p, W), W when p is 0; the retry is at start + k W - slack.
    local function slack(x, p)
      if p == 0 or x >= p then return w end
      return (muldiv(x, w, p))
    end
    local at_ns
    if cur + cost <= limit then
      at_ns = w - slack(limit - cur - cost, prev)
    else
      at_ns = 2 * w - slack(limit - cost, cur)
    end
    local ru, rs = since(pair(s_us, s_sub + at_ns))
    return reply(false, left, reset_us, reset_sub, ru, rs)
  end

  -- Sub-buckets. Bucket j (from the epoch) starts at floor(j / N) W + floor((j mod N) W / N);
  -- every instant below is handled relative to the head bucket's start, exactly.
  local n = tonumber(a[5])
  local slots = n + 1
  local width, rem = divmod(w, n)
  local hs_us, hs_sub = 0, 0
  local counts = {} -- age -> count
  local total = 0
  if state then
    hs_us, hs_sub = state[3], state[4]
    for i = 5, #state - 1, 2 do
      counts[state[i]] = state[i + 1]
      total = total + state[i + 1]
    end
  end
  -- i(m): the bucket of a window holding offset m (the largest i with floor(i W / N) <= m).
  local function bucket_in(m)
    local q, r = muldiv(m + 1, n, w)
    if r == 0 then return q - 1 end
    return q
  end
  -- The start of the bucket `ahead` buckets after the head's, as a pair.
  local function after(ahead)
    if rem == 0 then return pair(hs_us, hs_sub + ahead * width) end
    local m = nsmod(hs_us, hs_sub, w)
    local q, i = divmod(bucket_in(m) + ahead, n)
    return pair(hs_us, hs_sub + q * w + muldiv(i, w, n) - m)
  end

  local ne_us, ne_sub = now_us, 0
  if hs_us > now_us or (hs_us == now_us and hs_sub > 0) then ne_us, ne_sub = hs_us, hs_sub end
  -- delta = now_eff - head start; `big` when 2W or more (then every bucket has left).
  local du, dsub = pair(ne_us - hs_us, ne_sub - hs_sub)
  local big = du * 1000 > 2 * w + 1000
  local delta = 0
  if not big then
    delta = du * 1000 + dsub
    big = delta >= 2 * w
  end
  local shift
  if big then
    shift = slots
  elseif delta < width then
    shift = 0
  elseif rem ~= 0 then
    local m_now, m_hs = nsmod(ne_us, ne_sub, w), nsmod(hs_us, hs_sub, w)
    shift = (delta - m_now + m_hs) / w * n + bucket_in(m_now) - bucket_in(m_hs)
  elseif delta - width < width then
    shift = 1
  else
    shift = (divmod(delta, width))
  end
  local live = total
  if total > 0 and shift > 0 then
    if shift >= slots then
      live = 0
    else
      for age, c in pairs(counts) do
        if age >= slots - shift then live = live - c end
      end
    end
  end
  -- Moves the head to the bucket holding now_eff; the buckets that left are dropped.
  local function advance()
    if shift > 0 then
      local moved = {}
      if shift < slots then
        for age, c in pairs(counts) do
          if age + shift < slots then moved[age + shift] = c end
        end
      end
      counts = moved
      if not big then
        hs_us, hs_sub = after(shift)
      elseif rem == 0 then
        hs_us, hs_sub = pair(ne_us, ne_sub - nsmod(du, dsub, width))
      else
        local m = nsmod(ne_us, ne_sub, w)
        hs_us, hs_sub = pair(ne_us, ne_sub - m + muldiv(bucket_in(m), w, n))
      end
    end
  end
  local function encoded()
    local parts = {'B', int(n), int(hs_us), int(hs_sub)}
    for age = 0, n do
      if counts[age] and counts[age] > 0 then
        parts[#parts + 1] = int(age)
        parts[#parts + 1] = int(counts[age])
      end
    end
    return table.concat(parts, ':')
  end
  if refund then
    -- The newest units first, from the head bucket back, once the head is at now_eff.
    local back = math.min(-cost, live)
    if back > 0 then
      advance()
      local owed = back
      for age = 0, n do
        if owed == 0 then break end
        local c = counts[age] or 0
        local take = math.min(owed, c)
        counts[age] = c - take
        owed = owed - take
      end
    end
    local counted = live - back
    local left = limit - counted
    if left < 0 then left = 0 end
    -- The newest bucket still holding cost stops counting N + 1 buckets after its start.
    local reset_us, reset_sub = 0, 0
    if counted > 0 then
      local newest = slots
      for age, c in pairs(counts) do
        if c > 0 and age < newest then newest = age end
      end
      reset_us, reset_sub = since(after(slots - newest))
    end
    if back > 0 then keep(key, encoded(), reset_us, reset_sub) end
    return reply(true, left, reset_us, reset_sub)
  end
  local fits = live + cost <= limit
  if fits and cost > 0 then
    advance()
    counts[0] = (counts[0] or 0) + cost
  end
  local counted = live
  if fits then counted = live + cost end
  local left = limit - counted
  if left < 0 then left = 0 end
  local reset_us, reset_sub = 0, 0
  if counted > 0 then reset_us, reset_sub = since(after(slots)) end
  if fits then
    if cost > 0 then store(key, encoded(), reset_us, reset_sub) end
    return reply(true, left, reset_us, reset_sub)
  end
  if cost > limit then return fresh_result(reply(false, left, reset_us, reset_sub)) end
  -- Buckets leave oldest first; the one of age N - j has left once the head is j + 1 on.
  local need = live + cost - limit
  local freed = 0
  local ru, rs = since(after(slots))
  for j = shift, slots - 1 do
    freed = freed + (counts[n - j] or 0)
    if freed >= need then
      ru, rs = since(after(j + 1))
      break
    end
  end
  return reply(false, left, reset_us, reset_sub, ru, rs)
end
