-- Argo CD health of a rollgate.dev Rollout.
--
-- Argo CD runs this script with the live Rollout as the global obj and
-- reads back {status = ..., message = ...}. Scripts configured in argocd-cm
-- get only Lua's base and table libraries, so strings are joined with ..
-- and nothing here uses the string or math library.
--
-- A release that waits for approval, or that spec.strategy.paused holds,
-- is Suspended: waiting, not broken. Only a failed release or a spec the
-- controller cannot act on (Stalled) is Degraded.

local function condition(status, kind)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function isTrue(c)
  return c ~= nil and c.status == "True"
end

-- firstText returns the first argument that is a non-empty string.
local function firstText(...)
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if type(v) == "string" and v ~= "" then
      return v
    end
  end
  return nil
end

-- approvalMessage says which step of which revision (and attempt, after a
-- retry) waits and what to merge.
local function approvalMessage(status, gate, c)
  if gate == nil or gate.revision == nil or gate.step == nil then
    return firstText(c.message, status.message, "waiting for approval")
  end
  local step = "step " .. gate.step
  if status.stepCount ~= nil then
    step = step .. "/" .. status.stepCount
  end
  local revision = gate.revision
  local entry = "{revision: " .. gate.revision .. ", step: " .. gate.step
  if gate.attempt ~= nil and gate.attempt > 1 then
    revision = revision .. " (attempt " .. gate.attempt .. ")"
    entry = entry .. ", attempt: " .. gate.attempt
  end
  local msg = step .. " of revision " .. revision .. " waits for approval"
  if gate.reason == "Inconclusive" then
    msg = "analysis was inconclusive: " .. msg
  end
  if firstText(gate.pullRequestURL) ~= nil then
    msg = msg .. ": merge pull request " .. gate.pullRequestURL
    if firstText(gate.branch) ~= nil then
      msg = msg .. " (branch " .. gate.branch .. ")"
    end
  elseif firstText(gate.branch) ~= nil then
    msg = msg .. ": merge branch " .. gate.branch
  else
    msg = msg .. ": add " .. entry .. "} to spec.approvals"
  end
  return msg
end

-- failureMessage explains a failed release or a stalled Rollout, and where
-- the proposed revert is.
local function failureMessage(status, stalled)
  local msg
  if isTrue(stalled) then
    msg = firstText(stalled.message, status.message, stalled.reason, "stalled")
  else
    local ready = condition(status, "Ready")
    msg = firstText(status.message, ready ~= nil and ready.message or nil, "the release failed")
  end
  local git = status.git
  if git ~= nil then
    local revert = firstText(git.revertPullRequestURL, git.revertBranch)
    if revert ~= nil then
      msg = msg .. "; revert proposed in " .. revert
    end
  end
  return msg
end

local function health(o)
  local status = o.status
  local generation = 0
  if o.metadata ~= nil and o.metadata.generation ~= nil then
    generation = o.metadata.generation
  end
  if status == nil then
    if generation > 0 then
      return "Progressing", "waiting for the controller to observe generation " .. generation
    end
    return "Progressing", "waiting for the controller to report status"
  end
  if generation > (status.observedGeneration or 0) then
    return "Progressing", "waiting for the controller to observe generation " .. generation
  end

  local stalled = condition(status, "Stalled")
  if isTrue(stalled) or status.phase == "Failed" then
    return "Degraded", failureMessage(status, stalled)
  end

  local awaiting = condition(status, "AwaitingApproval")
  if isTrue(awaiting) then
    return "Suspended", approvalMessage(status, status.awaitingApproval, awaiting)
  end

  if status.phase == "Paused" then
    return "Suspended", firstText(status.message, "paused: spec.strategy.paused is true")
  end

  local ready = condition(status, "Ready")
  if isTrue(ready) then
    return "Healthy", firstText(status.message, ready.message, "no release in progress")
  end
  if status.phase == "Disabled" then
    return "Healthy", firstText(status.message, "spec.disabled is true: the workload is released as Git declares it")
  end

  local reconciling = condition(status, "Reconciling")
  return "Progressing", firstText(status.message, reconciling ~= nil and reconciling.message or nil, "waiting for the controller")
end

local hs = {}
hs.status, hs.message = health(obj)
return hs
