-- rollgate built-in: Alibaba Cloud MSE Ingress canary annotations (class
-- type mse).
--
-- MSE reads the ingress-nginx annotations under the mse.ingress.kubernetes.io/
-- prefix too, and its own (query, cookie value, header control) only there,
-- so every key is written with that prefix. Returns the input annotations
-- without any canary* key (under mse. or nginx. prefixes), plus:
--   canary: "true"
--   canary-weight: the step's traffic ("0" with neither traffic nor matches)
--   canary-by-header with canary-by-header-value (Exact) or
--     canary-by-header-pattern (RegularExpression), lower-cased name
--   canary-by-query with canary-by-query-value or canary-by-query-pattern
--   canary-by-cookie: NAME, plus canary-by-cookie-value: VALUE unless VALUE
--     is "always" (MSE gateway 1.2.30 or later)
--   request-header-control-update / -add / -remove from
--     requestHeaderModifier (canary traffic only)
--
-- MSE checks header or query first, then cookie, then weight: a step may
-- hold one header or one query condition, and one cookie condition, each in
-- its own match (ORed). Header and query together, paths, and matches with
-- several conditions fail with an error. Cookie convention as for nginx.

local prefix = "mse.ingress.kubernetes.io/"
local owned = { "canary", "canary-weight", "canary-weight-total", "canary-by-header",
  "canary-by-header-value", "canary-by-header-pattern", "canary-by-cookie",
  "canary-by-cookie-value", "canary-by-query", "canary-by-query-value", "canary-by-query-pattern" }

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
  error(string.format("mse: step match %d: %s", i, msg), 0)
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

-- setMatch writes canary-by-<kind> and its -value or -pattern key.
local function setMatch(kind, name, typ, value)
  out[prefix .. "canary-by-" .. kind] = name
  if typ == "Exact" then
    out[prefix .. "canary-by-" .. kind .. "-value"] = value
  elseif typ == "RegularExpression" then
    out[prefix .. "canary-by-" .. kind .. "-pattern"] = value
  else
    error(string.format("mse cannot match a %s with type %s", kind, tostring(typ)), 0)
  end
end

local header, query, cookieName, cookieValue
for i, m in ipairs(obj.matches or {}) do
  if m.path ~= nil then
    fail(i, "path matches cannot be expressed with canary annotations")
  end
  if #(m.headers or {}) + #(m.queryParams or {}) ~= 1 then
    fail(i, "mse supports exactly one condition per match")
  end
  local h, q = (m.headers or {})[1], (m.queryParams or {})[1]
  local name, value
  if h ~= nil then
    name, value = cookiePair(h)
  end
  if name ~= nil and cookieName == nil then
    cookieName, cookieValue = name, value
  elseif h ~= nil and header == nil and query == nil then
    header = h
  elseif q ~= nil and query == nil and header == nil then
    query = q
  else
    fail(i, "mse supports one header or query parameter condition and one cookie condition per step")
  end
end

if header ~= nil then
  setMatch("header", header.name:lower(), header.type, header.value)
end
if query ~= nil then
  setMatch("query", query.name, query.type, query.value)
end
if cookieName ~= nil then
  out[prefix .. "canary-by-cookie"] = cookieName
  if cookieValue ~= "always" then
    out[prefix .. "canary-by-cookie-value"] = cookieValue
  end
end
if tonumber(obj.weight) >= 0 then
  out[prefix .. "canary-weight"] = obj.weight
elseif obj.matches == nil then
  out[prefix .. "canary-weight"] = "0"
end

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
