-- External authorization: asks an auth service about each request,
-- with the request's Authorization header, and lets it through only
-- when the service answers 200; anything else (another status, a
-- timeout, an unreachable service) is answered 403 here.
--
-- config:
--   upstream  the auth service as "host:port", a host of strait's
--             registry (a ServiceEntry or Service; required)
--   path      what is asked (default /check); the request's method and
--             path with query go along as x-original-method and
--             x-original-uri
--   timeout_ms  how long to wait (default: limits.httpCallTimeout)
--
-- The call goes through the service's cluster, so its DestinationRule
-- (TLS, mTLS, load balancing, outlier detection) applies. The
-- request's body is not read: the call carries only headers.
local upstream = policy.config.upstream
local path = policy.config.path or "/check"
local timeout_ms = tonumber(policy.config.timeout_ms)

function on_request(h)
  local hd = h:headers()
  local uri = h:path()
  if h:query() ~= "" then uri = uri .. "?" .. h:query() end
  local headers = {
    ["x-original-method"] = h:method(),
    ["x-original-uri"] = uri,
  }
  local auth = hd:get("authorization")
  if auth ~= nil then headers["authorization"] = auth end
  local status, _, _ = strait.http.request{
    upstream = upstream, method = "GET", path = path, headers = headers,
    timeout_ms = timeout_ms,
  }
  if status ~= 200 then
    h:respond(403, {["content-type"] = "text/plain"}, "forbidden\n")
  end
end
