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

local out = rollgate.withoutKeys(obj.annotations, prefix, owned)
out[prefix .. "canary"] = "true"

local order = tonumber((obj.annotations or {})[prefix .. "order"] or "10") or 10
out[prefix .. "order"] = tostring(math.max(1, order - 1))

local function fail(i, msg)
  error(string.format("aliyun-alb: step match %d: %s", i, msg), 0)
end

local header, cookie
for c in rollgate.stepConditions(obj.matches, {
  name = "aliyun-alb",
  path = "ALB canary annotations match only headers and cookies",
  query = "ALB canary annotations match only headers and cookies",
  count = "ALB supports exactly one condition per match",
}) do
  local h = c.header
  if c.cookie ~= nil then
    if c.cookieValue ~= "always" then
      fail(c.index, "ALB cookie rules match only the value always (use NAME=always)")
    end
    if cookie ~= nil then
      fail(c.index, "ALB supports one cookie condition per step")
    end
    cookie = c.cookie
  elseif h.type ~= "Exact" then
    fail(c.index, "ALB matches header values exactly; " .. tostring(h.type) .. " is not supported")
  elseif header == nil then
    header = h
  else
    fail(c.index, "ALB supports one header condition per step")
  end
end

if header ~= nil then
  out[prefix .. "canary-by-header"] = header.name
  out[prefix .. "canary-by-header-value"] = header.value
end
out[prefix .. "canary-by-cookie"] = cookie
out[prefix .. "canary-weight"] = rollgate.canaryWeight(obj)
return out
