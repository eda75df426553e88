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

local out = rollgate.withoutKeys(obj.annotations, prefix, owned)
out[prefix .. "canary"] = "true"

local conditions = rollgate.stepConditions(obj.matches, {
  name = "ingress-nginx",
  path = "path matches cannot be expressed with canary annotations",
  query = "ingress-nginx cannot match query parameters",
  count = "ingress-nginx supports exactly one condition per match",
})
local header, cookie = rollgate.headerAndCookie(conditions, "ingress-nginx")
if header ~= nil then
  rollgate.canaryBy(out, prefix, "header", header.name, header, "ingress-nginx")
end
out[prefix .. "canary-by-cookie"] = cookie
out[prefix .. "canary-weight"] = rollgate.canaryWeight(obj)
return out
