-- Guava's SmoothRateLimiter (algorithm/smooth.rs). a[1]: 'R' bursty, 'U' warming up;
-- a[2]: the configured rate; a[3]: max_burst_seconds (bursty) or the warmup in whole
-- microseconds (warming up); a[4]: the cold factor (warming up), or how a new bursty key
-- starts ('1' full, '0' empty); a[5]: the op ('c' check,
-- 'r' reserve, 't' try_acquire, 's' set_rate); a[6]: its cost; a[7]: try_acquire's timeout
-- in whole microseconds (at most 2^53); a[8]: set_rate's rate ('0' for one that is refused).
-- Every f64 is printed as Rust prints it (shortest, exact round trip).
-- State 'R:stored:next_free_us:seen_us' ('U:…' warming up), with a fifth field, the rate,
-- when set_rate changed it; stored and the rate printed with the fewest significant digits
-- (15 to 17) that read back exactly. Every f64 operation is the Rust one, in the same order.
local function smooth(key, now_us, a)
  local tag, rate0, p1, cold_factor = a[1], tonumber(a[2]), tonumber(a[3]), tonumber(a[4])
  local op, cost, timeout, new_rate = a[5], tonumber(a[6]), tonumber(a[7]), tonumber(a[8])
  -- Instants and next_free stay below 3 * 2^51 us: every sum below is then exact.
  local last_exact = 6755399441055744
  local huge = math.huge
  local function finite(x) return x == x and x ~= huge and x ~= -huge end
  -- Java's Math.min(double, double).
  local function jmin(x, y)
    if x ~= x then return x end
    if x == 0 and y == 0 and 1 / y < 0 then return y end
    if x <= y then return x end
    return y
  end
  -- Rust's `as i64` / `as u64` (truncation towards 0, NaN to 0), within the exact range.
  local function trunc(x)
    if x ~= x then return 0 end
    if x >= 0 then return math.floor(x) end
    return math.ceil(x)
  end
  local function derive(rate)
    local interval = 1000000.0 / rate
    if tag == 'R' then
      local max_permits = p1 * rate
      if not (finite(interval) and interval > 0 and finite(max_permits)) then return nil end
      return {interval = interval, max = max_permits, threshold = 0, slope = 0, cool = interval}
    end
    local cold = interval * cold_factor
    local threshold = 0.5 * p1 / interval
    local max_permits = threshold + 2.0 * p1 / (interval + cold)
    local slope = (cold - interval) / (max_permits - threshold)
    local cool = p1 / max_permits
    if not (finite(interval) and interval > 0 and finite(cold) and finite(threshold)
        and finite(max_permits) and max_permits > 0 and finite(slope) and slope >= 0
        and finite(cool) and cool > 0) then
      return nil
    end
    return {interval = interval, max = max_permits, threshold = threshold, slope = slope, cool = cool}
  end
  -- The shortest of 15, 16 or 17 significant digits that reads back as x.
  local function float(x)
    for _, f in ipairs({'%.15g', '%.16g'}) do
      local text = string.format(f, x)
      if tonumber(text) == x then return text end
    end
    return string.format('%.17g', x)
  end
  -- A bursty key starting empty rests full, never fresh: it is kept without a TTL.
  local starts_empty = tag == 'R' and a[4] == '0'
  local function initial(d)
    if starts_empty then return 0.0 end
    return d.max
  end
  local function stored_cost(d, stored, take)
    if tag == 'R' then return 0 end
    local micros = 0
    local above = stored - d.threshold
    if above > 0 then
      local take_above = jmin(above, take)
      local length = (d.interval + above * d.slope) + (d.interval + (above - take_above) * d.slope)
      micros = trunc(take_above * length / 2.0)
      take = take - take_above
    end
    return micros + trunc(d.interval * take)
  end

  local state, found = load(key, tag)
  if state == false then return {-1, found} end
  local configured = derive(rate0)
  local st
  if state then
    st = {stored = state[2], next_free = state[3], seen = state[4], rate = state[5] or rate0}
  else
    st = {stored = initial(configured), next_free = now_us, seen = now_us, rate = rate0}
  end
  local at = now_us
  if st.seen > at then at = st.seen end
  local d = configured
  if st.rate ~= rate0 then d = derive(st.rate) or configured end

  local function resync(s, dd, t)
    if t > s.next_free then
      s.stored = jmin(dd.max, s.stored + (t - s.next_free) / dd.cool)
      s.next_free = t
    end
  end
  local function copy(s)
    return {stored = s.stored, next_free = s.next_free, seen = s.seen, rate = s.rate}
  end
  -- Reserves `cost` at `at`: the wait (us), or nil when next_free would leave the exact range.
  local function reserve(dd)
    resync(st, dd, at)
    local start = st.next_free
    local spend = jmin(cost, st.stored)
    local wait = stored_cost(dd, st.stored, spend) + trunc((cost - spend) * dd.interval)
    if wait >= last_exact or st.next_free + wait >= last_exact then return nil end
    st.next_free = st.next_free + wait
    st.stored = st.stored - spend
    st.seen = at
    if start > at then return start - at end
    return 0
  end
  local function report(dd, allowed, wait, retry)
    if dd.max >= 9007199254740992 then return {-2} end
    local view = copy(st)
    resync(view, dd, at)
    local remaining = 0
    if view.next_free <= at and view.stored > 0 then remaining = math.floor(view.stored) end
    local full_at
    if view.stored == dd.max then
      full_at = view.next_free
    elseif view.stored > dd.max then
      full_at = view.next_free + 1
    else
      local refill = trunc(math.ceil((dd.max - st.stored) * dd.cool))
      if st.stored + refill / dd.cool < dd.max then refill = refill + 1 end
      full_at = st.next_free + refill
      if full_at < at then full_at = at end
    end
    local reset = full_at - now_us
    if reset < 0 then reset = 0 end
    return shaped(reply(allowed, remaining, reset, 0, retry, 0), trunc(dd.max), wait, 0)
  end
  -- Writes the state (`changed`: the operation changed it) with a TTL until it is fresh (a
  -- key at rest at the configured rate), or deletes it if it already is. A state that never
  -- becomes fresh (a bursty key starting empty that stores permits, or a key whose rate
  -- set_rate changed) is kept without a TTL, and written even by a probe or a denial when the
  -- key was missing: a key is created by its first operation, whatever it is.
  local function save(r, changed)
    if r[1] == -2 then return r end
    if not changed and state then return r end
    local value = tag .. ':' .. float(st.stored) .. ':' .. int(st.next_free) .. ':' .. int(st.seen)
    if st.rate ~= rate0 then value = value .. ':' .. float(st.rate) end
    if st.rate ~= rate0 or (starts_empty and configured.max ~= 0) then
      redis.call('SET', key, value)
      known[key] = value
      return r
    end
    if not changed then return r end
    local m = configured.max
    local function stored_at(t)
      if t > st.next_free then return jmin(m, st.stored + (t - st.next_free) / configured.cool) end
      return st.stored
    end
    local t = st.next_free
    if st.seen > t then t = st.seen end
    if stored_at(t) ~= m then
      local refill = math.ceil((m - st.stored) * configured.cool)
      if refill < 1 then refill = 1 end
      if st.next_free + refill > t then t = st.next_free + refill end
      local step = 1
      while stored_at(t) ~= m do
        t = t + step
        step = step * 2
      end
    end
    local ttl = t - now_us
    if ttl < 0 then ttl = 0 end
    replace(key, value, ttl, 0)
    return r
  end

  if op == 'r' then
    if cost == 0 then
      local wait = st.next_free - at
      if wait < 0 then wait = 0 end
      return save(report(d, true, wait, nil), false)
    end
    local wait = reserve(d)
    if not wait then return {-2} end
    return save(report(d, true, wait, nil), true)
  end
  if op == 's' then
    local new = nil
    if finite(new_rate) and new_rate > 0 then new = derive(new_rate) end
    if not new then return save(report(d, false, 0, nil), false) end
    if new.max >= 9007199254740992 then return {-2} end
    resync(st, d, at)
    if d.max == 0 then
      st.stored = initial(new)
    else
      local scaled = st.stored * new.max / d.max
      if finite(scaled) then st.stored = scaled else st.stored = new.max * (st.stored / d.max) end
    end
    st.rate = new_rate
    st.seen = at
    return save(report(new, true, 0, nil), true)
  end
  -- check ('c', a timeout of 0) and try_acquire ('t').
  local earliest = st.next_free - timeout
  if earliest > at then return save(report(d, false, 0, earliest - now_us), false) end
  if cost == 0 then
    local wait = st.next_free - at
    if wait < 0 then wait = 0 end
    return save(report(d, true, wait, nil), false)
  end
  local wait = reserve(d)
  if not wait then return {-2} end
  return save(report(d, true, wait, nil), true)
end
