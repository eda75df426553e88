package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// sideBySideAuditEnv, when set to 1, turns on the API server's audit log
// in P5 and prints every controller's requests from image change to
// completion by verb and resource, read from that log: the per-process
// client-go counter only splits by HTTP method. Set to "request", the log
// also records the body of every write (to see what each one changed;
// keep the log with sideBySideLogsEnv).
const sideBySideAuditEnv = "ROLLGATE_P5_AUDIT"

// auditPolicy writes a policy that records every request's metadata, and
// with bodies the body of every write, and returns its path.
func auditPolicy(b *testing.B, bodies bool) string {
	path := filepath.Join(b.TempDir(), "audit-policy.yaml")
	policy := `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
`
	if bodies {
		policy += "- level: Request\n  verbs: [create, update, patch, delete]\n"
	}
	policy += "- level: Metadata\n"
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// auditEvent is the part of an audit.k8s.io/v1 Event the breakdown reads.
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	Received time.Time `json:"requestReceivedTimestamp"`
}

// auditCounts counts the requests in the audit log at path received in
// [from, to], by client (the user agent up to its first "/") and then by
// "verb resource[/subresource]". A watch counts once, when it starts.
func auditCounts(path string, from, to time.Time) (map[string]map[string]float64, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	out := map[string]map[string]float64{}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		counted := e.Stage == "ResponseComplete" && e.Verb != "watch" || e.Stage == "ResponseStarted" && e.Verb == "watch"
		if !counted || e.Received.Before(from) || e.Received.After(to) {
			continue
		}
		agent, _, _ := strings.Cut(e.UserAgent, "/")
		key := e.Verb
		if e.ObjectRef != nil {
			key += " " + e.ObjectRef.Resource
			if e.ObjectRef.Subresource != "" {
				key += "/" + e.ObjectRef.Subresource
			}
		}
		if out[agent] == nil {
			out[agent] = map[string]float64{}
		}
		out[agent][key]++
	}
	return out, sc.Err()
}

// printAuditCounts prints the breakdown, one line per client and request
// kind, most frequent first, with the count per Rollout.
func printAuditCounts(r sbsResult) {
	agents := make([]string, 0, len(r.audit))
	for a := range r.audit {
		agents = append(agents, a)
	}
	sort.Strings(agents)
	for _, a := range agents {
		keys := make([]string, 0, len(r.audit[a]))
		total := 0.0
		for k, v := range r.audit[a] {
			keys = append(keys, k)
			total += v
		}
		sort.Slice(keys, func(i, j int) bool { return r.audit[a][keys[i]] > r.audit[a][keys[j]] })
		fmt.Printf("P5 audit, %s, %d Rollouts, client %s: %.0f requests (%.1f per Rollout)\n", r.controller, r.n, a, total, total/float64(r.n))
		for _, k := range keys {
			fmt.Printf("P5 audit, %s, %d Rollouts, client %s, %s: %.0f (%.2f per Rollout)\n", r.controller, r.n, a, k, r.audit[a][k], r.audit[a][k]/float64(r.n))
		}
	}
}
