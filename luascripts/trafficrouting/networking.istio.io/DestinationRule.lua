-- rollgate built-in: Istio DestinationRule (networking.istio.io).
--
-- Keeps two subsets of the stable Service's host up to date: "stable"
-- selects pods of the stable revision and "canary" pods of the canary
-- revision, by the revision label (pod-template-hash for Deployments,
-- controller-revision-hash otherwise). Existing subsets with those names
-- keep their other labels and settings; other subsets are not touched.
-- The VirtualService script routes to these subsets when the Rollout has
-- no separate canary Service. A DestinationRule for another host is
-- returned unchanged. Weights and matches play no part here.

local spec = obj.data.spec or rollgate.object()
local stable = obj.stableService

local function isStableHost(host)
  return type(host) == "string" and (host == stable or host:sub(1, #stable + 1) == stable .. ".")
end

if not isStableHost(spec.host) then
  return { spec = spec }
end
if obj.revisionLabelKey == "" or obj.stableRevision == "" or obj.canaryRevision == "" then
  error("DestinationRule subsets need the stable and canary revisions and the revision label key", 0)
end

local function ensureSubset(name, revision)
  for _, subset in ipairs(spec.subsets) do
    if subset.name == name then
      subset.labels = subset.labels or rollgate.object()
      subset.labels[obj.revisionLabelKey] = revision
      return
    end
  end
  local labels = rollgate.object()
  labels[obj.revisionLabelKey] = revision
  table.insert(spec.subsets, rollgate.object({ name = name, labels = labels }))
end

spec.subsets = spec.subsets or rollgate.array()
ensureSubset("stable", obj.stableRevision)
ensureSubset("canary", obj.canaryRevision)
return { spec = spec }
