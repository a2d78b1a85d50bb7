-- GCRA's part of the cached store's sync (store/redis/cached.lua): tat = max(tat, at) +
-- cost * e (twin.rs, CachedTwin::absorb); fresh again at tat. The second parameter is unused.
local function absorb_gcra(key, e, _, at_us, cost)
  local state, found = load(key, 'G')
  if state == false then return found end
  local t_us, t_sub = at_us, 0
  if state and (state[2] > at_us or (state[2] == at_us and state[3] > 0)) then
    t_us, t_sub = state[2], state[3]
  end
  local n_us, n_sub = pair(t_us, t_sub + cost * e)
  local ru, rs = pair(n_us - now_us, n_sub)
  keep(key, 'G:' .. int(n_us) .. ':' .. int(n_sub), ru, rs)
  return nil
end
