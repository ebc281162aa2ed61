-- JWT claim to header: copies claim policy.config.claim (default sub)
-- of the bearer token to request header policy.config.header (default
-- x-jwt-sub), and removes a client-sent header of that name first.
--
-- This script does not verify the token: pair it with a
-- RequestAuthentication (and an AuthorizationPolicy requiring a
-- principal), which strait checks before any LuaPolicy runs, so only a
-- verified token reaches it.
local util = require("strait.util")
local claim = policy.config.claim or "sub"
local header = policy.config.header or "x-jwt-sub"

function on_request(h)
  local hd = h:headers()
  hd:remove(header)
  local auth = hd:get("authorization")
  if auth == nil then return end
  local token = string.match(auth, "^[Bb]earer%s+([%w%-_%.]+)$")
  if token == nil then return end
  local parts = util.split(token, ".")
  if #parts ~= 3 then return end
  local payload = util.b64decode(parts[2])
  if payload == nil then return end
  local claims = util.json_decode(payload)
  local v = type(claims) == "table" and claims[claim] or nil
  if type(v) == "string" or type(v) == "number" or type(v) == "boolean" then
    hd:set(header, tostring(v))
  end
end
