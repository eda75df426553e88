-- A TraefikService script written as a Kruise Rollout user writes one: it
-- reads obj.data, obj.canaryWeight and obj.stableWeight, and returns
-- obj.data. The stable Service's entry is split in two; other entries are
-- kept as they are. A step without a weight (-1) keeps the declared object.
local spec = obj.data.spec
if obj.canaryWeight == -1 then
  return obj.data
end
local services = {}
for _, s in ipairs(spec.weighted.services) do
  if s.name == obj.stableService then
    table.insert(services, { name = obj.stableService, port = s.port, weight = obj.stableWeight })
    table.insert(services, { name = obj.canaryService, port = s.port, weight = obj.canaryWeight })
  else
    table.insert(services, s)
  end
end
spec.weighted.services = services
return obj.data
