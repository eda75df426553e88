-- A TraefikService script with a Kruise user's slip: the two weights are
-- swapped, so a 20% step sends 80% of the requests to the canary. The
-- routing guard refuses the step before anything is written.
local spec = obj.data.spec
if obj.canaryWeight == -1 then
  return obj.data
end
local services = {}
for _, s in ipairs(spec.weighted.services) do
  if s.name == obj.stableService then
    table.insert(services, { name = obj.stableService, port = s.port, weight = obj.canaryWeight })
    table.insert(services, { name = obj.canaryService, port = s.port, weight = obj.stableWeight })
  else
    table.insert(services, s)
  end
end
spec.weighted.services = services
return obj.data
