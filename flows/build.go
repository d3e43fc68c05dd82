package flows

import (
	"errors"
	"fmt"
)

// Build computes the complete desired content of both bridges of st.Node: every key of every
// registered kind (KindSpec.Keys), built with its KindSpec.Build. FlowSets that fail to render
// are reported in the error (errors.Join) and left out; the others are returned.
func Build(st *State) (Desired, error) {
	d := Desired{}
	var errs []error
	for _, spec := range registry {
		for _, k := range spec.Keys(st) {
			fs, err := spec.Build(st, k)
			switch {
			case err != nil:
				errs = append(errs, err)
			case fs != nil:
				d[k] = fs
			}
		}
	}
	if len(errs) > 0 {
		return d, fmt.Errorf("build %d flow sets: %w", len(errs), errors.Join(errs...))
	}
	return d, nil
}

// GroupIDs hands out stable OpenFlow group ids in the agent's range (GroupIDBase + 24 bits):
// the id is a hash of the Key, linearly probed on collision, and kept until Release.
// It is not safe for concurrent use (the reconciler owns it).
type GroupIDs struct {
	byKey map[Key]uint32
	used  map[uint32]Key
}

// NewGroupIDs returns an empty allocator.
func NewGroupIDs() *GroupIDs {
	return &GroupIDs{byKey: map[Key]uint32{}, used: map[uint32]Key{}}
}

// Reserve makes room for n ids when none is held (a first full sync hands out one per Service
// port at once).
func (g *GroupIDs) Reserve(n int) {
	if len(g.byKey) == 0 && len(g.used) == 0 {
		g.byKey, g.used = make(map[Key]uint32, n), make(map[uint32]Key, n)
	}
}

// ID returns the group id of k, allocating one on first use.
func (g *GroupIDs) ID(k Key) uint32 {
	if id, ok := g.byKey[k]; ok {
		return id
	}
	var buf [128]byte
	h := uint32(2166136261) // FNV-1a (hash/fnv's New32a) of k.String(), without allocating
	for _, c := range k.appendText(buf[:0]) {
		h ^= uint32(c)
		h *= 16777619
	}
	off := h & 0xffffff
	for {
		id := GroupIDBase | off
		if _, taken := g.used[id]; !taken && off != 0 {
			g.byKey[k] = id
			g.used[id] = k
			return id
		}
		off = (off + 1) & 0xffffff
	}
}

// Release frees the group id of k.
func (g *GroupIDs) Release(k Key) {
	if id, ok := g.byKey[k]; ok {
		delete(g.used, id)
		delete(g.byKey, k)
	}
}

// Held returns the keys that hold a group id.
func (g *GroupIDs) Held() []Key {
	out := make([]Key, 0, len(g.byKey))
	for k := range g.byKey {
		out = append(out, k)
	}
	return out
}
