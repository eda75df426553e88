-- Two mistakes a Kruise-style VirtualService script can make; the routing
-- guard refuses both steps before anything is written.
--
-- 1. It reads -1 as "everything", as Kruise's own script does when it has
--    no match branch to take: a match step sends all traffic to the canary.
-- 2. It translates only exact header matches: a regular expression leaves
--    an empty match, which Istio takes as "match every request".
local spec = obj.data.spec
local canary, stable = obj.canaryWeight, obj.stableWeight
if canary == -1 then
  canary, stable = 100, 0
end

if obj.matches and obj.matches[1].queryParams then
  -- Only the weight mistake (1) is exercised on query steps.
  obj.matches = nil
end

if obj.matches then
  for _, match in ipairs(obj.matches) do
    local vsMatch = {}
    for _, h in ipairs(match.headers or {}) do
      if h.type == "Exact" then
        vsMatch.headers = vsMatch.headers or {}
        vsMatch.headers[string.lower(h.name)] = { exact = h.value }
      end
    end
    table.insert(spec.http, 1, { match = { vsMatch }, route = { { destination = { host = obj.canaryService } } } })
  end
else
  for _, rule in ipairs(spec.http) do
    rule.route[1].weight = stable
    table.insert(rule.route, { destination = { host = obj.canaryService }, weight = canary })
  end
end
return { spec = spec }
