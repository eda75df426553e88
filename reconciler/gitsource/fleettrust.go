package gitsource

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// FleetStatus is one cluster's status file of a Rollout, as read from the
// status branch for a spec.fleet gate.
type FleetStatus struct {
	gitsync.RolloutState
	// Distrust says why the file is not believed under the Repository's
	// spec.fleet.trust; "" when it is (or nothing is asked).
	Distrust string
}

// fleetKeys reads the Secrets spec.fleet.trust names: per cluster, the
// Secret's data; and their versions, so that a changed Secret reopens the
// Repository.
func (g *Pool) fleetKeys(ctx context.Context, r *v1alpha1.Repository) (map[string]map[string][]byte, string, error) {
	if r.Spec.Fleet == nil {
		return nil, "", nil
	}
	keys := map[string]map[string][]byte{}
	var versions []string
	for _, t := range r.Spec.Fleet.Trust {
		// Trust is asked for: without the keys, no upstream status is
		// believed (the Repository fails to open, and gates hold).
		var s corev1.Secret
		if err := g.reader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: t.SignedBy.Name}, &s); err != nil {
			return nil, "", fmt.Errorf("getting Secret %s/%s named by Repository %s/%s spec.fleet.trust (cluster %s): %w",
				r.Namespace, t.SignedBy.Name, r.Namespace, r.Name, t.Cluster, err)
		}
		keys[t.Cluster] = s.Data
		versions = append(versions, t.Cluster+"="+s.ResourceVersion)
	}
	sort.Strings(versions)
	return keys, strings.Join(versions, ","), nil
}

// fleetKeyrings parses the keys of fleetKeys; nil without spec.fleet.
func fleetKeyrings(f *v1alpha1.RepositoryFleetSpec, keys map[string]map[string][]byte) (map[string]*gitsync.Keyring, error) {
	if f == nil {
		return nil, nil
	}
	out := map[string]*gitsync.Keyring{}
	for _, t := range f.Trust {
		k, err := gitsync.NewKeyring(keys[t.Cluster])
		if err != nil {
			return nil, fmt.Errorf("spec.fleet.trust (cluster %s, Secret %s): %w", t.Cluster, t.SignedBy.Name, err)
		}
		out[t.Cluster] = k
	}
	return out, nil
}

// judgeTrust checks the status files in states (keyed
// "<cluster>/<namespace>/<name>", read from snap) against the keys of
// their cluster; with no spec.fleet every file is believed.
func (e *Repo) judgeTrust(snap *gitsync.Snapshot, states map[string]gitsync.RolloutState) map[string]FleetStatus {
	out := make(map[string]FleetStatus, len(states))
	for k, s := range states {
		fs := FleetStatus{RolloutState: s}
		if e.spec.Fleet != nil {
			fs.Distrust = e.distrust(snap, k)
		}
		out[k] = fs
	}
	return out
}

// distrust says why the status file of key is not believed, or "".
func (e *Repo) distrust(snap *gitsync.Snapshot, key string) string {
	cluster, _, _ := strings.Cut(key, "/")
	ring := e.trust[cluster]
	if ring == nil {
		return fmt.Sprintf("its status is not believed: cluster %s is not in spec.fleet.trust of Repository %s "+
			"(add it with the Secret of the public keys its controller signs status files with)", cluster, e.obj)
	}
	file := path.Join(e.spec.Status.Path, key+".yaml")
	if _, err := gitsync.VerifyStatusFile(snap, file, ring); err != nil {
		return fmt.Sprintf("its status file %s on %s is not believed: %v (spec.fleet.trust of Repository %s names the keys of cluster %s; "+
			"its controller signs with its Repository's spec.commit.signingKeyRef)", file, e.statusBranch, err, e.obj, cluster)
	}
	return ""
}
