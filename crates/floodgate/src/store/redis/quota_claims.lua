-- The nodes' claims on one shared limit (floodgate::quota::Claims::apply), twin of the Rust:
-- KEYS[1] is the limit's hash; ARGV[3] the step ('r' report, 'l' leave), ARGV[4] the node,
-- ARGV[5] the capacity, ARGV[6] a grant's time to live and ARGV[7] the idle time after which
-- a node leaves (both in microseconds), ARGV[8] what the node's clients hold, ARGV[9] the room
-- it asks for beyond that, then its groups as (count, demand, margin) triples. Capacity, demands and holds arrive at most 2^40
-- and counts at most 2^20, so every sum of whole numbers below is exact; the division's
-- fractions are computed by the same operations in the same order as the Rust, so they are
-- the same doubles.
--
-- The hash: 'c:' .. node = 'reported until held' then ' count demand margin' per group, and
-- 'r:' .. node = 'held until' for what a node that left still holds. Instants are whole
-- microseconds. Nodes are ordered by their names' bytes, compared as Rust compares them
-- (Lua's '<' follows the server's locale). A step reads the hash (a field per node) and
-- writes only the fields it changes.
--
-- Returns {granted (-1 for none), the sum of demands, the grants in force, the clients, the
-- nodes}.

local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- floodgate::quota::share::fill: water-filling of amount over {count, wanted} groups.
local function fill(amount, groups)
  local shares, order = {}, {}
  for i = 1, #groups do
    shares[i] = 0
    if groups[i][1] > 0 then order[#order + 1] = i end
  end
  table.sort(order, function(i, j)
    local x = groups[i][2] * groups[j][1]
    local y = groups[j][2] * groups[i][1]
    if x ~= y then return x < y end
    return i < j
  end)
  local left, clients = amount, 0
  for _, i in ipairs(order) do clients = clients + groups[i][1] end
  for k, i in ipairs(order) do
    local count, wanted = groups[i][1], groups[i][2]
    if wanted * clients <= left * count then
      shares[i] = wanted
      left = left - wanted
      clients = clients - count
    else
      local level = left / clients
      for r = k, #order do
        local j = order[r]
        shares[j] = groups[j][1] * level
      end
      break
    end
  end
  return shares
end

-- floodgate::quota::share::divide with the reserve.
local function divide(capacity, groups)
  local demand, need, count = 0, 0, 0
  for _, g in ipairs(groups) do
    demand = demand + g.demand
    need = need + (g.demand + g.margin)
    count = count + g.count
  end
  local shares = {}
  local kept = 0
  if demand < capacity then kept = (capacity - demand) / 2 end
  local available = capacity - kept
  if need <= available then
    local extra = math.min(available - need, math.max(need, available / 4))
    for i, g in ipairs(groups) do
      if count > 0 then
        shares[i] = (g.demand + g.margin) + extra * g.count / count
      else
        shares[i] = 0
      end
    end
    return shares
  end
  if demand < available then
    local margins = {}
    for i, g in ipairs(groups) do margins[i] = {g.count, g.margin} end
    local met = fill(available - demand, margins)
    for i, g in ipairs(groups) do shares[i] = g.demand + met[i] end
    return shares
  end
  local needs = {}
  for i, g in ipairs(groups) do needs[i] = {g.count, g.demand + g.margin} end
  return fill(capacity, needs)
end

local function parse_groups(words, first)
  local groups = {}
  for k = first, #words, 3 do
    groups[#groups + 1] = {count = tonumber(words[k]), demand = tonumber(words[k + 1]),
      margin = tonumber(words[k + 2])}
  end
  return groups
end

local function words_of(s)
  local words = {}
  for w in string.gmatch(s, '%d+') do words[#words + 1] = w end
  return words
end

local function quota_claims(key, now, a)
  local step, who = a[1], a[2]
  local capacity, ttl, idle = tonumber(a[3]), tonumber(a[4]), tonumber(a[5])
  local held_now, wanted = tonumber(a[6]), tonumber(a[7])
  local reported_groups = {}
  for k = 8, #a, 3 do
    reported_groups[#reported_groups + 1] = {count = math.min(tonumber(a[k]), 1048576),
      demand = math.min(tonumber(a[k + 1]), 1099511627776),
      margin = math.min(tonumber(a[k + 2]), 1099511627776)}
  end

  -- Read the hash: nodes (sorted) and what leavers still hold.
  local claims, retiring = {}, {}
  local fields = redis.call('HGETALL', key)
  for f = 1, #fields, 2 do
    local name, value = fields[f], fields[f + 1]
    local kind, node = string.sub(name, 1, 2), string.sub(name, 3)
    local w = words_of(value)
    if kind == 'c:' then
      claims[#claims + 1] = {claimant = node, reported = tonumber(w[1]), ends = tonumber(w[2]),
        held = tonumber(w[3]), groups = parse_groups(w, 4)}
    elseif kind == 'r:' then
      retiring[node] = {held = tonumber(w[1]), ends = tonumber(w[2])}
    end
  end
  table.sort(claims, function(x, y) return before(x.claimant, y.claimant) end)

  local changed, gone = {}, {}
  local function in_force_of(c)
    if c.ends > now then return c.held end
    return 0
  end
  local function retire(c)
    gone['c:' .. c.claimant] = true
    if in_force_of(c) == 0 then
      if retiring[c.claimant] then
        retiring[c.claimant] = nil
        gone['r:' .. c.claimant] = true
        changed['r:' .. c.claimant] = nil
      end
      return
    end
    retiring[c.claimant] = {held = c.held, ends = c.ends}
    changed['r:' .. c.claimant] = true
  end
  local function in_force()
    local total = 0
    for _, c in ipairs(claims) do total = total + in_force_of(c) end
    for _, r in pairs(retiring) do
      if r.ends > now then total = total + r.held end
    end
    return total
  end

  -- Nodes gone quiet leave.
  local kept = {}
  for _, c in ipairs(claims) do
    if now - c.reported >= idle then retire(c) else kept[#kept + 1] = c end
  end
  claims = kept

  local granted = -1
  local i = nil
  for k, c in ipairs(claims) do
    if c.claimant == who then i = k break end
  end
  if step == 'r' then
    -- What the node holds covers what it held before it left.
    if retiring[who] then
      retiring[who] = nil
      gone['r:' .. who] = true
      changed['r:' .. who] = nil
    end
    if i then
      claims[i].groups = reported_groups
      claims[i].reported = now
    else
      local c = {claimant = who, reported = now, ends = now, held = 0, groups = reported_groups}
      i = #claims + 1
      for k, other in ipairs(claims) do
        if before(who, other.claimant) then i = k break end
      end
      table.insert(claims, i, c)
    end
    -- The node's target: the floor of its groups' shares, over every node's groups.
    local all, first, target = {}, 0, 0
    for k, c in ipairs(claims) do
      if k == i then first = #all end
      for _, g in ipairs(c.groups) do all[#all + 1] = g end
    end
    local shares = divide(capacity, all)
    local sum = 0
    for k = first + 1, first + #claims[i].groups do sum = sum + shares[k] end
    target = math.floor(sum)
    if wanted > 0 then target = math.max(target, held_now + wanted) end
    local c = claims[i]
    local others = in_force() - in_force_of(c)
    if target <= held_now then
      granted = target
    else
      granted = math.max(math.min(target, math.max(capacity - others, 0)), held_now)
    end
    c.held = math.max(granted, held_now)
    c.ends = now + ttl
    gone['c:' .. who] = nil
    changed['c:' .. who] = c
  elseif step == 'l' and i then
    retire(claims[i])
    table.remove(claims, i)
  end
  for name, r in pairs(retiring) do
    if r.ends <= now then
      retiring[name] = nil
      gone['r:' .. name] = true
      changed['r:' .. name] = nil
    end
  end

  -- Write what changed, and let the hash expire once nothing in it matters any more.
  local out, drop = {}, {}
  for field in pairs(gone) do
    if not changed[field] then drop[#drop + 1] = field end
  end
  for field, what in pairs(changed) do
    local value
    if string.sub(field, 1, 2) == 'c:' then
      value = string.format('%d %d %d', what.reported, what.ends, what.held)
      for _, g in ipairs(what.groups) do
        value = value .. string.format(' %d %d %d', g.count, g.demand, g.margin)
      end
    else
      local r = retiring[string.sub(field, 3)]
      value = string.format('%d %d', r.held, r.ends)
    end
    out[#out + 1] = field
    out[#out + 1] = value
  end
  if #drop > 0 then redis.call('HDEL', key, unpack(drop)) end
  if #out > 0 then redis.call('HSET', key, unpack(out)) end
  local last, demand, clients = now, 0, 0
  for _, c in ipairs(claims) do
    last = math.max(last, c.reported + idle, c.ends)
    for _, g in ipairs(c.groups) do
      demand = demand + g.demand
      clients = clients + g.count
    end
  end
  for _, r in pairs(retiring) do last = math.max(last, r.ends) end
  if #claims > 0 or next(retiring) ~= nil then
    redis.call('PEXPIRE', key, math.max(math.floor((last - now) / 1000) + 1000, min_ttl_ms))
  end
  return {granted, demand, in_force(), clients, #claims}
end
