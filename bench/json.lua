-- wrk script: envoyproxy/ratelimit's POST /json on the domain DOMAIN, one descriptor
-- [("key", "user-N")] over KEYS distinct values (KEYS=1: one key). The Envoy rules of
-- bench/service.yaml key their counters on the value, as ShouldRateLimit over gRPC does.
-- Usage: wrk ... -s bench/json.lua URL -- DOMAIN KEYS
local domain, keys = "bench", 1
function init(args)
  domain = args[1] or domain
  keys = tonumber(args[2] or "1")
  math.randomseed(os.time())
end
function request()
  local value = keys > 1 and ("user-" .. math.random(keys)) or "user-1"
  return wrk.format("POST", "/json", {["content-type"] = "application/json"},
    '{"domain":"' .. domain .. '","descriptors":[{"entries":[{"key":"key","value":"' .. value .. '"}]}]}')
end
