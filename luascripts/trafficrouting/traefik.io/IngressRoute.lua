-- rollgate built-in: Traefik IngressRoute (traefik.io/v1alpha1), HTTP
-- routes.
--
-- Weight steps: in every route with a service entry for the stable
-- Service (kind Service or no kind), that entry is split into the stable
-- entry and a canary entry with the same port and options, and the
-- route's other entries keep their share: their weights are scaled by 100
-- (Traefik weights are relative, default 1). Other routes are left as they
-- are, among them routes to a TraefikService: list the TraefikService in
-- customNetworkRefs to split it.
--
-- Match steps: before every route with a stable service entry, one canary
-- route is inserted: a copy of the route whose rule is (the route's rule)
-- && (the step's matches, ORed), whose only service is the canary (the
-- stable entry renamed), and whose priority is one above the route's
-- (Traefik's default priority is the rule's length; the canary rule is
-- longer, so it wins either way). Step matches become Traefik matchers:
-- a path is Path, PathPrefix or PathRegexp; a header Header or
-- HeaderRegexp; a query parameter Query or QueryRegexp. Routes that
-- send to a TraefikService are refused at a match step: the canary route
-- would need the stable Service's port, which only the TraefikService
-- names.
--
-- requestHeaderModifier is not supported (use a Middleware). A separate
-- canary Service is required.

local spec = obj.data.spec or rollgate.object()
local stable, canary = obj.stableService, obj.canaryService

local function isStable(s)
  return s.name == stable and (s.kind == nil or s.kind == "Service")
end

if stable == canary and (obj.canaryWeight > 0 or obj.matches ~= nil) then
  error("an IngressRoute needs a canary Service different from the stable one", 0)
end

-- quote puts a value between backticks, as Traefik's rules write them.
local function quote(v, what)
  if string.find(v, "`", 1, true) then
    error(string.format("an IngressRoute rule cannot quote the %s %q (it holds a backtick)", what, v), 0)
  end
  return "`" .. v .. "`"
end

local pathMatchers = { Exact = "Path", PathPrefix = "PathPrefix", RegularExpression = "PathRegexp" }

-- matcher is one step match as a Traefik rule: its conditions ANDed.
local function matcher(m, i)
  local parts = {}
  if m.path ~= nil then
    local fn = pathMatchers[m.path.type or "PathPrefix"]
    if fn == nil then
      error(string.format("step match %d: an IngressRoute cannot match a path with type %s", i, tostring(m.path.type)), 0)
    end
    table.insert(parts, fn .. "(" .. quote(m.path.value or "/", "path") .. ")")
  end
  for _, kind in ipairs({ { "headers", "Header", "header" }, { "queryParams", "Query", "query parameter" } }) do
    for _, c in ipairs(m[kind[1]] or {}) do
      local fn
      if c.type == nil or c.type == "Exact" then
        fn = kind[2]
      elseif c.type == "RegularExpression" then
        fn = kind[2] .. "Regexp"
      else
        error(string.format("step match %d: an IngressRoute cannot match a %s with type %s", i, kind[3], tostring(c.type)), 0)
      end
      table.insert(parts, fn .. "(" .. quote(c.name, kind[3] .. " name") .. ", " .. quote(c.value, kind[3] .. " value") .. ")")
    end
  end
  if #parts == 0 then
    error(string.format("step match %d has no condition", i), 0)
  end
  return table.concat(parts, " && ")
end

local function stepRule()
  local ors = {}
  for i, m in ipairs(obj.matches) do
    table.insert(ors, "(" .. matcher(m, i) .. ")")
  end
  if #ors == 1 then return ors[1] end
  return "(" .. table.concat(ors, " || ") .. ")"
end

local routes = spec.routes
local w = obj.canaryWeight
if w == -1 and obj.matches ~= nil and routes ~= nil then
  local rule = stepRule()
  local out = rollgate.array()
  local found = false
  for i, r in ipairs(routes) do
    local stableEntry = nil
    for _, s in ipairs(r.services or {}) do
      if isStable(s) then
        stableEntry = s
      elseif s.kind == "TraefikService" then
        error(string.format("routes[%d] sends to TraefikService %s: a match step needs the stable Service %s "
          .. "listed in the route (the canary route copies its port)", i - 1, tostring(s.name), stable), 0)
      end
    end
    if stableEntry ~= nil then
      if type(r.match) ~= "string" or r.match == "" then
        error(string.format("routes[%d] has no match rule to narrow", i - 1), 0)
      end
      found = true
      local c = rollgate.copy(r)
      local entry = rollgate.copy(stableEntry)
      entry.name = canary
      entry.weight = nil
      c.services = rollgate.array({ entry })
      c.match = "(" .. r.match .. ") && " .. rule
      if r.priority ~= nil then
        c.priority = r.priority + 1
      end
      table.insert(out, c)
    end
    table.insert(out, r)
  end
  if not found then
    error(string.format("no route of the IngressRoute sends to Service %s", stable), 0)
  end
  spec.routes = out
elseif w > 0 and routes ~= nil then
  for _, r in ipairs(routes) do
    local mine = false
    for _, s in ipairs(r.services or {}) do
      mine = mine or isStable(s)
    end
    if mine then
      r.services = rollgate.splitWeighted(r.services, stable, canary, w)
    end
  end
end
return { spec = spec }
