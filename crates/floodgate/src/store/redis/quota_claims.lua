-- The claims on one shared limit (floodgate::quota::Claims::apply), twin of the Rust: KEYS[1]
-- is the limit's hash; ARGV[3] the step ('r' report, 'g' grant, 'l' leave), ARGV[4] the
-- claimant, ARGV[5] its demand, ARGV[6] the capacity, ARGV[7] the grants' time to live and
-- ARGV[8] the idle time after which a claimant leaves, both in microseconds. Capacity and
-- demand arrive at most 2^40, so every sum below is exact.
--
-- The hash: 'c:' .. claimant = 'demand reported granted until' for each claimant, and
-- 'r:' .. claimant = 'granted until' for what one that left still holds. Instants are whole
-- microseconds. Claimants are ordered by their names' bytes, compared as Rust compares them
-- (Lua's '<' follows the server's locale, so names are compared byte by byte here).
--
-- Returns {granted (-1 for none), the sum of demands, the grants in force, the claimants}.

local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- floodgate::quota::share::divide: water-filling, then what no demand took split evenly.
local function divide(capacity, demands)
  local n = #demands
  local shares = {}
  if n == 0 then return shares end
  for i = 1, n do shares[i] = 0 end
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(i, j)
    if demands[i] ~= demands[j] then return demands[i] < demands[j] end
    return i < j
  end)
  local left = capacity
  for taken = 1, n do
    local i = order[taken]
    local claimants = n - taken + 1
    local even, remainder = divmod(left, claimants)
    if demands[i] <= even then
      shares[i] = demands[i]
      left = left - demands[i]
    else
      local short = {}
      for k = taken, n do short[#short + 1] = order[k] end
      table.sort(short)
      for rank, j in ipairs(short) do
        shares[j] = even + ((rank <= remainder) and 1 or 0)
      end
      left = 0
      break
    end
  end
  local each, rest = divmod(left, n)
  for i = 1, n do
    shares[i] = shares[i] + each + ((i <= rest) and 1 or 0)
  end
  return shares
end

local function quota_claims(key, now, a)
  local step, who = a[1], a[2]
  local demand, capacity = tonumber(a[3]), tonumber(a[4])
  local ttl, idle = tonumber(a[5]), tonumber(a[6])

  -- Read the hash: claimants (sorted) and what leavers still hold.
  local claims, retiring = {}, {}
  local fields = redis.call('HGETALL', key)
  for f = 1, #fields, 2 do
    local name, value = fields[f], fields[f + 1]
    local kind, claimant = string.sub(name, 1, 2), string.sub(name, 3)
    if kind == 'c:' then
      local d, r, g, u = string.match(value, '^(%d+) (%d+) (%d+) (%d+)$')
      claims[#claims + 1] = {claimant = claimant, demand = tonumber(d), reported = tonumber(r),
        granted = tonumber(g), ends = tonumber(u)}
    elseif kind == 'r:' then
      local g, u = string.match(value, '^(%d+) (%d+)$')
      retiring[claimant] = {granted = tonumber(g), ends = tonumber(u)}
    end
  end
  table.sort(claims, function(x, y) return before(x.claimant, y.claimant) end)

  local function held(c)
    if c.ends > now then return c.granted end
    return 0
  end
  local function retire(c)
    if held(c) == 0 then return end
    local earlier = retiring[c.claimant]
    if earlier and earlier.ends > now then
      earlier.granted = earlier.granted + c.granted
      earlier.ends = math.max(earlier.ends, c.ends)
    else
      retiring[c.claimant] = {granted = c.granted, ends = c.ends}
    end
  end
  local function in_force()
    local total = 0
    for _, c in ipairs(claims) do total = total + held(c) end
    for _, r in pairs(retiring) do
      if r.ends > now then total = total + r.granted end
    end
    return total
  end
  local function position(claimant)
    for i, c in ipairs(claims) do
      if c.claimant == claimant then return i end
    end
    return nil
  end

  -- Claimants gone quiet leave.
  local kept = {}
  for _, c in ipairs(claims) do
    if now - c.reported >= idle then retire(c) else kept[#kept + 1] = c end
  end
  claims = kept

  local function grant(i)
    for name, r in pairs(retiring) do
      if r.ends <= now then retiring[name] = nil end
    end
    local demands = {}
    for k, c in ipairs(claims) do demands[k] = c.demand end
    local target = divide(capacity, demands)[i]
    local c = claims[i]
    local has = held(c)
    local granted
    if target <= has then
      granted = target
    else
      local others = in_force() - has
      granted = math.max(math.min(target, math.max(capacity - others, 0)), has)
    end
    c.granted = granted
    c.ends = now + ttl
    return granted
  end

  local granted = -1
  local i = position(who)
  if step == 'r' then
    if i then
      claims[i].demand = demand
      claims[i].reported = now
    else
      -- A new claimant joins in its place by name.
      local c = {claimant = who, demand = demand, reported = now, granted = 0, ends = now}
      i = #claims + 1
      for k, other in ipairs(claims) do
        if before(who, other.claimant) then i = k break end
      end
      table.insert(claims, i, c)
    end
    granted = grant(i)
  elseif step == 'g' then
    if i then granted = grant(i) end
  elseif step == 'l' then
    if i then
      retire(claims[i])
      table.remove(claims, i)
    end
  end
  for name, r in pairs(retiring) do
    if r.ends <= now then retiring[name] = nil end
  end

  -- Write the hash back whole, and let it expire once nothing in it matters any more.
  redis.call('DEL', key)
  local last = now
  local total_demand = 0
  local out = {}
  for _, c in ipairs(claims) do
    out[#out + 1] = 'c:' .. c.claimant
    out[#out + 1] = string.format('%d %d %d %d', c.demand, c.reported, c.granted, c.ends)
    last = math.max(last, c.reported + idle, c.ends)
    total_demand = total_demand + c.demand
  end
  for name, r in pairs(retiring) do
    out[#out + 1] = 'r:' .. name
    out[#out + 1] = string.format('%d %d', r.granted, r.ends)
    last = math.max(last, r.ends)
  end
  if #out > 0 then
    -- In slices, so that no call takes more arguments than Lua's stack holds.
    for first = 1, #out, 200 do
      redis.call('HSET', key, unpack(out, first, math.min(first + 199, #out)))
    end
    redis.call('PEXPIRE', key, math.max(math.floor((last - now) / 1000) + 1000, min_ttl_ms))
  end
  return {granted, total_demand, in_force(), #claims}
end
