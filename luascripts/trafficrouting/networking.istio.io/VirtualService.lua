-- rollgate built-in: Istio VirtualService (networking.istio.io).
--
-- Weight steps: in every http, tls and tcp route, a destination whose host
-- is the stable Service (short name or "<service>.<namespace>..." form) is
-- split into the stable destination and a canary one with the same port.
-- Weights of a route always add up to what the stable destination had.
--
-- Match steps: before every http route that sends traffic to the stable
-- Service, a canary route is inserted: a copy of that route whose match
-- list is (each original match) AND (each step match), ORed, and whose only
-- destination is the canary. tls and tcp routes are left alone.
--
-- requestHeaderModifier becomes headers.request of the canary destination.
-- When the canary Service equals the stable one, destinations use the
-- subsets "stable" and "canary" (see the DestinationRule script).

local spec = obj.data.spec
local stable, canary = obj.stableService, obj.canaryService
local useSubsets = stable == canary

-- hostSuffix returns what follows the Service name in host ("" for the
-- short form), or nil when host is not the stable Service.
local function hostSuffix(host)
  if type(host) ~= "string" then
    return nil
  end
  if host == stable then
    return ""
  end
  if host:sub(1, #stable + 1) == stable .. "." then
    return host:sub(#stable + 1)
  end
  return nil
end

local function isStable(dest)
  return dest ~= nil and dest.destination ~= nil and hostSuffix(dest.destination.host) ~= nil
end

local function toMap(pairsList)
  local m = rollgate.object()
  for _, p in ipairs(pairsList) do
    m[p.name] = p.value
  end
  return m
end

-- withHeaders adds the step's requestHeaderModifier to a route destination.
local function withHeaders(dest)
  local mod = obj.requestHeaderModifier
  if mod == nil then
    return dest
  end
  dest.headers = dest.headers or rollgate.object()
  local req = dest.headers.request or rollgate.object()
  dest.headers.request = req
  if #mod.set > 0 then
    req.set = req.set or rollgate.object()
    for k, v in pairs(toMap(mod.set)) do req.set[k] = v end
  end
  if #mod.add > 0 then
    req.add = req.add or rollgate.object()
    for k, v in pairs(toMap(mod.add)) do req.add[k] = v end
  end
  if #mod.remove > 0 then
    req.remove = req.remove or rollgate.array()
    for _, name in ipairs(mod.remove) do table.insert(req.remove, name) end
  end
  return dest
end

-- canaryDestination copies a stable route destination and points it at the
-- canary; only http destinations carry header operations.
local function canaryDestination(routeDest, http)
  local c = rollgate.copy(routeDest)
  if useSubsets then
    c.destination.subset = "canary"
  else
    c.destination.host = canary .. hostSuffix(routeDest.destination.host)
    c.destination.subset = nil
  end
  if http then
    withHeaders(c)
  end
  return c
end

-- splitRoute returns the destinations of one route with every stable
-- destination split by weight w (1-100).
local function splitRoute(dests, w, http)
  local out = rollgate.array()
  for _, d in ipairs(dests) do
    if not isStable(d) then
      table.insert(out, d)
    else
      local total = d.weight or (#dests == 1 and 100 or 0)
      local cw = math.floor(total * w / 100 + 0.5)
      local s = rollgate.copy(d)
      s.weight = total - cw
      if useSubsets and s.destination.subset == nil then
        s.destination.subset = "stable"
      end
      local c = canaryDestination(d, http)
      c.weight = cw
      table.insert(out, s)
      table.insert(out, c)
    end
  end
  return out
end

local function applyWeight(w)
  for _, section in ipairs({ "http", "tls", "tcp" }) do
    for _, route in ipairs(spec[section] or {}) do
      if route.route ~= nil then
        route.route = splitRoute(route.route, w, section == "http")
      end
    end
  end
end

local function stringMatch(typ, value)
  if typ == "Exact" then
    return rollgate.object({ exact = value })
  elseif typ == "PathPrefix" then
    return rollgate.object({ prefix = value })
  elseif typ == "RegularExpression" then
    return rollgate.object({ regex = value })
  end
  error("unsupported match type " .. tostring(typ), 0)
end

local function startsWith(s, p)
  return s:sub(1, #p) == p
end

-- intersectURI returns the uri condition of (base AND step), or false when
-- no request can match both. A regular expression on either side cannot be
-- reasoned about: the step's condition is used.
local function intersectURI(base, step)
  if base == nil then
    return step
  end
  if base.regex ~= nil or step.regex ~= nil then
    return step
  end
  local b, s = base.prefix or base.exact, step.prefix or step.exact
  if b == s then
    return base.exact ~= nil and base or step
  end
  if startsWith(s, b) and base.prefix ~= nil then
    return step
  end
  if startsWith(b, s) and step.prefix ~= nil then
    return base
  end
  return false
end

-- combine ANDs one step match into a copy of an Istio match request, or
-- returns nil when the two cannot both hold.
local function combine(base, m)
  local out = rollgate.copy(base)
  if m.path ~= nil then
    local uri = intersectURI(base.uri, stringMatch(m.path.type, m.path.value))
    if not uri then
      return nil
    end
    out.uri = uri
  end
  if #m.headers > 0 then
    out.headers = out.headers or rollgate.object()
    for _, h in ipairs(m.headers) do
      out.headers[h.name:lower()] = stringMatch(h.type, h.value)
    end
  end
  if #m.queryParams > 0 then
    out.queryParams = out.queryParams or rollgate.object()
    for _, q in ipairs(m.queryParams) do
      out.queryParams[q.name] = stringMatch(q.type, q.value)
    end
  end
  return out
end

local function canaryRoute(route)
  local r = rollgate.copy(route)
  if route.name ~= nil then
    r.name = route.name .. "-canary"
  end
  local bases = route.match or {}
  if #bases == 0 then
    bases = { rollgate.object() }
  end
  r.match = rollgate.array()
  for _, base in ipairs(bases) do
    for _, m in ipairs(obj.matches) do
      local c = combine(base, m)
      if c ~= nil then
        table.insert(r.match, c)
      end
    end
  end
  if #r.match == 0 then
    return nil -- no request can match both the route and the step
  end
  r.route = rollgate.array()
  for _, d in ipairs(route.route) do
    if isStable(d) then
      local c = canaryDestination(d, true)
      c.weight = nil
      table.insert(r.route, c)
      break
    end
  end
  return r
end

local function applyMatches()
  local out = rollgate.array()
  for _, route in ipairs(spec.http or {}) do
    local toStable = false
    for _, d in ipairs(route.route or {}) do
      toStable = toStable or isStable(d)
    end
    local c = toStable and canaryRoute(route)
    if c then
      table.insert(out, c)
    end
    table.insert(out, route)
  end
  if spec.http ~= nil then
    spec.http = out
  end
end

if obj.canaryWeight > 0 then
  applyWeight(obj.canaryWeight)
elseif obj.canaryWeight == -1 and #obj.matches > 0 then
  applyMatches()
end
return { spec = spec }
