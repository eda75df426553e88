-- Argo CD action "resume": lets a paused rollgate.dev Rollout go on by
-- setting spec.strategy.paused to false.

obj.spec.strategy.paused = false
return obj
