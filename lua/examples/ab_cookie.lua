-- A/B routing by cookie. A client with the cookie ab=a or ab=b keeps its
-- group; a new one is put in group b with probability
-- policy.config.percent_b (default 50) and gets the cookie on the
-- response. The group goes upstream as x-ab-group, which a
-- VirtualService matches (on_request runs before routing):
--   http:
--   - match: [{headers: {x-ab-group: {exact: b}}}]
--     route: [{destination: {host: reviews, subset: v2}}]
--   - route: [{destination: {host: reviews, subset: v1}}]
local util = require("strait.util")
local percent_b = tonumber(policy.config.percent_b or "50")

function on_request(h)
  local group = util.cookie(h, "ab")
  if group ~= "a" and group ~= "b" then
    group = math.random(100) <= percent_b and "b" or "a"
    h.ctx.new_group = group
  end
  h:headers():set("x-ab-group", group)
end

function on_response(h)
  if h.ctx.new_group then
    h:headers():add("set-cookie", "ab=" .. h.ctx.new_group ..
                    "; Path=/; Max-Age=2592000")
  end
end
