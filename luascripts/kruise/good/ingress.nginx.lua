-- A user's ingress-nginx script in Kruise Rollout's style: obj.weight is a
-- string, "-1" when the step sets no weight; obj.matches is nil without
-- matches; a header named canary-by-cookie asks for a cookie rule.
local annotations = {}
if obj.annotations then
  annotations = obj.annotations
end
annotations["nginx.ingress.kubernetes.io/canary"] = "true"
annotations["nginx.ingress.kubernetes.io/canary-by-cookie"] = nil
annotations["nginx.ingress.kubernetes.io/canary-by-header"] = nil
annotations["nginx.ingress.kubernetes.io/canary-by-header-pattern"] = nil
annotations["nginx.ingress.kubernetes.io/canary-by-header-value"] = nil
annotations["nginx.ingress.kubernetes.io/canary-weight"] = nil
if obj.weight ~= "-1" then
  annotations["nginx.ingress.kubernetes.io/canary-weight"] = obj.weight
end
if not obj.matches then
  return annotations
end
for _, match in ipairs(obj.matches) do
  if match.headers and next(match.headers) ~= nil then
    local header = match.headers[1]
    if header.name == "canary-by-cookie" then
      annotations["nginx.ingress.kubernetes.io/canary-by-cookie"] = header.value
    else
      annotations["nginx.ingress.kubernetes.io/canary-by-header"] = header.name
      if header.type == "RegularExpression" then
        annotations["nginx.ingress.kubernetes.io/canary-by-header-pattern"] = header.value
      else
        annotations["nginx.ingress.kubernetes.io/canary-by-header-value"] = header.value
      end
    end
  end
end
return annotations
