-- Deny by country: answers 403 to a client whose GeoIP country (h:geo():
-- the bootstrap's geoip needs a city or country database) is in
-- policy.config.countries, a comma-separated list of ISO 3166 codes
-- ("DE, FR"). A client whose country is not known is let through; pair
-- the policy with an AuthorizationPolicy on source.geo.country to refuse
-- those too.
local denied = {}
for code in string.gmatch(policy.config.countries or "", "[^,%s]+") do
  denied[string.upper(code)] = true
end

function on_request(h)
  local g = h:geo()
  if g ~= nil and g.country ~= nil and denied[g.country] then
    h:respond(403, {["content-type"] = "text/plain"}, "forbidden\n")
  end
end
