// Package realtraffic tells rollgate's release story on a real data plane:
// a real node (test/realnode) runs the controller from its chart as a pod
// (its own ServiceAccount and RBAC, its webhook reached by the API server
// through the chart's Service), the sample application's pods, and Traefik
// in front of them as a Gateway API implementation. Continuous load goes
// through Traefik while a release moves, and every answer is recorded with
// the version that gave it.
package realtraffic
