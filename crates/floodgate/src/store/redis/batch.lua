-- A batch (store/redis/batching.rs): the decisions of several requests in one script call,
-- each request a group of links run in order (one link for a single decision, several for a
-- chain, store/chain.rs). Redis runs the script alone, so every group is atomic, and the
-- groups take effect one after the other, in the order given.
--
-- KEYS: every link's key, the links of all groups in order (a key may appear more than once).
-- On a cluster (the script's variant allowed keys of several slots of one node) only the
-- first is declared, which routes the call: all links' keys then follow the groups in ARGV,
-- then the keys of each slot (its key count, a key of the slot that never exists, then its
-- keys), then the number of links' keys and the length of that per-slot part (`batch_keys`,
-- defined before this file).
-- ARGV[1]: the batch's instant, as the prelude reads it ('' for Redis TIME); ARGV[2]: the
-- least TTL; ARGV[3]: the number of specs. Then each spec, an operation that links share: its
-- twin's name, its argument count n and its n arguments. Then the groups, each either
--   * one spec number: a lone decision at the batch's instant (most groups: one argument), or
--   * 'g', its instant in whole microseconds ('' for the batch's), '1' if the request was
--     already refused (by an earlier part of its chain, on another cluster slot), its link
--     count, then per link its spec number and flags ('r': a denial refuses the request; 's': a
--     denial ends the chain; 'a': undone if the request is refused; 'f': a state conflict
--     refuses the request and ends the chain, the link's stage failing closed; '-': none).
--
-- The reply is one flat array (Redis converts a table per decision at a cost several times
-- that of its numbers): per group, the number of links run, then per link run its twin's reply
-- as its length and its elements ({-1, tag} for a state conflict, which neither passes nor
-- ends the chain); the links after the one ending the chain are left out.
--
-- Reading: every key is read with one MGET, and the keys it found missing are confirmed
-- missing by one EXISTS (MGET also answers nil for a key of another type, which the twin must
-- see to report the conflict). What a twin writes updates what the batch knows (`known`,
-- prelude.lua), so a later link on the same key reads the new state without asking Redis.
-- The leases' sets and the sliding log's lists are read by their twins.
--
-- Undoing: before an all-or-nothing link first touches its key, the key's value is kept
-- (DUMP, and its PTTL); when its request is refused, each kept key gets that value and TTL
-- back at the end of the group (RESTORE … REPLACE), or is deleted if it did not exist. Links
-- joined by 'j' (a limit's levels) keep their keys the same way, and are put back as soon as
-- the last of them has run if one of them was denied.
local specs = {}
local at = 4
for s = 1, tonumber(ARGV[3]) do
  local n = tonumber(ARGV[at + 1])
  -- The twins read their numbers with tonumber, which takes a number as it is: converted once
  -- here for every link of the spec. Not for the twins that compare arguments as text.
  local numbers = ARGV[at] ~= 'leases' and ARGV[at] ~= 'smooth'
  local a = {}
  for j = 1, n do
    local v = ARGV[at + 1 + j]
    a[j] = numbers and tonumber(v) or v
  end
  specs[s] = {twins[ARGV[at]], a, ARGV[at] == 'leases' or ARGV[at] == 'sliding_log'}
  at = at + 2 + n
end

local keys, last, fetches, probes = batch_keys()

-- On a cluster, every slot the batch touches must be served here and not be moving: a key of
-- another node's slot, or a key missing from a slot being moved, would stop the script part
-- way, after earlier groups had been written. A key of the slot that never exists tells, one
-- per slot: EXISTS on it fails on such a slot (MOVED, ASK) before anything is written. The
-- batch then answers 'unstable', and its requests are sent one by one, each where its slot
-- lives (store/redis/batching.rs).
if probes then
  for _, probe in ipairs(probes) do
    local found = redis.pcall('EXISTS', probe)
    if type(found) == 'table' and found.err then return {'unstable'} end
  end
end

-- `fetches`: the keys to read together (all of them on a single Redis; on a cluster one list
-- per slot, since one command may touch one slot only). A lone key is read by its twin.
for _, fetch in ipairs(fetches) do
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
end

-- Runs spec `s` on `key` at `t`.
local function run(s, key, t)
  local spec = specs[s]
  -- The sets and lists are written behind `known`'s back.
  if spec[3] then known[key] = nil end
  return spec[1](key, t, spec[2])
end

local replies, k = {}, 0

-- What `key` holds now, to put back later: its DUMP and PTTL, or false if it does not exist.
local function keep(key)
  local ttl = redis.call('PTTL', key)
  if ttl == -2 then return false end
  return {redis.call('DUMP', key), ttl}
end

-- Puts back every key of `order` as `kept` holds it (see `keep`).
local function put_back(kept, order)
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

-- Appends the twin reply `r` to the flat reply.
local function put(r)
  local n = #replies
  replies[n + 1] = #r
  for i = 1, #r do replies[n + 1 + i] = r[i] end
end

while at <= last do
  local head = ARGV[at]
  if head ~= 'g' then
    k = k + 1
    replies[#replies + 1] = 1
    put(run(tonumber(head), keys[k], now_us))
    at = at + 1
  else
    local t = now_us
    if ARGV[at + 1] ~= '' then t = tonumber(ARGV[at + 1]) end
    local refused = ARGV[at + 2] == '1'
    local count = tonumber(ARGV[at + 3])
    at = at + 4
    local ran = #replies + 1
    replies[ran] = 0
    local kept, order = nil, nil
    -- The open group's kept keys (links joined with 'j'), and whether one of its links was
    -- denied.
    local group, group_order, group_denied = nil, nil, false
    for i = 1, count do
      local s, flags = tonumber(ARGV[at]), ARGV[at + 1]
      local next_joins = i < count and string.find(ARGV[at + 3], 'j', 1, true) ~= nil
      at = at + 2
      k = k + 1
      local key = keys[k]
      local joins = flags ~= '-' and string.find(flags, 'j', 1, true) ~= nil
      if flags ~= '-' and string.find(flags, 'a', 1, true) then
        if not kept then kept, order = {}, {} end
        if kept[key] == nil then
          kept[key] = keep(key)
          order[#order + 1] = key
        end
      end
      -- A group opens at its first link (or at a joined link whose group began in an earlier
      -- call: a cluster chain split between slots, whose parts each decide alone).
      if (next_joins and not joins) or (joins and not group) then
        group, group_order, group_denied = {}, {}, false
      end
      if group and group[key] == nil then
        group[key] = keep(key)
        group_order[#group_order + 1] = key
      end
      local r = run(s, key, t)
      replies[ran] = i
      put(r)
      local failed = r[1] == -1 and flags ~= '-' and string.find(flags, 'f', 1, true) ~= nil
      local stop = failed
      if failed then refused = true end
      if r[1] == 0 and group then group_denied = true end
      if r[1] == 0 and flags ~= '-' then
        if string.find(flags, 'r', 1, true) then refused = true end
        if string.find(flags, 's', 1, true) then stop = true end
      end
      if group and (stop or not next_joins) then
        if group_denied then put_back(group, group_order) end
        group = nil
      end
      if stop then
        -- The links left are not run: skip their arguments and keys.
        at = at + 2 * (count - i)
        k = k + (count - i)
        break
      end
    end
    if refused and order then put_back(kept, order) end
  end
end
return replies
