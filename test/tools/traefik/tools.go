//go:build tools

// Package traefik pins Traefik, the Gateway API data plane of the real-traffic
// tests (test/realtraffic). Traefik's go.mod replaces three modules; replace
// lines of a required module do not apply, so they are copied into go.mod and
// Traefik is built from this wrapper module (`make tools-traefik`).
package traefik

import _ "github.com/traefik/traefik/v3/cmd/traefik"
