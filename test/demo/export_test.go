package demo

// Test helpers shared with the package's external tests.
var (
	BuildRollgate  = buildRollgate
	GitStatusPhase = gitStatusPhase
)
