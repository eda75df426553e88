-- A user's VirtualService script in Kruise Rollout's style: it tests
-- obj.matches for nil, compares weights with the -1 sentinel and records
-- the step it applied with json.encode.
local spec = obj.data.spec

local function canaryDestination()
  if obj.stableService == obj.canaryService then
    return { host = obj.stableService, subset = "canary" }
  end
  return { host = obj.canaryService }
end

local function toStable(rule)
  for _, r in ipairs(rule.route or {}) do
    if r.destination.host == obj.stableService then
      return true
    end
  end
  return false
end

if obj.matches then
  -- A/B testing: one route per match, in front of the others.
  for _, match in ipairs(obj.matches) do
    local vsMatch = {}
    if match.path then
      local kind = match.path.type == "Exact" and "exact" or (match.path.type == "RegularExpression" and "regex" or "prefix")
      vsMatch.uri = { [kind] = match.path.value }
    end
    if match.headers then
      vsMatch.headers = {}
      for _, h in ipairs(match.headers) do
        local kind = h.type == "RegularExpression" and "regex" or "exact"
        vsMatch.headers[string.lower(h.name)] = { [kind] = h.value }
      end
    end
    if match.queryParams then
      vsMatch.queryParams = {}
      for _, q in ipairs(match.queryParams) do
        vsMatch.queryParams[q.name] = { exact = q.value }
      end
    end
    local route = { match = { vsMatch }, route = { { destination = canaryDestination() } } }
    if obj.requestHeaderModifier and obj.requestHeaderModifier.set then
      route.headers = { request = { set = {} } }
      for _, h in ipairs(obj.requestHeaderModifier.set) do
        route.headers.request.set[h.name] = h.value
      end
    end
    table.insert(spec.http, 1, route)
  end
elseif obj.canaryWeight ~= -1 then
  for _, rule in ipairs(spec.http) do
    if rule.match == nil and toStable(rule) then
      rule.route[1].weight = obj.stableWeight
      table.insert(rule.route, { destination = canaryDestination(), weight = obj.canaryWeight })
    end
  end
end

local annotations = obj.data.annotations or {}
annotations["example.com/rollout-step"] = json.encode({
  canaryWeight = obj.canaryWeight,
  stableWeight = obj.stableWeight,
  matches = obj.matches,
})
local decoded = json.decode(annotations["example.com/rollout-step"])
assert(decoded.canaryWeight == obj.canaryWeight, "json round trip")
return { spec = spec, annotations = annotations }
