-- The fixed window's part of the cached store's sync (store/redis/cached.lua): the cost counts
-- in the window of `at`; a later window than the stored one starts with it; an earlier one is
-- over and the cost is dropped (twin.rs, CachedTwin::absorb). The count may exceed the limit.
-- Needs align.lua.
local function absorb_window(key, w_us, w_sub, at_us, cost)
  local state, found = load(key, 'F')
  if state == false then return found end
  local a_us, a_sub = window_start(at_us, w_us, w_sub)
  local s_us, s_sub, count = a_us, a_sub, 0
  if state then s_us, s_sub, count = state[2], state[3], state[4] end
  if a_us == s_us and a_sub == s_sub then
    count = count + cost
  elseif a_us > s_us or (a_us == s_us and a_sub > s_sub) then
    s_us, s_sub, count = a_us, a_sub, cost
  else
    return nil
  end
  -- Kept until the window ends; a window already over is not written at all.
  local eu, es = pair(s_us - now_us + w_us, s_sub + w_sub)
  if positive(eu, es) then
    store(key, 'F:' .. int(s_us) .. ':' .. int(s_sub) .. ':' .. int(count), eu, es)
  end
  return nil
end
