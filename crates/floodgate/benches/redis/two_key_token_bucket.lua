-- The classic two-key token bucket that many rate limiters run on Redis (written here only as
-- a benchmark baseline for BENCHMARKS.md, not used by Floodgate): the tokens left and the time
-- of the last refill live in two keys, each read with GET and written back with SETEX.
-- KEYS[1]: tokens key, KEYS[2]: timestamp key. ARGV: rate (tokens/s), capacity, now (s),
-- requested tokens. Returns {allowed (0/1), tokens left}.
local rate, capacity = tonumber(ARGV[1]), tonumber(ARGV[2])
local now, requested = tonumber(ARGV[3]), tonumber(ARGV[4])
local ttl = math.floor(capacity / rate * 2)

local tokens = tonumber(redis.call('GET', KEYS[1])) or capacity
local last = tonumber(redis.call('GET', KEYS[2])) or 0

local elapsed = now - last
if elapsed < 0 then elapsed = 0 end
tokens = math.min(capacity, tokens + elapsed * rate)
local allowed = tokens >= requested
if allowed then tokens = tokens - requested end

redis.call('SETEX', KEYS[1], ttl, tokens)
redis.call('SETEX', KEYS[2], ttl, now)
return {allowed and 1 or 0, math.floor(tokens)}
