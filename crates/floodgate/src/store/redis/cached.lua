-- The cached store's sync (store/cached): each node sends the cost it admitted on its own since
-- its last sync, key by key; Redis adds it to the shared state unconditionally (it was already
-- admitted) and answers with the state after it, which becomes the node's view. A cost of 0
-- only reads the state (a node loading a key it has never seen).
--
-- Each algorithm the cached store decides locally brings its own absorbing function, in its
-- module beside its twin (algorithm/<name>/absorb.lua, declared by its CachedTwin impl);
-- call.rs puts them before this file with `absorbs`, the table of them by state tag.
--
-- KEYS: the keys (one cluster slot). ARGV[1], ARGV[2]: as for every script (prelude.lua); then
-- five arguments per key: the state's tag, the algorithm's two parameters
-- (CachedTwin::cached_parameters), the instant of the first admission sent (whole
-- microseconds) and the cost.
--
-- Reply: {now_us, value, …}: each key's value after the sync ('' when it has none), or '!' and
-- the tag of the state a key holds if it belongs to another algorithm (left as it is).

local replies = {now_us}
for i = 1, #KEYS do
  local b = 3 + (i - 1) * 5
  local tag, p1, p2 = ARGV[b], tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local at_us, cost = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local key = KEYS[i]
  local conflict
  if cost > 0 then
    conflict = absorbs[tag](key, p1, p2, at_us, cost)
  else
    local state, found = load(key, tag)
    if state == false then conflict = found end
  end
  if conflict then
    replies[i + 1] = '!' .. conflict
  else
    replies[i + 1] = redis.pcall('GET', key) or ''
  end
end
return replies
