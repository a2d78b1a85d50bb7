-- wrk script: POST /v1/check for the limit named by LIMIT over KEYS distinct keys
-- (KEYS=1: one key). Usage: wrk ... -s bench/check.lua URL -- LIMIT KEYS
local limit, keys = "allow", 1
function init(args)
  limit = args[1] or limit
  keys = tonumber(args[2] or "1")
  math.randomseed(os.time())
end
function request()
  local key = keys > 1 and ("user-" .. math.random(keys)) or "user-1"
  return wrk.format("POST", "/v1/check", {["content-type"] = "application/json"},
    '{"limiter":"' .. limit .. '","key":"' .. key .. '"}')
end
