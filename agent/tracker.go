package agent

import "sync"

// Change is the net change of one object since the last Checkout: Previous is what the
// Reconciler last saw (nil: absent), Current what the Source holds now (nil: deleted).
type Change[V any] struct {
	Previous, Current *V
}

// ChangeTracker accumulates pending changes per key, kube-proxy style: several updates of one key
// between two syncs collapse into one {first previous, last current} pair, and a pair whose ends
// are equal (a resync, an update that changed nothing we read, an add then delete) is dropped.
// It is safe for concurrent use.
type ChangeTracker[K comparable, V any] struct {
	equal func(a, b *V) bool

	mu      sync.Mutex
	pending map[K]*Change[V]
}

// NewChangeTracker returns a tracker that uses equal to recognise no-op changes; equal is called
// with possibly nil arguments only when both are non-nil.
func NewChangeTracker[K comparable, V any](equal func(a, b *V) bool) *ChangeTracker[K, V] {
	return &ChangeTracker[K, V]{equal: equal, pending: map[K]*Change[V]{}}
}

// Update records a change of key from prev to cur and reports whether changes are pending.
func (t *ChangeTracker[K, V]) Update(key K, prev, cur *V) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.pending[key]
	if !ok {
		c = &Change[V]{Previous: prev}
		t.pending[key] = c
	}
	c.Current = cur
	if t.same(c.Previous, c.Current) {
		delete(t.pending, key)
	}
	return len(t.pending) > 0
}

func (t *ChangeTracker[K, V]) same(a, b *V) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return t.equal(a, b)
}

// Checkout returns the pending changes and clears them.
func (t *ChangeTracker[K, V]) Checkout() map[K]Change[V] {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[K]Change[V], len(t.pending))
	for k, c := range t.pending {
		out[k] = *c
	}
	t.pending = map[K]*Change[V]{}
	return out
}
