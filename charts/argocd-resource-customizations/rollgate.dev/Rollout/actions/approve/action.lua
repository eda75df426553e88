-- Argo CD action "approve": opens the gate a rollgate.dev Rollout waits at,
-- by adding {revision, step, approvedBy = "argocd"} to spec.approvals for
-- the revision and step in status.awaitingApproval, with the attempt
-- (status.attempt) from attempt 2 on: after a retry, the approvals of the
-- failed attempt do not open the gates of the new one. Merging the approval
-- pull request is the usual way; this action is for emergencies.
--
-- Running it again changes nothing: an approval for the same revision,
-- attempt and step already opens the gate.
--
-- Argo CD cannot make a list that the live object already has longer: it
-- fails with "index out of range" (argoproj/argo-cd#6248). So when
-- spec.approvals already has entries, the new approval takes the place of
-- one this release has no use for: first an approval of another revision,
-- else one of an earlier attempt of this revision, else one of an earlier
-- step of this attempt, whose gate is behind. Approvals merged in Git stay
-- in Git, and the next sync brings them back.

local status = obj.status or {}
local gate = status.awaitingApproval
if gate == nil or gate.revision == nil or gate.step == nil or status.phase == "Failed" then
  error("nothing to approve: status.awaitingApproval is empty, no gate is waiting", 0)
end

-- attemptOf reads an attempt: unset (or below 1) means attempt 1.
local function attemptOf(n)
  if n == nil or n < 1 then
    return 1
  end
  return n
end

local attempt = attemptOf(gate.attempt)
if attemptOf(status.attempt) > attempt then
  attempt = attemptOf(status.attempt)
end
local approval = {revision = gate.revision, step = gate.step, approvedBy = "argocd"}
if attempt > 1 then
  approval.attempt = attempt
end
local approvals = obj.spec.approvals
if approvals == nil then
  obj.spec.approvals = {approval}
  return obj
end

for _, a in ipairs(approvals) do
  if a.revision == approval.revision and a.step == approval.step and attemptOf(a.attempt) == attempt then
    return obj
  end
end

local function firstWhere(pred)
  for i, a in ipairs(approvals) do
    if pred(a) then
      return i
    end
  end
  return nil
end

local free = firstWhere(function(a) return a.revision ~= approval.revision end)
if free == nil then
  free = firstWhere(function(a) return attemptOf(a.attempt) < attempt end)
end
if free == nil then
  free = firstWhere(function(a)
    return attemptOf(a.attempt) == attempt and a.step ~= nil and a.step < approval.step
  end)
end
if free == nil then
  error("cannot approve from Argo CD: spec.approvals has no entry this approval can replace, and Argo CD " ..
    "cannot add one to a list that is not empty (argoproj/argo-cd#6248); merge the approval pull request, " ..
    "or approve in Git with: rollgate approve <namespace>/<name> --repo <url> --direct", 0)
end
approvals[free] = approval
return obj
