-- Argo CD action "promote": skips the remaining steps of the release in
-- progress of a rollgate.dev Rollout and releases its canary revision
-- fully, by setting spec.promote to that revision.

local status = obj.status or {}
local state = status.currentStepState
local releasing = status.canaryRevision ~= nil and state ~= "Completed" and state ~= "RollingBack" and
  (status.phase == "Progressing" or (status.phase == "Paused" and (status.currentStepIndex or 0) > 0))
if not releasing then
  error("nothing to promote: no release is in progress", 0)
end
obj.spec.promote = {revision = status.canaryRevision}
return obj
