-- rollgate built-in: Contour HTTPProxy (projectcontour.io/v1).
--
-- Weight steps: in every route (and spec.tcpproxy), a service entry for the
-- stable Service is split into the stable entry and a canary entry with the
-- same port and options. Other entries keep their share; their weights are
-- scaled by 100 (a route without any weight is split evenly, so every
-- entry counts as 1).
--
-- Match steps: before every route with a stable service, one canary route
-- per step match is inserted (conditions are ANDed, so ORed matches need
-- separate routes): a copy of the route whose conditions also hold the
-- step's header, queryParameter and path conditions (a step path replaces
-- the route's prefix/exact/regex condition) and whose only service is the
-- canary.
--
-- requestHeaderModifier becomes the canary service's requestHeadersPolicy;
-- Contour has no "add", so added headers are set. A separate canary
-- Service is required.

local spec = obj.data.spec
local stable, canary = obj.stableService, obj.canaryService

local function headersPolicy(policy)
  local mod = obj.requestHeaderModifier
  if mod == nil then return policy end
  policy = policy or rollgate.object()
  local set = policy.set or rollgate.array()
  for _, kind in ipairs({ "set", "add" }) do
    for _, h in ipairs(mod[kind]) do
      table.insert(set, rollgate.object({ name = h.name, value = h.value }))
    end
  end
  if #set > 0 then policy.set = set end
  if #mod.remove > 0 then
    policy.remove = policy.remove or rollgate.array()
    for _, name in ipairs(mod.remove) do table.insert(policy.remove, name) end
  end
  return policy
end

local function canaryService(s, http)
  local c = rollgate.copy(s)
  c.name = canary
  if http then
    c.requestHeadersPolicy = headersPolicy(c.requestHeadersPolicy)
  end
  return c
end

local function splitServices(services, w, http)
  local anyWeight = false
  for _, s in ipairs(services) do
    anyWeight = anyWeight or s.weight ~= nil
  end
  local alone = #services == 1
  local out = rollgate.array()
  for _, s in ipairs(services) do
    local weight = s.weight or (anyWeight and 0 or 1)
    if s.name == stable then
      local total = alone and 1 or weight
      local st, c = rollgate.copy(s), canaryService(s, http)
      st.weight, c.weight = total * (100 - w), total * w
      table.insert(out, st)
      table.insert(out, c)
    else
      local o = rollgate.copy(s)
      o.weight = weight * 100
      table.insert(out, o)
    end
  end
  return out
end

local function stableService(route)
  for _, s in ipairs(route.services or {}) do
    if s.name == stable then return s end
  end
  return nil
end

local function condition(kind, h)
  local c = rollgate.object({ name = h.name })
  if h.type == "Exact" then
    c.exact = h.value
  elseif h.type == "RegularExpression" then
    c.regex = h.value
  else
    error(string.format("HTTPProxy cannot match a %s with type %s", kind, tostring(h.type)), 0)
  end
  local out = rollgate.object()
  out[kind] = c
  return out
end

local pathKeys = { Exact = "exact", PathPrefix = "prefix", RegularExpression = "regex" }

local function startsWith(s, p)
  return s:sub(1, #p) == p
end

local function isPath(c)
  return c.prefix ~= nil or c.exact ~= nil or c.regex ~= nil
end

-- pathCondition returns the path condition of (route path AND step path),
-- or nil when no request can match both. Regular expressions cannot be
-- reasoned about: the step's path is used.
local function pathCondition(routePath, step)
  local stepCond = rollgate.object()
  stepCond[pathKeys[step.type]] = step.value
  if routePath == nil or routePath.regex ~= nil or stepCond.regex ~= nil then
    return stepCond
  end
  local b = routePath.prefix or routePath.exact
  if b == step.value then
    return routePath.exact ~= nil and rollgate.copy(routePath) or stepCond
  end
  if routePath.prefix ~= nil and startsWith(step.value, b) then
    return stepCond
  end
  if stepCond.prefix ~= nil and startsWith(b, step.value) then
    return rollgate.copy(routePath)
  end
  return nil
end

-- canaryRoute copies route for one step match, or returns nil when the
-- route and the match cannot both hold.
local function canaryRoute(route, service, m)
  local r = rollgate.copy(route)
  local conditions = rollgate.array()
  local routePath
  for _, c in ipairs(route.conditions or {}) do
    if isPath(c) and m.path ~= nil then
      routePath = c
    else
      table.insert(conditions, rollgate.copy(c))
    end
  end
  if m.path ~= nil then
    local path = pathCondition(routePath, m.path)
    if path == nil then
      return nil
    end
    table.insert(conditions, path)
  end
  for _, h in ipairs(m.headers) do
    table.insert(conditions, condition("header", h))
  end
  for _, q in ipairs(m.queryParams) do
    table.insert(conditions, condition("queryParameter", q))
  end
  r.conditions = conditions
  local c = canaryService(service, true)
  c.weight = nil
  r.services = rollgate.array({ c })
  return r
end

local w = obj.canaryWeight
if (w > 0 or (w == -1 and #obj.matches > 0)) and stable == canary then
  error("an HTTPProxy needs a canary Service different from the stable one", 0)
end
if w > 0 then
  for _, route in ipairs(spec.routes or {}) do
    if stableService(route) then
      route.services = splitServices(route.services, w, true)
    end
  end
  if spec.tcpproxy ~= nil and stableService(spec.tcpproxy) then
    spec.tcpproxy.services = splitServices(spec.tcpproxy.services, w, false)
  end
elseif w == -1 and #obj.matches > 0 and spec.routes ~= nil then
  local out = rollgate.array()
  for _, route in ipairs(spec.routes) do
    local service = stableService(route)
    if service then
      for _, m in ipairs(obj.matches) do
        local r = canaryRoute(route, service, m)
        if r ~= nil then table.insert(out, r) end
      end
    end
    table.insert(out, route)
  end
  spec.routes = out
end
return { spec = spec }
