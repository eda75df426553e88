-- A Kruise-style ingress-nginx script that reads weight "-1" as "all
-- traffic" and ignores matches: the guard refuses its match steps.
local annotations = obj.annotations or {}
annotations["nginx.ingress.kubernetes.io/canary"] = "true"
if obj.weight == "-1" then
  annotations["nginx.ingress.kubernetes.io/canary-weight"] = "100"
else
  annotations["nginx.ingress.kubernetes.io/canary-weight"] = obj.weight
end
return annotations
