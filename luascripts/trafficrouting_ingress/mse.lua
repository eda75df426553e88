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

local out = rollgate.withoutKeys(obj.annotations, { prefix, "nginx.ingress.kubernetes.io/" }, owned)
out[prefix .. "canary"] = "true"

-- Header or query first, then cookie (any value: MSE has cookie values).
local header, query, cookieName, cookieValue
for c in rollgate.stepConditions(obj.matches, {
  name = "mse",
  path = "path matches cannot be expressed with canary annotations",
  count = "mse supports exactly one condition per match",
}) do
  if c.cookie ~= nil and cookieName == nil then
    cookieName, cookieValue = c.cookie, c.cookieValue
  elseif c.header ~= nil and header == nil and query == nil then
    header = c.header
  elseif c.query ~= nil and query == nil and header == nil then
    query = c.query
  else
    error(string.format("mse: step match %d: %s", c.index,
      "mse supports one header or query parameter condition and one cookie condition per step"), 0)
  end
end

if header ~= nil then
  rollgate.canaryBy(out, prefix, "header", header.name:lower(), header, "mse")
end
if query ~= nil then
  rollgate.canaryBy(out, prefix, "query", query.name, query, "mse")
end
if cookieName ~= nil then
  out[prefix .. "canary-by-cookie"] = cookieName
  if cookieValue ~= "always" then
    out[prefix .. "canary-by-cookie-value"] = cookieValue
  end
end
out[prefix .. "canary-weight"] = rollgate.canaryWeight(obj)
rollgate.headerControl(out, prefix, obj.requestHeaderModifier)
return out
