package agent

import "github.com/ovs-srcip/ovs-srcip/flows"

// Test accessors of unexported state; they exist only in the test binary.

// Applied returns a copy of what the Reconciler holds as applied on b. It must be called from the
// goroutine that calls Sync.
func (r *Reconciler) Applied(b flows.Bridge) map[flows.Key]flows.Applied {
	out := make(map[flows.Key]flows.Applied, len(r.syncer.applied[b]))
	for k, v := range r.syncer.applied[b] {
		out[k] = v
	}
	return out
}

// Pending returns the number of keys with pending changes.
func (t *ChangeTracker[K, V]) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

// Reads returns how many times the directory has been read.
func (s *ManifestSource) Reads() int64 { return s.reads.Load() }

func init() {
	// Every test's syncs (two dirty keys or more) take the parallel build path, under -race too.
	parallelBuildMin = 2
}

var TrimObject = trimObject
