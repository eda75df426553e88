-- rollgate built-in: Apache APISIX ApisixRoute (apisix.apache.org/v2).
--
-- Weight steps: in every http route, a backend whose serviceName is the
-- stable Service is split into the stable backend and a canary backend
-- with the same port. Other backends keep their share: their weights are
-- scaled by 100 (APISIX weights are relative, default 100).
--
-- Match steps: before every http route with a stable backend, one canary
-- route per step match is inserted (exprs are ANDed, so ORed matches need
-- separate routes). It copies the route, adds the step's conditions as
-- exprs (Header, Query, Path scopes; APISIX ANDs them with the route's) or
-- narrows its paths, raises the priority by one and sends everything to
-- the canary backend. A match no request can satisfy together with the
-- route (disjoint paths, two Equal exprs on one header with different
-- values) gets no canary route.
--
-- requestHeaderModifier becomes the canary route's proxy-rewrite headers;
-- APISIX plugins belong to a route, so it applies to match steps only.
-- Without a separate canary Service, backends use the subsets "stable" and
-- "canary", which an ApisixUpstream must define.

local spec = obj.data.spec or rollgate.object()
local stable, canary = obj.stableService, obj.canaryService
local useSubsets = stable == canary

local function isStable(b)
  return b ~= nil and b.serviceName == stable
end

local function canaryBackend(b)
  local c = rollgate.copy(b)
  c.serviceName = canary
  c.subset = useSubsets and "canary" or nil
  return c
end

local function splitBackends(backends, w)
  local alone = #backends == 1
  local out = rollgate.array()
  for _, b in ipairs(backends) do
    if isStable(b) then
      local total = alone and 1 or (b.weight or 100)
      local s, c = rollgate.copy(b), canaryBackend(b)
      s.weight, c.weight = total * (100 - w), total * w
      if useSubsets and s.subset == nil then
        s.subset = "stable"
      end
      table.insert(out, s)
      table.insert(out, c)
    else
      local o = rollgate.copy(b)
      o.weight = (b.weight or 100) * 100
      table.insert(out, o)
    end
  end
  return out
end

local function hasStable(route)
  for _, b in ipairs(route.backends or {}) do
    if isStable(b) then return b end
  end
  return nil
end

local ops = { Exact = "Equal", RegularExpression = "RegexMatch" }

local function expr(scope, name, typ, value)
  local op = ops[typ]
  if op == nil then
    error(string.format("ApisixRoute cannot match %s with type %s", scope, tostring(typ)), 0)
  end
  local subject = rollgate.object({ scope = scope })
  subject.name = name
  return rollgate.object({ subject = subject, op = op, value = value })
end

local function startsWith(s, p)
  return s:sub(1, #p) == p
end

-- prefixPaths is an APISIX path list for a Gateway API path prefix.
local function prefixPaths(v)
  if v:sub(-1) == "/" then
    return { v .. "*" }
  end
  return { v, v .. "/*" }
end

-- narrowPaths returns the route's paths ANDed with the step path (Exact or
-- PathPrefix); an empty list means no request can match both.
local function narrowPaths(paths, path)
  local exact = path.type == "Exact"
  local stepPaths = exact and { path.value } or prefixPaths(path.value)
  if paths == nil or #paths == 0 then
    return stepPaths
  end
  local out, seen = {}, {}
  local function add(list)
    for _, p in ipairs(list) do
      if not seen[p] then
        seen[p] = true
        table.insert(out, p)
      end
    end
  end
  for _, p in ipairs(paths) do
    local isPrefix = p:sub(-1) == "*"
    local base = isPrefix and p:sub(1, -2) or p
    if isPrefix and startsWith(path.value, base) then
      add(stepPaths)
    elseif not exact and startsWith(base, path.value) then
      add({ p })
    elseif exact and not isPrefix and base == path.value then
      add({ p })
    end
  end
  return out
end

-- addPath ANDs the step path into route r; it returns false when nothing
-- can match.
local function addPath(r, path)
  if path.type == "RegularExpression" then
    table.insert(r.match.exprs, expr("Path", nil, path.type, path.value))
    return true
  end
  local paths = narrowPaths(r.match.paths, path)
  r.match.paths = rollgate.array(paths)
  return #paths > 0
end

local function headerPlugin(r)
  local mod = obj.requestHeaderModifier
  if mod == nil then return end
  r.plugins = r.plugins or rollgate.array()
  local plugin
  for _, p in ipairs(r.plugins) do
    if p.name == "proxy-rewrite" then plugin = p end
  end
  if plugin == nil then
    plugin = rollgate.object({ name = "proxy-rewrite", enable = true, config = rollgate.object() })
    table.insert(r.plugins, plugin)
  end
  plugin.config = plugin.config or rollgate.object()
  local headers = plugin.config.headers or rollgate.object()
  plugin.config.headers = headers
  for _, kind in ipairs({ "set", "add" }) do
    if #(mod[kind] or {}) > 0 then
      headers[kind] = headers[kind] or rollgate.object()
      for _, h in ipairs(mod[kind] or {}) do headers[kind][h.name] = h.value end
    end
  end
  if #(mod.remove or {}) > 0 then
    headers.remove = headers.remove or rollgate.array()
    for _, name in ipairs(mod.remove) do table.insert(headers.remove, name) end
  end
end

-- contradicts reports two Equal exprs on the same header or query
-- parameter with different values: no request can match the route.
local function contradicts(exprs)
  local seen = {}
  for _, e in ipairs(exprs) do
    local subj = e.subject or {}
    if e.op == "Equal" and subj.name ~= nil then
      local key = tostring(subj.scope) .. ":" .. (subj.scope == "Header" and subj.name:lower() or subj.name)
      if seen[key] ~= nil and seen[key] ~= e.value then
        return true
      end
      seen[key] = e.value
    end
  end
  return false
end

local function canaryRoutes(route, backend)
  local out = {}
  for i, m in ipairs(obj.matches or {}) do
    local r = rollgate.copy(route)
    r.name = route.name .. "-canary" .. (#obj.matches > 1 and ("-" .. i) or "")
    r.priority = (route.priority or 0) + 1
    r.match = r.match or rollgate.object()
    r.match.exprs = r.match.exprs or rollgate.array()
    local possible = m.path == nil or addPath(r, m.path)
    for _, h in ipairs(m.headers or {}) do
      table.insert(r.match.exprs, expr("Header", h.name, h.type, h.value))
    end
    for _, q in ipairs(m.queryParams or {}) do
      table.insert(r.match.exprs, expr("Query", q.name, q.type, q.value))
    end
    possible = possible and not contradicts(r.match.exprs)
    if #r.match.exprs == 0 then
      r.match.exprs = nil
    end
    local c = canaryBackend(backend)
    c.weight = nil
    r.backends = rollgate.array({ c })
    headerPlugin(r)
    if possible then
      table.insert(out, r)
    end
  end
  return out
end

local w = obj.canaryWeight
if w > 0 then
  for _, route in ipairs(spec.http or {}) do
    if hasStable(route) then
      route.backends = splitBackends(route.backends, w)
    end
  end
elseif w == -1 and obj.matches ~= nil and spec.http ~= nil then
  local out = rollgate.array()
  for _, route in ipairs(spec.http) do
    local backend = hasStable(route)
    if backend then
      for _, r in ipairs(canaryRoutes(route, backend)) do table.insert(out, r) end
    end
    table.insert(out, route)
  end
  spec.http = out
end
return { spec = spec }
