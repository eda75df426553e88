-- Argo CD action "promote": skips the remaining steps of the release in
-- progress of a rollgate.dev Rollout and releases its canary revision
-- fully, by setting spec.promote to that revision.

local status = obj.status or {}
local state = status.currentStepState
if status.phase ~= "Progressing" or status.canaryRevision == nil or state == "Completed" or state == "RollingBack" then
  error("nothing to promote: no release is moving (a paused release must be resumed first)", 0)
end
obj.spec.promote = {revision = status.canaryRevision}
return obj
