-- Argo CD action discovery for a rollgate.dev Rollout: which actions the
-- UI offers, and which of them are disabled for the Rollout's state.
--
-- Every action changes spec only, as a merged pull request would. Approving
-- by merging the approval pull request keeps Git the source of truth; these
-- actions are for when that is not possible (see docs/argocd.md).

local status = obj.status or {}
local spec = obj.spec or {}
local phase = status.phase
local state = status.currentStepState
local paused = spec.strategy ~= nil and spec.strategy.paused == true

-- A release is in progress while it moves or is held at a step, and is not
-- already finishing or rolling back.
local releasing = status.canaryRevision ~= nil and state ~= "Completed" and state ~= "RollingBack" and
  (phase == "Progressing" or (phase == "Paused" and (status.currentStepIndex or 0) > 0))

local gate = status.awaitingApproval
local awaiting = gate ~= nil and gate.revision ~= nil and gate.step ~= nil and phase ~= "Failed"

local actions = {}
actions["approve"] = {disabled = not awaiting, iconClass = "fa fa-fw fa-check", displayName = "Approve step"}
actions["promote"] = {disabled = not (releasing and phase == "Progressing"), iconClass = "fa fa-fw fa-forward", displayName = "Promote (skip remaining steps)"}
actions["abort"] = {disabled = not releasing, iconClass = "fa fa-fw fa-stop", displayName = "Abort release"}
actions["retry"] = {disabled = not (phase == "Failed" and status.canaryRevision ~= nil), iconClass = "fa fa-fw fa-redo", displayName = "Retry release"}
actions["pause"] = {disabled = paused, iconClass = "fa fa-fw fa-pause", displayName = "Pause"}
actions["resume"] = {disabled = not paused, iconClass = "fa fa-fw fa-play", displayName = "Resume"}
return actions
