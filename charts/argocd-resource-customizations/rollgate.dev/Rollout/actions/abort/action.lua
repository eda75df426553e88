-- Argo CD action "abort": stops the release in progress of a rollgate.dev
-- Rollout by setting spec.abort to its canary revision. Traffic and pods
-- return to the stable revision, and rollgate proposes a revert in Git.

local status = obj.status or {}
local state = status.currentStepState
local releasing = status.canaryRevision ~= nil and state ~= "Completed" and state ~= "RollingBack" and
  (status.phase == "Progressing" or (status.phase == "Paused" and (status.currentStepIndex or 0) > 0))
if not releasing then
  error("nothing to abort: no release is in progress", 0)
end
obj.spec.abort = {revision = status.canaryRevision}
return obj
