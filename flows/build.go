package flows

import (
	"fmt"
	"hash/fnv"
)

// Build computes the complete desired content of both bridges of st.Node. FlowSets that fail to
// render are reported in the error and left out; the others are returned.
func Build(st *State) (Desired, error) {
	d := Desired{}
	var errs []error
	add := func(fs *FlowSet, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		d[fs.Key] = fs
	}
	add(BuildExBase(st))
	add(BuildIntBase(st))
	for _, n := range st.Nodes {
		if n.Name == st.Node {
			continue
		}
		add(BuildNode(st, n))
	}
	for _, p := range st.Pods {
		add(BuildPod(st, p))
	}
	for i := range st.Services {
		add(BuildServicePort(st, &st.Services[i]))
	}
	if len(errs) > 0 {
		return d, fmt.Errorf("build %d flow sets: %v", len(errs), errs)
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

// ID returns the group id of k, allocating one on first use.
func (g *GroupIDs) ID(k Key) uint32 {
	if id, ok := g.byKey[k]; ok {
		return id
	}
	h := fnv.New32a()
	fmt.Fprint(h, k.String())
	off := h.Sum32() & 0xffffff
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
