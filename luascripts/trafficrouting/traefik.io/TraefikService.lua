-- rollgate built-in: Traefik TraefikService (traefik.io/v1alpha1), weighted
-- round robin.
--
-- Weight steps: in spec.weighted.services, an entry for the stable
-- Service (kind Service or no kind) is split into the stable entry and a
-- canary entry with the same port and options. Other entries keep their
-- share: their weights are scaled by 100 (Traefik weights are relative,
-- default 1).
--
-- With trafficRoutings[].sticky (obj.stickyCookie), a weight step also
-- sets spec.weighted.sticky.cookie.name, so that Traefik keeps each client
-- on the service it first got; a sticky cookie declared in Git is kept.
--
-- Mirror steps (obj.mirror, a percentage): the TraefikService becomes a
-- mirroring one whose main service is the stable entry (every response
-- comes from it) and whose one mirror is the canary, with the same port
-- and options, receiving obj.mirror percent of the requests as copies.
-- Its weighted services must be the stable Service alone (a mirroring
-- TraefikService has one main service); a declared mirroring TraefikService
-- whose main service is the stable Service keeps its mirrors and gets the
-- canary as one more.
--
-- A TraefikService cannot look at requests: match steps fail with an error
-- (match requests in the IngressRoute instead), and requestHeaderModifier
-- is not supported here (use a Middleware). A separate canary Service is
-- required.

local spec = obj.data.spec or rollgate.object()
local stable, canary = obj.stableService, obj.canaryService

if obj.canaryWeight == -1 and obj.matches ~= nil then
  error("a TraefikService splits traffic by weight only; it cannot route by headers, "
    .. "query parameters or paths (match requests in an IngressRoute instead)", 0)
end

local function isStable(s)
  return s.name == stable and (s.kind == nil or s.kind == "Service")
end

-- canaryMirror is a mirror to the canary with the port and the connection
-- options of the stable entry s (not its weight, cookie or mirrors).
local function canaryMirror(s)
  local m = rollgate.object()
  for _, k in ipairs({ "namespace", "port", "scheme", "passHostHeader", "responseForwarding",
    "serversTransport", "nativeLB", "nodePortLB" }) do
    if s[k] ~= nil then m[k] = rollgate.copy(s[k]) end
  end
  m.name = canary
  m.percent = obj.mirror
  return m
end

if obj.mirror ~= nil then
  if stable == canary then
    error("a TraefikService needs a canary Service different from the stable one", 0)
  end
  if spec.mirroring ~= nil then
    local m = spec.mirroring
    if not isStable(m) then
      error(string.format("mirroring sends its responses from %s, not from the stable Service %s: "
        .. "a mirror step needs the stable Service as the main service", tostring(m.name), stable), 0)
    end
    local mirrors = m.mirrors or rollgate.array()
    table.insert(mirrors, canaryMirror(m))
    m.mirrors = mirrors
  elseif spec.weighted ~= nil and spec.weighted.services ~= nil then
    local services = spec.weighted.services
    if #services ~= 1 or not isStable(services[1]) then
      error(string.format("a mirror step turns the TraefikService into a mirroring one, whose one main service "
        .. "must be the stable Service %s: its weighted services list %d entries", stable, #services), 0)
    end
    local main = rollgate.copy(services[1])
    main.weight = nil
    main.mirrors = rollgate.array({ canaryMirror(services[1]) })
    spec.weighted = nil
    spec.mirroring = main
  else
    error("a mirror step needs spec.weighted.services or spec.mirroring to point at the stable Service " .. stable, 0)
  end
  return { spec = spec }
end

local w = obj.canaryWeight
local weighted = spec.weighted
if w > 0 and weighted ~= nil and weighted.services ~= nil then
  if stable == canary then
    error("a TraefikService needs a canary Service different from the stable one", 0)
  end
  weighted.services = rollgate.splitWeighted(weighted.services, stable, canary, w)
  if obj.stickyCookie ~= nil and weighted.sticky == nil then
    weighted.sticky = rollgate.object()
    weighted.sticky.cookie = rollgate.object()
    weighted.sticky.cookie.name = obj.stickyCookie
  end
end
return { spec = spec }
