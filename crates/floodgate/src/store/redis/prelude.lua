-- Shared by Floodgate's Redis scripts (see redis/mod.rs for the contract).
-- ARGV[1]: now in whole microseconds, or '' to read Redis TIME. ARGV[2]: the least TTL in
-- milliseconds (0 by default). A script for one operation takes the key as KEYS[1] and the
-- algorithm's own arguments as ARGV[3..].
--
-- Each algorithm's twin is one function, `local function NAME(key, now_us, a)`, with `a` its
-- arguments (a[1] is ARGV[3] of a single call): a twin touches only `key`, so that one script
-- can run several twins, each on its own key, in one call (chain.lua). Every `local function`
-- here is a closure built on every call: helpers only some twins use live in files of their
-- own (exact.lua, shaping.lua), included only where needed.
--
-- Lua numbers are doubles: every integer below stays under 2^53 (instants are whole
-- microseconds, durations nanoseconds under 2^53), so all integer arithmetic is exact; the
-- buckets' tokens and the smooth limiters' permits are f64 values computed exactly as in Rust.
-- An instant that is not a whole microsecond is kept as a pair (us, sub): us * 1000 + sub
-- nanoseconds.

local now_us
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now_us = tonumber(ARGV[1])
end
local min_ttl_ms = tonumber(ARGV[2])

-- floor(x / d) and x mod d, exactly, for integers |x| < 2^53 and d > 0.
local function divmod(x, d)
  local r = math.fmod(x, d)
  if r < 0 then r = r + d end
  return (x - r) / d, r
end

-- A duration of us * 1000 + ns nanoseconds (ns any exact integer) as a pair (us, 0..999).
local function pair(us, ns)
  local q, r = divmod(ns, 1000)
  return us + q, r
end

-- The tag of whatever `key` holds: a string's first field, a lease set's marker (leases.lua),
-- a list's first element (sliding_log.lua); '' for anything else.
local function owner(key)
  local kind = redis.call('TYPE', key).ok
  if kind == 'string' then
    return string.match(redis.call('GET', key), '^[^:]*')
  elseif kind == 'zset' then
    local marker = redis.call('ZRANGEBYSCORE', key, 0, 0)[1] or ''
    return string.match(marker, '^[^:]*')
  elseif kind == 'list' then
    return redis.call('LINDEX', key, 0) or ''
  end
  return ''
end

-- The state stored under the key, split on ':'; nil for a missing key. A state of another
-- algorithm gives false and its tag: the twin replies {-1, tag} and the caller reports a
-- conflict.
-- What this call already knows a key holds: its string value, or false for no key (from a
-- batch's one MGET, and from this call's own writes); nil when unknown, so read with GET. A
-- script for one operation knows nothing and reads its key itself.
local known = {}

local function load(key, tag)
  local raw = known[key]
  if raw == nil then
    raw = redis.pcall('GET', key)
    if type(raw) == 'table' and raw.err then return false, owner(key) end
  end
  if not raw then return nil end
  local fields = {}
  for part in string.gmatch(raw, '[^:]+') do fields[#fields + 1] = part end
  if fields[1] ~= tag then return false, fields[1] or '' end
  for i = 2, #fields do fields[i] = tonumber(fields[i]) end
  return fields
end

-- The pair (us, sub) rounded up to whole milliseconds, at least ARGV[2]; nil for a zero
-- duration (the state is already fresh).
local function ttl_ms(us, sub)
  if us == 0 and sub == 0 then return nil end
  local ms, rest = divmod(us, 1000)
  if rest > 0 or sub > 0 then ms = ms + 1 end
  if ms < min_ttl_ms then ms = min_ttl_ms end
  return string.format('%.0f', ms)
end

-- Stores `value` with a TTL of the pair (us, sub) rounded up to whole milliseconds (at least
-- 1 ms and at least ARGV[2]); a zero duration means the state is already fresh: nothing kept.
local function store(key, value, us, sub)
  local ms = ttl_ms(us, sub)
  if ms then
    redis.call('SET', key, value, 'PX', ms)
    known[key] = value
  end
end

-- Whether the pair (us, sub) is a positive duration.
local function positive(us, sub) return us > 0 or (us == 0 and sub > 0) end

-- Stores the value with a TTL of the pair (us, sub) from now, or deletes the key when the
-- state is already fresh then (a refund, or a merge, may leave nothing to remember; storing
-- nothing would leave the old state behind).
local function keep(key, value, us, sub)
  if positive(us, sub) then
    store(key, value, us, sub)
  else
    redis.call('DEL', key)
    known[key] = false
  end
end

-- An integer-valued number as digits. '%d' formats it as an integer, several times cheaper
-- than '%.0f' (exact: every integer here is below 2^53).
local function int(x)
  if x % 1 == 0 then return string.format('%d', x) end
  return string.format('%.0f', x)
end


-- The reply: {allowed, remaining, reset_us, reset_sub}, then when there is a retry instant
-- {has_retry (1), retry_us, retry_sub}. Short when there is none: every element costs Redis a
-- conversion. `extended` pads it to seven elements, for replies that carry more after them.
local function reply(allowed, remaining, reset_us, reset_sub, retry_us, retry_sub)
  if retry_us == nil then
    return {allowed and 1 or 0, remaining, reset_us, reset_sub}
  end
  return {allowed and 1 or 0, remaining, reset_us, reset_sub, 1, retry_us, retry_sub}
end

-- A number with 17 significant digits, which read back exactly; an integer below 2^53
-- (whose '%.17g' is its plain digits) through '%d', the same text at a fraction of the cost.
local function digits17(x)
  if x % 1 == 0 and x < 9007199254740992 and x > -9007199254740992 then
    return string.format('%d', x)
  end
  return string.format('%.17g', x)
end

local function extended(r)
  if r[5] == nil then r[5], r[6], r[7] = 0, 0, 0 end
  return r
end
