-- rollgate built-in: Traefik TraefikService (traefik.io/v1alpha1), weighted
-- round robin.
--
-- Weight steps: in spec.weighted.services, an entry for the stable
-- Service (kind Service or no kind) is split into the stable entry and a
-- canary entry with the same port and options. Other entries keep their
-- share: their weights are scaled by 100 (Traefik weights are relative,
-- default 1).
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

local w = obj.canaryWeight
local weighted = spec.weighted
if w > 0 and weighted ~= nil and weighted.services ~= nil then
  if stable == canary then
    error("a TraefikService needs a canary Service different from the stable one", 0)
  end
  weighted.services = rollgate.splitWeighted(weighted.services, stable, canary, w)
end
return { spec = spec }
