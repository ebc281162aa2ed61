-- Rate limit by client: a token bucket per client address in a shared
-- dict, so every worker counts against the same bucket. Needs the dict
-- declared in the policy:
--   sharedDicts: [{name: ratelimit, size: 10Mi}]
--   config: {rate: "10", burst: "20"}      # tokens per second, bucket size
-- Over the limit the client gets 429 with Retry-After. When the dict is
-- full (no memory), the request goes on: the limiter fails open.
local dict = assert(strait.shared[policy.config.dict or "ratelimit"],
                    "declare the shared dict in spec.sharedDicts")
local rate = tonumber(policy.config.rate or "10")
local burst = tonumber(policy.config.burst or "20")
local take = strait.ratelimit.token_bucket

function on_request(h)
  local ok, _, retry = take(dict, h:remote_addr(), rate, burst)
  if ok == false then
    h:respond(429, {["retry-after"] = tostring(math.ceil(retry))},
              "rate limited\n")
  end
end
