-- Sliding log (algorithm/sliding_log.rs). a[1]: window w (ns), a[2]: limit, a[3]: cost (at
-- most limit + 1). State: a list, 'S' then the total cost of the entries, then each entry's
-- instant (whole microseconds: every instant the script sees is one) and cost, oldest first.
-- A list, not a packed string, because the log is a queue: admissions push at the tail,
-- expired entries leave from the head, without rewriting the entries in between.
local function sliding_log(key, now_us, a)
  local w, limit, cost = tonumber(a[1]), tonumber(a[2]), tonumber(a[3])
  local kind = redis.call('TYPE', key).ok
  local total, n = 0, 0
  if kind == 'list' then
    local header = redis.call('LRANGE', key, 0, 1)
    if header[1] ~= 'S' then return {-1, header[1] or ''} end
    total = tonumber(header[2])
    n = (redis.call('LLEN', key) - 2) / 2
  elseif kind ~= 'none' then
    return {-1, owner(key)}
  end
  -- Entries are read from the oldest on, only as far as needed (in growing chunks): an
  -- operation reads the expired entries, one live one, and on a denial the ones whose expiry
  -- frees enough; the newest is read on its own.
  local ats, costs, fetched, chunk = {}, {}, 0, 16
  local function fetch(i)
    while fetched < i do
      local upto = fetched + chunk
      if upto > n then upto = n end
      local got = redis.call('LRANGE', key, 2 + 2 * fetched, 1 + 2 * upto)
      if #got == 0 then break end -- a list shorter than its count: the caller fails
      for j = 1, #got, 2 do
        fetched = fetched + 1
        ats[fetched], costs[fetched] = tonumber(got[j]), tonumber(got[j + 1])
      end
      chunk = chunk * 2
    end
  end
  local newest_at, newest_cost
  if n > 0 then
    local got = redis.call('LRANGE', key, -2, -1)
    newest_at, newest_cost = tonumber(got[1]), tonumber(got[2])
  end
  local function at(i)
    if i == n then return newest_at end
    fetch(i)
    return ats[i]
  end
  local function cost_of(i)
    if i == n then return newest_cost end
    fetch(i)
    return costs[i]
  end

  -- The view: the effective instant (the newest entry's, if later), and the entries that
  -- have left the window at it.
  local v_now = now_us
  if n > 0 and at(n) > v_now then v_now = at(n) end
  local expired, expired_cost = 0, 0
  for i = 1, n do
    if (v_now - at(i)) * 1000 < w then break end
    expired = i
    expired_cost = expired_cost + cost_of(i)
  end
  local live = total - expired_cost
  if live < 0 then live = 0 end

  -- (at_us * 1000 + w) - now, at least 0: when an entry made at `at_us` stops counting.
  local function until_gone(at_us)
    local d = at_us - now_us
    if d < 0 and -d * 1000 >= w then return 0, 0 end
    return pair(d, w)
  end
  local reset_us, reset_sub = 0, 0
  if n > 0 and live > 0 then reset_us, reset_sub = until_gone(at(n)) end
  local left = limit - live
  if left < 0 then left = 0 end

  if cost > limit then return reply(false, left, reset_us, reset_sub) end
  if live + cost > limit then
    local need = live + cost - limit
    local freed = 0
    for i = expired + 1, n do
      freed = freed + cost_of(i)
      if freed >= need then
        local ru, rs = until_gone(at(i))
        return reply(false, left, reset_us, reset_sub, ru, rs)
      end
    end
    return reply(false, left, reset_us, reset_sub, reset_us, reset_sub)
  end
  if cost == 0 then return reply(true, left, reset_us, reset_sub) end

  -- Admitted: drop the expired entries, add this one (merged into the newest if it has the
  -- same instant), and keep the list until the new entry leaves the window.
  total = total - expired_cost + cost
  if kind == 'list' then
    -- The new entry first, then the trim: the list never empties (Redis would delete it)
    -- before it is written again, which a Redis Cluster slot being moved would refuse.
    if n - expired > 0 and at(n) == v_now then
      redis.call('LSET', key, -1, int(cost_of(n) + cost))
    else
      redis.call('RPUSH', key, int(v_now), int(cost))
    end
    redis.call('LTRIM', key, 2 + 2 * expired, -1)
    redis.call('LPUSH', key, int(total), 'S')
  else
    redis.call('RPUSH', key, 'S', int(total), int(v_now), int(cost))
  end
  local gu, gs = until_gone(v_now)
  redis.call('PEXPIRE', key, ttl_ms(gu, gs))
  return reply(true, limit - live - cost, gu, gs)
end
