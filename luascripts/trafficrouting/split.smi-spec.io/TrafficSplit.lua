-- rollgate built-in: SMI TrafficSplit (split.smi-spec.io v1alpha2 and
-- later, integer weights).
--
-- Weight steps: the backend for the stable Service is split into the stable
-- backend and a canary backend. Other backends keep their share: their
-- weights are scaled by 100.
--
-- A TrafficSplit matches requests only through HTTPRouteGroup objects it
-- references, which this script cannot create: match steps fail with an
-- error. requestHeaderModifier is not supported. A separate canary Service
-- is required.

local spec = obj.data.spec or rollgate.object()
local stable, canary = obj.stableService, obj.canaryService

if obj.canaryWeight == -1 and obj.matches ~= nil then
  error("a TrafficSplit splits traffic by weight only; match steps need another router", 0)
end

local w = obj.canaryWeight
if w > 0 and spec.backends ~= nil then
  if stable == canary then
    error("a TrafficSplit needs a canary Service different from the stable one", 0)
  end
  local alone = #spec.backends == 1
  local out = rollgate.array()
  for i, b in ipairs(spec.backends) do
    if type(b.weight) ~= "number" then
      error(string.format("backends[%d].weight must be an integer (TrafficSplit v1alpha2 or later)", i - 1), 0)
    end
    if b.service == stable then
      local total = alone and 1 or b.weight
      local s, c = rollgate.copy(b), rollgate.copy(b)
      c.service = canary
      s.weight, c.weight = total * (100 - w), total * w
      table.insert(out, s)
      table.insert(out, c)
    else
      local o = rollgate.copy(b)
      o.weight = b.weight * 100
      table.insert(out, o)
    end
  end
  spec.backends = out
end
return { spec = spec }
