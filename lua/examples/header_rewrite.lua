-- Header rewrite: sets policy.config.header to policy.config.value on
-- the request (default x-gateway: strait), drops the client's
-- x-internal-* headers, and tags the response with x-served-by.
local name = policy.config.header or "x-gateway"
local value = policy.config.value or "strait"

function on_request(h)
  local hd = h:headers()
  local drop = {}
  for k in hd:iter() do
    if string.sub(k, 1, 11) == "x-internal-" then drop[#drop + 1] = k end
  end
  for _, k in ipairs(drop) do hd:remove(k) end
  hd:set(name, value)
end

function on_response(h)
  h:headers():set("x-served-by", "strait")
end
