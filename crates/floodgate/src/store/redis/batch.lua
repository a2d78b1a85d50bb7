-- A batch (store/redis/batching.rs): the decisions of several requests in one script call,
-- each request a group of links run in order (one link for a single decision, several for a
-- chain, store/chain.rs). Redis runs the script alone, so every group is atomic, and the
-- groups take effect one after the other, in the order given.
--
-- KEYS: every link's key, the links of all groups in order (a key may appear more than once).
-- ARGV[1]: the batch's instant, as the prelude reads it ('' for Redis TIME); ARGV[2]: the
-- least TTL; ARGV[3]: the number of groups. Then per group: its instant in whole microseconds
-- ('' for the batch's), '1' if the request was already refused (by an earlier part of its
-- chain, on another cluster slot), its link count; then per link: its twin's name, its flags
-- ('r': a denial refuses the request; 's': a denial ends the chain; 'a': undone if the request
-- is refused; '-': none), its argument count n and its n arguments.
--
-- The reply holds one array per group, of one twin reply per link run ({-1, tag} for a state
-- conflict, which neither passes nor ends the chain); the links after the one ending the chain
-- are left out.
--
-- Reading: the string states of every link (all twins but the leases' sorted sets and the
-- sliding log's lists) are read with one MGET; keys it finds missing are confirmed missing by
-- one EXISTS (MGET also answers nil for a key of another type, which the twin must see to
-- report the conflict). What a twin writes updates what the batch knows (`known`, prelude.lua),
-- so a later link on the same key reads the new state without asking Redis again.
--
-- Undoing: before an all-or-nothing link first touches its key, the key's value is kept
-- (DUMP, and its PTTL); when its request is refused, each kept key gets that value and TTL
-- back at the end of the group (RESTORE … REPLACE), or is deleted if it did not exist.
local groups = tonumber(ARGV[3])
local plan, fetch = {}, {}
local at, k = 4, 0
for g = 1, groups do
  local links = {}
  local count = tonumber(ARGV[at + 2])
  plan[g] = {ARGV[at], ARGV[at + 1] == '1', links}
  at = at + 3
  for i = 1, count do
    local name, n = ARGV[at], tonumber(ARGV[at + 2])
    k = k + 1
    links[i] = {name, ARGV[at + 1], at + 3, n, KEYS[k]}
    at = at + 3 + n
    if name ~= 'leases' and name ~= 'sliding_log' then fetch[#fetch + 1] = KEYS[k] end
  end
end

-- One read for all (a lone key is read by its twin: the same cost).
if #fetch > 1 then
  local values = redis.call('MGET', unpack(fetch))
  local absent = {}
  for i, key in ipairs(fetch) do
    local v = values[i]
    if v then known[key] = v else absent[#absent + 1] = key end
  end
  if #absent > 0 and redis.call('EXISTS', unpack(absent)) == 0 then
    for _, key in ipairs(absent) do known[key] = false end
  end
end

local replies = {}
for g = 1, groups do
  local instant, refused, links = plan[g][1], plan[g][2], plan[g][3]
  local t = now_us
  if instant ~= '' then t = tonumber(instant) end
  local out, kept, order = {}, {}, {}
  for i, link in ipairs(links) do
    local name, flags, first, n, key = link[1], link[2], link[3], link[4], link[5]
    local a = {}
    for j = 1, n do a[j] = ARGV[first + j - 1] end
    if flags ~= '-' and string.find(flags, 'a', 1, true) and kept[key] == nil then
      local ttl = redis.call('PTTL', key)
      if ttl == -2 then
        kept[key] = false
      else
        kept[key] = {redis.call('DUMP', key), ttl}
      end
      order[#order + 1] = key
    end
    -- The sets and lists are written behind `known`'s back.
    if name == 'leases' or name == 'sliding_log' then known[key] = nil end
    local r = twins[name](key, t, a)
    out[i] = r
    if r[1] == 0 and flags ~= '-' then
      if string.find(flags, 'r', 1, true) then refused = true end
      if string.find(flags, 's', 1, true) then break end
    end
  end
  if refused then
    for _, key in ipairs(order) do
      local value = kept[key]
      if value then
        -- PTTL -1 (no expiry) restores as 0 (none); a key about to expire keeps 1 ms.
        local ttl = value[2]
        if ttl == -1 then ttl = 0 elseif ttl < 1 then ttl = 1 end
        redis.call('RESTORE', key, ttl, value[1], 'REPLACE')
        known[key] = nil
      else
        redis.call('DEL', key)
        known[key] = false
      end
    end
  end
  replies[g] = out
end
return replies
