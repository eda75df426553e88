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

local out = rollgate.withoutKeys(obj.annotations, { prefix, "nginx.ingress.kubernetes.io/" }, owned)
out[prefix .. "canary"] = "true"

local header, cookie = rollgate.headerAndCookie(rollgate.stepConditions(obj.matches, {
  name = "higress",
  path = "path matches cannot be expressed with canary annotations",
  query = "higress canary annotations cannot match query parameters",
  count = "higress supports exactly one condition per match",
}), "higress")
if header ~= nil then
  rollgate.canaryBy(out, prefix, "header", header.name:lower(), header, "higress")
end
out[prefix .. "canary-by-cookie"] = cookie
out[prefix .. "canary-weight"] = rollgate.canaryWeight(obj)

-- Header control: "Name Value" lines for add and update, names joined by
-- commas for remove. Keys are written only when the step sets them, so
-- header control copied from the user's Ingress stays otherwise.
rollgate.headerControl(out, prefix, obj.requestHeaderModifier)
return out
