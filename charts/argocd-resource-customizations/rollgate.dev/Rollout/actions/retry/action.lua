-- Argo CD action "retry": releases the failed (or aborted) canary revision
-- of a rollgate.dev Rollout again from step 1, as the next attempt, and
-- drops spec.abort so that it does not stop the new attempt.

local status = obj.status or {}
if status.phase ~= "Failed" or status.canaryRevision == nil then
  error("nothing to retry: the release has not failed", 0)
end
local attempt = status.attempt
if attempt == nil or attempt < 1 then
  attempt = 1
end
obj.spec.retry = {revision = status.canaryRevision, attempt = attempt + 1}
obj.spec.abort = nil
return obj
