-- strait.util: small helpers for LuaPolicy scripts, loaded with
-- local util = require("strait.util"). Pure Lua, no state.
local M = {}

-- split(s, sep): the pieces of s between plain-text separators sep.
function M.split(s, sep)
  local out, i = {}, 1
  while true do
    local j = string.find(s, sep, i, true)
    if not j then
      out[#out + 1] = string.sub(s, i)
      return out
    end
    out[#out + 1] = string.sub(s, i, j - 1)
    i = j + #sep
  end
end

-- trim(s): s without blanks at either end. (A byte loop: the sandbox
-- bounds pattern calls by their worst case, and "%s+$" is quadratic.)
local function trim(s)
  local i, j = 1, #s
  local function blank(b) return b == 32 or (b >= 9 and b <= 13) end
  while i <= j and blank(string.byte(s, i)) do i = i + 1 end
  while j >= i and blank(string.byte(s, j)) do j = j - 1 end
  return string.sub(s, i, j)
end
M.trim = trim

-- cookie(h, name): the value of cookie name in the request, or nil.
function M.cookie(h, name)
  local all = h:request_headers():get_all("cookie")
  for _, line in ipairs(all) do
    for _, pair in ipairs(M.split(line, ";")) do
      local eq = string.find(pair, "=", 1, true)
      if eq and trim(string.sub(pair, 1, eq - 1)) == name then
        return trim(string.sub(pair, eq + 1))
      end
    end
  end
  return nil
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local DEC = {}
for i = 1, #B64 do DEC[string.byte(B64, i)] = i - 1 end
DEC[string.byte("-")] = 62
DEC[string.byte("_")] = 63

-- b64decode(s): standard or URL-safe base64, padding optional; nil on
-- a character outside the alphabet.
function M.b64decode(s)
  s = string.gsub(s, "=+$", "")
  local out, bits, n = {}, 0, 0
  for i = 1, #s do
    local v = DEC[string.byte(s, i)]
    if v == nil then return nil end
    bits = (bits << 6) | v
    n = n + 6
    if n >= 8 then
      n = n - 8
      out[#out + 1] = string.char((bits >> n) & 0xff)
    end
  end
  return table.concat(out)
end

-- json_decode(s): a JSON value as Lua (objects and arrays as tables,
-- null as nil); nil, message on malformed text.
function M.json_decode(s)
  local pos = 1
  local value
  local function ws()
    pos = string.find(s, "[^ \t\r\n]", pos) or #s + 1
  end
  local function fail(what)
    error({json = what .. " at byte " .. pos}, 0)
  end
  local function str()
    local out = {}
    pos = pos + 1
    while true do
      local c = string.sub(s, pos, pos)
      if c == "" then fail("unterminated string") end
      if c == '"' then pos = pos + 1 return table.concat(out) end
      if c == "\\" then
        local e = string.sub(s, pos + 1, pos + 1)
        local map = {b = "\b", f = "\f", n = "\n", r = "\r", t = "\t"}
        if e == "u" then
          local hex = string.sub(s, pos + 2, pos + 5)
          local cp = tonumber(hex, 16) or fail("bad \\u escape")
          out[#out + 1] = utf8.char(cp)
          pos = pos + 6
        else
          out[#out + 1] = map[e] or e
          pos = pos + 2
        end
      else
        out[#out + 1] = c
        pos = pos + 1
      end
    end
  end
  function value()
    ws()
    local c = string.sub(s, pos, pos)
    if c == "{" then
      local t = {}
      pos = pos + 1
      ws()
      if string.sub(s, pos, pos) == "}" then pos = pos + 1 return t end
      while true do
        ws()
        if string.sub(s, pos, pos) ~= '"' then fail("expected a key") end
        local k = str()
        ws()
        if string.sub(s, pos, pos) ~= ":" then fail("expected ':'") end
        pos = pos + 1
        t[k] = value()
        ws()
        local d = string.sub(s, pos, pos)
        pos = pos + 1
        if d == "}" then return t end
        if d ~= "," then fail("expected ',' or '}'") end
      end
    elseif c == "[" then
      local t = {}
      pos = pos + 1
      ws()
      if string.sub(s, pos, pos) == "]" then pos = pos + 1 return t end
      while true do
        t[#t + 1] = value()
        ws()
        local d = string.sub(s, pos, pos)
        pos = pos + 1
        if d == "]" then return t end
        if d ~= "," then fail("expected ',' or ']'") end
      end
    elseif c == '"' then
      return str()
    elseif string.sub(s, pos, pos + 3) == "true" then
      pos = pos + 4 return true
    elseif string.sub(s, pos, pos + 4) == "false" then
      pos = pos + 5 return false
    elseif string.sub(s, pos, pos + 3) == "null" then
      pos = pos + 4 return nil
    else
      local num = string.match(s, "^[-+%d%.eE]+", pos)
      if num == nil then fail("unexpected character") end
      pos = pos + #num
      return tonumber(num) or fail("bad number")
    end
  end
  local ok, v = pcall(value)
  if not ok then
    if type(v) == "table" then return nil, v.json end
    error(v, 0)
  end
  ws()
  if pos <= #s then return nil, "trailing text at byte " .. pos end
  return v
end

return M
