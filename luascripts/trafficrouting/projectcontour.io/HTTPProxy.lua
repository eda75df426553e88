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
-- separate routes): a copy of the route whose conditions are (the route's)
-- AND (the step match's), and whose only service is the canary. Two
-- conditions on the same path, header or query parameter are merged into
-- one: a pair no request satisfies leaves no canary route for that match,
-- a pair one condition cannot express (a prefix and a regular expression)
-- fails the step with an error naming the route and the match.
--
-- requestHeaderModifier becomes the canary service's requestHeadersPolicy;
-- Contour has no "add", so added headers are set. A separate canary
-- Service is required.

local spec = obj.data.spec or rollgate.object()
local stable, canary = obj.stableService, obj.canaryService

local function headersPolicy(policy)
  local mod = obj.requestHeaderModifier
  if mod == nil then return policy end
  policy = policy or rollgate.object()
  local set = policy.set or rollgate.array()
  for _, kind in ipairs({ "set", "add" }) do
    for _, h in ipairs(mod[kind] or {}) do
      table.insert(set, rollgate.object({ name = h.name, value = h.value }))
    end
  end
  if #set > 0 then policy.set = set end
  if #(mod.remove or {}) > 0 then
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

local condTypes = { Exact = "Exact", PathPrefix = "Prefix", Prefix = "Prefix", RegularExpression = "RegularExpression" }
local contourKeys = { Exact = "exact", Prefix = "prefix", RegularExpression = "regex" }

-- stepCond is a step condition as rollgate.intersect takes it.
local function stepCond(kind, typ, value)
  local t = condTypes[typ]
  if t == nil or (kind ~= "path" and t == "Prefix") then
    error(string.format("HTTPProxy cannot match a %s with type %s", kind, tostring(typ)), 0)
  end
  return { type = t, value = value }
end

-- contourCond reads the positive string condition of a Contour path,
-- header or queryParameter condition, or returns nil for other kinds
-- (contains, notexact, ...). present matches any value.
local function contourCond(c)
  if c.exact ~= nil then
    return { type = "Exact", value = c.exact, ignoreCase = c.ignoreCase == true }
  elseif c.prefix ~= nil then
    return { type = "Prefix", value = c.prefix, ignoreCase = c.ignoreCase == true }
  elseif c.regex ~= nil then
    return { type = "RegularExpression", value = c.regex }
  elseif c.present == true then
    return { type = "Prefix", value = "" }
  end
  return nil
end

local function isPath(c)
  return c.prefix ~= nil or c.exact ~= nil or c.regex ~= nil
end

-- both returns (a AND b), false when nothing satisfies both, and fails the
-- step when one Contour condition cannot say it.
local function both(a, b, what, where)
  local c, msg = rollgate.intersect(a, b)
  if c == nil then
    error(string.format("HTTPProxy %s: %s: %s, and a route holds one such condition: "
      .. "no canary route can send exactly (route conditions) AND (step match) to the canary", where, what, msg), 0)
  end
  return c
end

-- andNamed ANDs one step condition on a header or query parameter into
-- conditions; it returns false when no request can match.
local function andNamed(conditions, kind, h, where)
  local s = stepCond(kind, h.type, h.value)
  local same = function(name)
    if kind == "header" then
      return tostring(name):lower() == h.name:lower()
    end
    return name == h.name
  end
  for i = #conditions, 1, -1 do
    local c = conditions[i][kind]
    if c ~= nil and same(c.name) then
      local pos = contourCond(c)
      if pos ~= nil then
        s = both(pos, s, kind .. " " .. h.name, where)
        if not s then
          return false
        end
        table.remove(conditions, i)
      elseif c.notpresent == true then
        return false
      end
    end
  end
  -- Negative conditions stay; one that excludes every value the step
  -- accepts leaves nothing.
  for _, cond in ipairs(conditions) do
    local c = cond[kind]
    if c ~= nil and same(c.name) and c.notexact ~= nil and s.type == "Exact" and s.value == c.notexact then
      return false
    end
  end
  local c = rollgate.object({ name = h.name })
  c[contourKeys[s.type]] = s.value
  if s.ignoreCase then
    c.ignoreCase = true
  end
  local out = rollgate.object()
  out[kind] = c
  table.insert(conditions, out)
  return true
end

-- canaryRoute copies route for one step match, or returns nil when the
-- route and the match cannot both hold.
local function canaryRoute(route, service, m, where)
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
    local s = stepCond("path", m.path.type, m.path.value)
    if routePath ~= nil then
      s = both(contourCond(routePath), s, "path", where)
      if not s then
        return nil
      end
    end
    local path = rollgate.object()
    path[contourKeys[s.type]] = s.value
    table.insert(conditions, path)
  end
  for _, h in ipairs(m.headers or {}) do
    if not andNamed(conditions, "header", h, where) then
      return nil
    end
  end
  for _, q in ipairs(m.queryParams or {}) do
    if not andNamed(conditions, "queryParameter", q, where) then
      return nil
    end
  end
  r.conditions = conditions
  local c = canaryService(service, true)
  c.weight = nil
  r.services = rollgate.array({ c })
  return r
end

local w = obj.canaryWeight
if (w > 0 or (w == -1 and obj.matches ~= nil)) and stable == canary then
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
elseif w == -1 and obj.matches ~= nil and spec.routes ~= nil then
  local out = rollgate.array()
  for j, route in ipairs(spec.routes) do
    local service = stableService(route)
    if service then
      for i, m in ipairs(obj.matches or {}) do
        local r = canaryRoute(route, service, m, string.format("routes[%d], step match %d", j - 1, i))
        if r ~= nil then table.insert(out, r) end
      end
    end
    table.insert(out, route)
  end
  spec.routes = out
end
return { spec = spec }
