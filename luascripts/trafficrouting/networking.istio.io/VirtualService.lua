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
-- destination is the canary. tls and tcp routes are left alone. Two
-- conditions on the same field (uri, one header, one query parameter) are
-- merged into one; a pair that no request can satisfy is dropped (no
-- canary route when none is left), and a pair one Istio match cannot
-- express (a prefix and a regular expression on the uri, two different
-- regular expressions) fails the step with an error naming the route and
-- the matches, rather than widening either condition.
--
-- requestHeaderModifier becomes headers.request of the canary destination.
-- When the canary Service equals the stable one, destinations use the
-- subsets "stable" and "canary" (see the DestinationRule script).

local spec = obj.data.spec or rollgate.object()
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
  if #(mod.set or {}) > 0 then
    req.set = req.set or rollgate.object()
    for k, v in pairs(toMap(mod.set)) do req.set[k] = v end
  end
  if #(mod.add or {}) > 0 then
    req.add = req.add or rollgate.object()
    for k, v in pairs(toMap(mod.add)) do req.add[k] = v end
  end
  if #(mod.remove or {}) > 0 then
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
      -- The canary copies d before d, which only this route holds,
      -- becomes the stable destination.
      local c = canaryDestination(d, http)
      c.weight = cw
      local s = d
      s.weight = total - cw
      if useSubsets and s.destination.subset == nil then
        s.destination.subset = "stable"
      end
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

-- Conditions are {type, value, ignoreCase} tables as rollgate.intersect
-- and rollgate.covers take them (Exact, Prefix, RegularExpression; regular
-- expressions match the whole string, as in Envoy).
local condTypes = { Exact = "Exact", PathPrefix = "Prefix", Prefix = "Prefix", RegularExpression = "RegularExpression" }

local function stepCond(typ, value)
  local t = condTypes[typ]
  if t == nil then
    error("unsupported match type " .. tostring(typ), 0)
  end
  return { type = t, value = value }
end

-- istioCond reads an Istio StringMatch; an empty one ({}) matches any
-- value of a header that is present.
local function istioCond(sm, ignoreCase)
  if sm.exact ~= nil then
    return { type = "Exact", value = sm.exact, ignoreCase = ignoreCase }
  elseif sm.prefix ~= nil then
    return { type = "Prefix", value = sm.prefix, ignoreCase = ignoreCase }
  elseif sm.regex ~= nil then
    return { type = "RegularExpression", value = sm.regex }
  end
  return { type = "Prefix", value = "" }
end

local function toIstio(c)
  if c.type == "Exact" then
    return rollgate.object({ exact = c.value })
  elseif c.type == "Prefix" then
    return rollgate.object({ prefix = c.value })
  end
  return rollgate.object({ regex = c.value })
end

-- both returns the condition (a AND b), false when no request satisfies
-- both, and fails the step when one Istio match cannot say it.
local function both(a, b, what, where)
  local c, msg = rollgate.intersect(a, b)
  if c == nil then
    error(string.format("VirtualService %s: %s: %s, and an Istio match holds one condition per %s: "
      .. "no canary route can send exactly (route match) AND (step match) to the canary", where, what, msg, what), 0)
  end
  return c
end

-- findKey returns the key of m equal to name regardless of case.
local function findKey(m, name)
  for k in pairs(m or {}) do
    if k:lower() == name:lower() then
      return k
    end
  end
  return nil
end

-- andStrings ANDs the step's conditions on named strings (headers or
-- query parameters) into the match request map ms; it returns false when
-- no request can match.
local function andStrings(ms, conds, what, where)
  for _, h in ipairs(conds or {}) do
    local name = what == "header" and h.name:lower() or h.name
    local s = stepCond(h.type, h.value)
    local key = what == "header" and findKey(ms, name) or (ms[name] ~= nil and name or nil)
    if key ~= nil then
      s = both(istioCond(ms[key]), s, what .. " " .. h.name, where)
      if not s then
        return false
      end
      ms[key] = nil
    end
    ms[name] = toIstio(s)
  end
  return true
end

-- combine ANDs one step match into a copy of an Istio match request, or
-- returns nil when the two cannot both hold.
local function combine(base, m, where)
  local out = rollgate.copy(base)
  if m.path ~= nil then
    local s = stepCond(m.path.type, m.path.value)
    if base.uri ~= nil then
      s = both(istioCond(base.uri, base.ignoreUriCase == true), s, "uri", where)
      if not s then
        return nil
      end
    end
    out.uri = toIstio(s)
    out.ignoreUriCase = s.ignoreCase or nil
  end
  if m.headers ~= nil then
    out.headers = out.headers or rollgate.object()
    if not andStrings(out.headers, m.headers, "header", where) then
      return nil
    end
    -- A step header the route excludes (withoutHeaders) never matches.
    for _, h in ipairs(m.headers) do
      local key = findKey(out.withoutHeaders, h.name)
      if key ~= nil and rollgate.covers(istioCond(out.withoutHeaders[key]), istioCond(out.headers[h.name:lower()])) then
        return nil
      end
    end
  end
  if m.queryParams ~= nil then
    out.queryParams = out.queryParams or rollgate.object()
    if not andStrings(out.queryParams, m.queryParams, "queryParam", where) then
      return nil
    end
  end
  return out
end

local function canaryRoute(route, index)
  local r = rollgate.copy(route)
  if route.name ~= nil then
    r.name = route.name .. "-canary"
  end
  local label = route.name ~= nil and string.format("http route %q", route.name) or string.format("http[%d]", index - 1)
  local bases = route.match or {}
  if #bases == 0 then
    bases = { rollgate.object() }
  end
  r.match = rollgate.array()
  for j, base in ipairs(bases) do
    for i, m in ipairs(obj.matches) do
      local where = string.format("%s, match %d, step match %d", label, j, i)
      local c = combine(base, m, where)
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
  for i, route in ipairs(spec.http or {}) do
    local toStable = false
    for _, d in ipairs(route.route or {}) do
      toStable = toStable or isStable(d)
    end
    local c = toStable and canaryRoute(route, i)
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
elseif obj.canaryWeight == -1 and obj.matches ~= nil then
  applyMatches()
end
return { spec = spec }
