-- Concurrency and fleet leases (algorithm/concurrency.rs). a[1]: tag ('C' concurrency,
-- 'L' fleet), a[2]: capacity, a[3]: non-critical allowance A (= capacity for
-- concurrency), a[4]: '1' when only non-critical leases count against A (the fleet),
-- a[5]: lease_ttl whole microseconds, a[6]: lease_ttl's sub-microsecond part (0..999),
-- a[7]: the op ('a' acquire, 'r' release, 'c' check), a[8]: the lease id (32 hex
-- digits; '' for a check), a[9]: '1' for a critical acquire, a[10]: a check's cost (at
-- most A + 1).
--
-- State: one sorted set. A lease is its id, scored by its expiry's whole microseconds plus 1,
-- negated for a critical lease. Every instant a lease script sees is a whole microsecond, so
-- every expiry is (exp_us, ttl_sub) with the same sub-microsecond part. One marker member at
-- score 0, '<tag>:<seen_us>', names the algorithm and keeps the latest instant a mutating
-- operation saw.
local function leases(key, now_us, a)
  local tag, capacity, allowance = a[1], tonumber(a[2]), tonumber(a[3])
  local shed, ttl_us, ttl_sub = a[4] == '1', tonumber(a[5]), tonumber(a[6])
  local op, lease, critical, cost = a[7], a[8], a[9] == '1', tonumber(a[10])

  local kind = redis.call('TYPE', key).ok
  local seen, marker = 0, ''
  if kind == 'string' then
    local raw = redis.call('GET', key)
    return {-1, string.match(raw, '^[^:]*')}
  elseif kind == 'zset' then
    marker = redis.call('ZRANGEBYSCORE', key, 0, 0)[1] or ''
    local found, s = string.match(marker, '^([^:]*):(%d+)$')
    if found ~= tag then return {-1, found or ''} end
    seen = tonumber(s)
  elseif kind ~= 'none' then
    return {-1, owner(key)}
  end

  local at = now_us
  if seen > at then at = seen end
  -- A lease expiring at (exp_us, ttl_sub) is expired at `at` iff exp_us <= at - c; in scores:
  -- a non-critical lease is live iff its score > b, a critical one iff its score < -b.
  local c = 0
  if ttl_sub > 0 then c = 1 end
  local b = at - c + 1
  local nb, pb = int(-b), int(b)

  -- Per class (1 non-critical, 2 critical): live count, earliest and last live expiry (us).
  local function views()
    local live = {redis.call('ZCOUNT', key, '(' .. pb, '+inf'), redis.call('ZCOUNT', key, '-inf', '(' .. nb)}
    local first, last = {}, {}
    if live[1] > 0 then
      first[1] = tonumber(redis.call('ZRANGEBYSCORE', key, '(' .. pb, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]) - 1
      last[1] = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) - 1
    end
    if live[2] > 0 then
      first[2] = -tonumber(redis.call('ZREVRANGEBYSCORE', key, '(' .. nb, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]) - 1
      last[2] = -tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]) - 1
    end
    return live, first, last
  end

  local function limit_of(crit)
    if shed and crit then return capacity end
    return allowance
  end
  local function counted(crit, live)
    if shed and not crit then return live[1] end
    return live[1] + live[2]
  end

  -- The reply for an operation of class `crit`, with retry_after until `frees` (us, or nil).
  -- reset_after runs until the last live lease expires, or the clock is back past `seen`.
  local function decide(crit, allowed, frees)
    local live, _, last = views()
    local limit = limit_of(crit)
    local remaining = limit - counted(crit, live)
    if remaining < 0 then remaining = 0 end
    local reset_us, reset_sub = 0, 0
    local function later(us, sub)
      if us > reset_us or (us == reset_us and sub > reset_sub) then reset_us, reset_sub = us, sub end
    end
    for class = 1, 2 do
      if last[class] then later(last[class] - now_us, ttl_sub) end
    end
    if seen > now_us then later(seen - now_us, 0) end
    local r = reply(allowed, remaining, reset_us, reset_sub)
    if frees then r = reply(allowed, remaining, reset_us, reset_sub, frees - now_us, ttl_sub) end
    extended(r)[8] = limit
    return r, reset_us, reset_sub
  end

  if op == 'c' then
    local live = views()
    local room = allowance - counted(false, live)
    if room < 0 then room = 0 end
    return (decide(false, cost <= room, nil))
  end

  -- A mutating operation: `seen` becomes `at`, expired leases go. The marker stays until its
  -- successor is written, so that the set never empties (Redis would delete it) before the
  -- operation writes to it again: on a Redis Cluster slot being moved, a key that is gone
  -- may not be written again by the same script.
  seen = at
  redis.call('ZREMRANGEBYSCORE', key, 1, pb)
  redis.call('ZREMRANGEBYSCORE', key, nb, -1)

  -- Writes the marker and the TTL (until the state is fresh), or drops a fresh state.
  local function finish(r, reset_us, reset_sub)
    if reset_us == 0 and reset_sub == 0 then
      redis.call('DEL', key)
      return r
    end
    local successor = tag .. ':' .. int(seen)
    if successor ~= marker then
      redis.call('ZADD', key, 0, successor)
      if marker ~= '' then redis.call('ZREM', key, marker) end
    end
    local ms, rest = divmod(reset_us, 1000)
    if rest > 0 or reset_sub > 0 then ms = ms + 1 end
    if ms < min_ttl_ms then ms = min_ttl_ms end
    redis.call('PEXPIRE', key, int(ms))
    return r
  end

  local held = redis.call('ZSCORE', key, lease)
  if held then held = tonumber(held) end
  local exp1 = at + ttl_us + 1

  if op == 'r' then
    if held then
      redis.call('ZREM', key, lease)
      return finish(decide(held < 0, true, nil))
    end
    return finish(decide(false, false, nil))
  end

  -- Acquire.
  if held then
    if held < 0 then
      redis.call('ZADD', key, -exp1, lease)
    else
      redis.call('ZADD', key, exp1, lease)
    end
    return finish(decide(held < 0, true, nil))
  end
  local live, first = views()
  if (shed and critical) or counted(critical, live) < limit_of(critical) then
    if critical then
      redis.call('ZADD', key, -exp1, lease)
    else
      redis.call('ZADD', key, exp1, lease)
    end
    return finish(decide(critical, true, nil))
  end
  local frees = first[1]
  if not shed and first[2] and (not frees or first[2] < frees) then frees = first[2] end
  return finish(decide(critical, false, frees))
end
