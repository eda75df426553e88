-- rollgate built-in: ingress-nginx canary annotations (class type nginx).
--
-- Returns the annotations of the canary Ingress: the input annotations
-- without any nginx.ingress.kubernetes.io/canary* key, plus:
--   canary: "true"
--   canary-weight: the step's traffic ("0" when the step has neither
--     traffic nor matches, so the canary Ingress takes no traffic)
--   canary-by-header with canary-by-header-value (Exact) or
--     canary-by-header-pattern (RegularExpression)
--   canary-by-cookie: NAME for a Cookie match on NAME=always
--
-- ingress-nginx checks the header, then the cookie, then the weight, so the
-- step's matches may hold one header condition and one cookie condition,
-- each in its own match (they are ORed). A match with more than one
-- condition, a path or a query parameter cannot be expressed: the script
-- fails with an error rather than route differently from the Rollout.
--
-- Cookie convention: a header match named Cookie of type RegularExpression
-- such as "^(.*;\s*)?NAME=VALUE(;.*)?$" (or plain "NAME=VALUE"). With VALUE
-- "always" it becomes canary-by-cookie; any other expression is matched
-- against the Cookie header with canary-by-header-pattern.
--
-- requestHeaderModifier is ignored: ingress-nginx has no canary-only
-- header control.

local prefix = "nginx.ingress.kubernetes.io/"
local owned = { "canary", "canary-weight", "canary-weight-total", "canary-by-header",
  "canary-by-header-value", "canary-by-header-pattern", "canary-by-cookie" }

local out = {}
for k, v in pairs(obj.annotations or {}) do
  out[k] = v
end
for _, k in ipairs(owned) do
  out[prefix .. k] = nil
end
out[prefix .. "canary"] = "true"

local function fail(i, msg)
  error(string.format("ingress-nginx: step match %d: %s", i, msg), 0)
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

-- cookiePair returns NAME, VALUE when h is a Cookie match in the documented
-- form, else nil.
local function cookiePair(h)
  if h.name:lower() ~= "cookie" or h.type ~= "RegularExpression" then
    return nil
  end
  local body = strip(strip(h.value, prefixes, false), suffixes, true)
  return body:match("^([%w_%-]+)=([%w_%-%.]+)$")
end

local header, cookie
for i, m in ipairs(obj.matches or {}) do
  if m.path ~= nil then
    fail(i, "path matches cannot be expressed with canary annotations")
  end
  if #(m.queryParams or {}) > 0 then
    fail(i, "ingress-nginx cannot match query parameters")
  end
  if #(m.headers or {}) ~= 1 then
    fail(i, "ingress-nginx supports exactly one condition per match")
  end
  local h = (m.headers or {})[1]
  local name, value = cookiePair(h)
  if name ~= nil and value == "always" and cookie == nil then
    cookie = name
  elseif header == nil then
    header = h
  else
    fail(i, "ingress-nginx supports at most one header condition and one cookie condition per step")
  end
end

if header ~= nil then
  out[prefix .. "canary-by-header"] = header.name
  if header.type == "Exact" then
    out[prefix .. "canary-by-header-value"] = header.value
  elseif header.type == "RegularExpression" then
    out[prefix .. "canary-by-header-pattern"] = header.value
  else
    error("ingress-nginx cannot match a header with type " .. tostring(header.type), 0)
  end
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
