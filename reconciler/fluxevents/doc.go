// Package fluxevents records rollgate's Kubernetes events and posts a copy
// of each to Flux's notification-controller, about the Kustomization that
// applied the Rollout, so Flux Alerts and Providers receive release events
// like any Flux event.
package fluxevents
