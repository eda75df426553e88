-- rollgate built-in: Higress canary annotations (class type higress).
--
-- Higress accepts the ingress-nginx canary annotations under its own
-- prefix higress.io/, which this script writes. Returns the input
-- annotations without any canary* key (under higress.io/ or
-- nginx.ingress.kubernetes.io/), plus:
--   canary: "true"
--   canary-weight: the step's traffic ("0" when the step has neither
--     traffic nor matches)
--   canary-by-header with canary-by-header-value (Exact) or
--     canary-by-header-pattern (RegularExpression); header names are
--     lower-cased, as Envoy compares them
--   canary-by-cookie: NAME for a Cookie match on NAME=always
--   request-header-control-update / -add / -remove from
--     requestHeaderModifier (applies to canary traffic only)
--
-- Higress checks the header, then the cookie, then the weight: a step may
-- hold one header condition and one cookie condition, each in its own
-- match. Paths, query parameters and matches with several conditions fail
-- with an error. Cookie convention as for nginx: a header match named
-- Cookie, RegularExpression "^(.*;\s*)?NAME=VALUE(;.*)?$" or "NAME=VALUE".

local prefix = "higress.io/"
local owned = { "canary", "canary-weight", "canary-weight-total", "canary-by-header",
  "canary-by-header-value", "canary-by-header-pattern", "canary-by-cookie" }

local out = {}
for k, v in pairs(obj.annotations or {}) do
  out[k] = v
end
for _, k in ipairs(owned) do
  out[prefix .. k] = nil
  out["nginx.ingress.kubernetes.io/" .. k] = nil
end
out[prefix .. "canary"] = "true"

local function fail(i, msg)
  error(string.format("higress: step match %d: %s", i, msg), 0)
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
  if m.path ~= nil then
    fail(i, "path matches cannot be expressed with canary annotations")
  end
  if #(m.queryParams or {}) > 0 then
    fail(i, "higress canary annotations cannot match query parameters")
  end
  if #(m.headers or {}) ~= 1 then
    fail(i, "higress supports exactly one condition per match")
  end
  local h = (m.headers or {})[1]
  local name, value = cookiePair(h)
  if name ~= nil and value == "always" and cookie == nil then
    cookie = name
  elseif header == nil then
    header = h
  else
    fail(i, "higress supports at most one header condition and one cookie condition per step")
  end
end

if header ~= nil then
  out[prefix .. "canary-by-header"] = header.name:lower()
  if header.type == "Exact" then
    out[prefix .. "canary-by-header-value"] = header.value
  elseif header.type == "RegularExpression" then
    out[prefix .. "canary-by-header-pattern"] = header.value
  else
    error("higress cannot match a header with type " .. tostring(header.type), 0)
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

-- Header control: "Name Value" lines for add and update, names joined by
-- commas for remove. Keys are written only when the step sets them, so
-- header control copied from the user's Ingress stays otherwise.
local mod = obj.requestHeaderModifier
if mod ~= nil then
  local function lines(list)
    local parts = {}
    for _, h in ipairs(list) do
      table.insert(parts, h.name .. " " .. h.value)
    end
    return table.concat(parts, "\n")
  end
  if #(mod.set or {}) > 0 then out[prefix .. "request-header-control-update"] = lines(mod.set) end
  if #(mod.add or {}) > 0 then out[prefix .. "request-header-control-add"] = lines(mod.add) end
  if #(mod.remove or {}) > 0 then out[prefix .. "request-header-control-remove"] = table.concat(mod.remove, ",") end
end
return out
