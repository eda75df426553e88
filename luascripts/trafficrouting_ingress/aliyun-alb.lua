-- rollgate built-in: Alibaba Cloud ALB Ingress canary annotations (class
-- type aliyun-alb).
--
-- Returns the input annotations without any alb.ingress.kubernetes.io/
-- canary* key, plus:
--   canary: "true"
--   canary-weight: the step's traffic ("0" with neither traffic nor
--     matches); never set together with header or cookie rules, which ALB
--     does not allow on one Ingress
--   canary-by-header with canary-by-header-value (Exact only: ALB has no
--     header pattern)
--   canary-by-cookie: NAME for a Cookie match on NAME=always (ALB cookie
--     rules only know the values always and never)
--   order: one less than the user's Ingress order (default 10), so ALB
--     evaluates the canary rules before the ones they shadow
--
-- ALB checks the header, then the cookie, then the weight: a step may hold
-- one header condition and one cookie condition, each in its own match.
-- Anything else fails with an error. requestHeaderModifier is ignored.

local prefix = "alb.ingress.kubernetes.io/"
local owned = { "canary", "canary-weight", "canary-by-header", "canary-by-header-value", "canary-by-cookie" }

local out = {}
for k, v in pairs(obj.annotations or {}) do
  out[k] = v
end
for _, k in ipairs(owned) do
  out[prefix .. k] = nil
end
out[prefix .. "canary"] = "true"

local order = tonumber((obj.annotations or {})[prefix .. "order"] or "10") or 10
out[prefix .. "order"] = tostring(math.max(1, order - 1))

local function fail(i, msg)
  error(string.format("aliyun-alb: step match %d: %s", i, msg), 0)
end

local prefixes = { "^(.*;\\s*)?", "^(.*; )?", "^(.*;)?", "(^|;\\s*)", "^", ".*" }
local suffixes = { "(;.*)?$", "(;|$)", "$", ".*" }

local function strip(s, list, atEnd)
  for _, p in ipairs(list) do
    if atEnd and #s > #p and s:sub(-#p) == p then
      return s:sub(1, #s - #p)
    elseif not atEnd and s:sub(1, #p) == p then
      return s:sub(#p + 1)
    end
  end
  return s
end

local function cookiePair(h)
  if h.name:lower() ~= "cookie" or h.type ~= "RegularExpression" then
    return nil
  end
  local body = strip(strip(h.value, prefixes, false), suffixes, true)
  return body:match("^([%w_%-]+)=([%w_%-%.]+)$")
end

local header, cookie
for i, m in ipairs(obj.matches or {}) do
  if m.path ~= nil or #(m.queryParams or {}) > 0 then
    fail(i, "ALB canary annotations match only headers and cookies")
  end
  if #(m.headers or {}) ~= 1 then
    fail(i, "ALB supports exactly one condition per match")
  end
  local h = (m.headers or {})[1]
  local name, value = cookiePair(h)
  if name ~= nil then
    if value ~= "always" then
      fail(i, "ALB cookie rules match only the value always (use NAME=always)")
    end
    if cookie ~= nil then
      fail(i, "ALB supports one cookie condition per step")
    end
    cookie = name
  elseif h.type ~= "Exact" then
    fail(i, "ALB matches header values exactly; " .. tostring(h.type) .. " is not supported")
  elseif header == nil then
    header = h
  else
    fail(i, "ALB supports one header condition per step")
  end
end

if header ~= nil then
  out[prefix .. "canary-by-header"] = header.name
  out[prefix .. "canary-by-header-value"] = header.value
end
if cookie ~= nil then
  out[prefix .. "canary-by-cookie"] = cookie
end
if tonumber(obj.weight) >= 0 then
  out[prefix .. "canary-weight"] = obj.weight
elseif obj.matches == nil then
  out[prefix .. "canary-weight"] = "0"
end
return out
