-- Argo CD action "resume": lets a paused rollgate.dev Rollout go on by
-- setting spec.strategy.paused to false. A Rollout that is not paused is
-- left as it is.

if obj.spec.strategy.paused == true then
  obj.spec.strategy.paused = false
end
return obj
