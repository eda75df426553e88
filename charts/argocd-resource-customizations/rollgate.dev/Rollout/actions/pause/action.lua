-- Argo CD action "pause": holds a rollgate.dev Rollout where it is (no more
-- pods, no traffic change) by setting spec.strategy.paused.

obj.spec.strategy.paused = true
return obj
