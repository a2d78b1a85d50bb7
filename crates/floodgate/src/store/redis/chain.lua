-- A chain (store/chain.rs): one request's operations on several keys, in order, in one call.
-- ARGV[3]: the number of links; ARGV[4]: '1' if the request was already refused (by an
-- earlier part of the chain, on another cluster slot); then, per link, its twin's name, its
-- flags ('r': a denial
-- refuses the request; 's': a denial ends the chain; 'a': undone if the request is refused;
-- '-': none), its argument count n and its n arguments. KEYS[i] is link i's key.
--
-- The reply holds one twin reply per link run ({-1, tag} for a state conflict, which neither
-- passes nor ends the chain); the links after the one ending the chain are left out.
--
-- Undoing: before an all-or-nothing link first touches its key, the key's value is kept
-- (DUMP, and its PTTL); when the request is refused, each kept key gets that value and TTL
-- back at the end (RESTORE … REPLACE), or is deleted if it did not exist. Redis runs a script
-- alone, so nothing else ever sees the undone effects.
local count = tonumber(ARGV[3])
local at = 5
local replies = {}
local kept, order = {}, {}
local refused = ARGV[4] == '1'
for i = 1, count do
  local name, flags, n = ARGV[at], ARGV[at + 1], tonumber(ARGV[at + 2])
  local a = {}
  for j = 1, n do a[j] = ARGV[at + 2 + j] end
  at = at + 3 + n
  local key = KEYS[i]
  if string.find(flags, 'a', 1, true) and kept[key] == nil then
    local ttl = redis.call('PTTL', key)
    if ttl == -2 then
      kept[key] = false
    else
      kept[key] = {redis.call('DUMP', key), ttl}
    end
    order[#order + 1] = key
  end
  local r = twins[name](key, now_us, a)
  replies[i] = r
  if r[1] == 0 and string.find(flags, 'r', 1, true) then refused = true end
  if r[1] == 0 and string.find(flags, 's', 1, true) then break end
end
if refused then
  for _, k in ipairs(order) do
    local value = kept[k]
    if value then
      -- PTTL -1 (no expiry) restores as 0 (none); a key about to expire keeps 1 ms.
      local ttl = value[2]
      if ttl == -1 then ttl = 0 elseif ttl < 1 then ttl = 1 end
      redis.call('RESTORE', k, ttl, value[1], 'REPLACE')
    else
      redis.call('DEL', k)
    end
  end
end
return replies
