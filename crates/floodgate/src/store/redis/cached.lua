-- The cached store's sync (store/cached): each node sends the cost it admitted on its own since
-- its last sync, key by key; Redis adds it to the shared state unconditionally (it was already
-- admitted) and answers with the state after it, which becomes the node's view. A cost of 0
-- only reads the state (a node loading a key it has never seen).
--
-- KEYS: the keys (one cluster slot). ARGV[1], ARGV[2]: as for every script (prelude.lua); then
-- five arguments per key: the state's tag ('F' fixed window, 'T' token bucket, 'G' GCRA), two
-- parameters (F: the window w as whole microseconds and the nanoseconds beyond them; T: the
-- rate as Rust prints the f64, the capacity; G: the emission interval e in ns, unused), the
-- instant of the first admission sent (whole
-- microseconds) and the cost. Needs align.lua.
--
-- Reply: {now_us, value, …}: each key's value after the sync ('' when it has none), or '!' and
-- the tag of the state a key holds if it belongs to another algorithm (left as it is).

-- Fixed window: the cost counts in the window of `at`; a later window than the stored one
-- starts with it; an earlier one is over and the cost is dropped (algorithm/fixed_window.rs,
-- FixedWindow::absorb). The count may exceed the limit.
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

-- Token bucket: refilled up to `at` (or its last update, if later), then `cost` taken even
-- below zero (TokenBucket::absorb): a debt refilled before anything passes again.
local function absorb_bucket(key, rate, cap, at_us, cost)
  local state, found = load(key, 'T')
  if state == false then return found end
  local tokens, last_us = cap, at_us
  if state then tokens, last_us = state[2], state[3] end
  local t = last_us
  if at_us > t then t = at_us end
  local filled = tokens + (t - last_us) * 1000 / 1e9 * rate
  if filled > cap then filled = cap end
  local left = filled - cost
  -- Full again (fresh) (cap - left) / rate after t.
  local ru, rs = pair(t - now_us, math.ceil((cap - left) * (1e9 / rate)))
  keep(key, 'T:' .. digits17(left) .. ':' .. int(t), ru, rs)
  return nil
end

-- GCRA: tat = max(tat, at) + cost * e (Gcra::absorb); fresh again at tat.
local function absorb_gcra(key, e, at_us, cost)
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

local replies = {now_us}
for i = 1, #KEYS do
  local b = 3 + (i - 1) * 5
  local tag, p1, p2 = ARGV[b], tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local at_us, cost = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local key = KEYS[i]
  local conflict
  if cost > 0 then
    if tag == 'F' then
      conflict = absorb_window(key, p1, p2, at_us, cost)
    elseif tag == 'T' then
      conflict = absorb_bucket(key, p1, p2, at_us, cost)
    else
      conflict = absorb_gcra(key, p1, at_us, cost)
    end
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
