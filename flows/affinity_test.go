package flows

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func buildPort(t *testing.T, sp ServicePort) *FlowSet {
	t.Helper()
	st := testState(sp)
	sp = st.Services[sp.Key()]
	fs, err := BuildServicePort(st, &sp)
	require.NoError(t, err)
	return fs
}

// The learned cookies of a sessionAffinity port: one per endpoint; an endpoint that leaves, a
// changed timeout and affinity turned off delete exactly the learned flows they invalidate, in
// the bundle that replaces the flow set; an added endpoint keeps the others'.
func TestAffinityLearnedCookies(t *testing.T) {
	sp := webTCP()
	sp.AffinitySeconds = 10800
	fs := buildPort(t, sp)
	require.Len(t, fs.Learned, 3)
	ep := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	assert.Contains(t, fs.Learned, AffinityCookie(sp.Key(), 10800, ep("10.244.2.5:8080")))
	for _, c := range fs.Learned {
		assert.Equal(t, KindLearnedAffinity, c.Kind())
		assert.True(t, c.Learned())
	}
	old := AppliedOf(fs)

	// An endpoint leaves: its learned cookie is deleted, the others stay.
	fewer := sp
	fewer.Endpoints = sp.Endpoints[1:]
	var p Plan
	p.Replace(&old, buildPort(t, fewer))
	assert.Contains(t, p.DeleteCookies, AffinityCookie(sp.Key(), 10800, ep("10.244.1.5:8080")))
	assert.NotContains(t, p.DeleteCookies, AffinityCookie(sp.Key(), 10800, ep("10.244.2.5:8080")))
	assert.Len(t, p.DeleteCookies, 2, "the old flow set's cookie and one learned cookie")

	// The timeout changes, or affinity is turned off: every learned cookie goes.
	for name, s := range map[string]uint32{"timeout": 60, "off": 0} {
		other := sp
		other.AffinitySeconds = s
		var p Plan
		p.Replace(&old, buildPort(t, other))
		for _, c := range fs.Learned {
			assert.Contains(t, p.DeleteCookies, c, name)
		}
	}
	// The port goes away: so do its learned flows.
	p = Plan{}
	p.Replace(&old, nil)
	assert.Len(t, p.DeleteCookies, 4)

	// A full sync keeps the learned cookies a flow set names and deletes the orphans, but never
	// the collision resets (they time out).
	inv := Inventory{Flows: map[Cookie]int{fs.Cookie(): len(fs.Flows), fs.Learned[0]: 7,
		AffinityCookie(sp.Key(), 60, ep("10.244.2.5:8080")): 2, NewCookie(KindLearnedReset, 1): 1}}
	full := FullDiff(BrEx, []*FlowSet{fs}, inv)
	assert.Equal(t, []Cookie{AffinityCookie(sp.Key(), 60, ep("10.244.2.5:8080"))}, full.DeleteCookies)
	assert.Len(t, full.Add, 1, "its group is missing from the inventory")
}

// A port with affinity hashes the client IP alone; a port without usable endpoints sends its new
// connections to the host and learns nothing.
func TestAffinityShapes(t *testing.T) {
	sp := webUDP()
	sp.AffinitySeconds = 100000
	fs := buildPort(t, sp)
	require.Len(t, fs.Groups, 1)
	assert.Len(t, fs.Groups[0].SelectionFields, 1)
	assert.Contains(t, fs.Warnings[0], "65535")
	empty := ServicePort{Namespace: "demo", Name: "empty", Protocol: TCP, Port: 80, NodePort: 30090, AffinitySeconds: 10800}
	fs = buildPort(t, empty)
	assert.Empty(t, fs.Learned)
	for _, f := range fs.Flows {
		if Table(f.Table) == ExServiceCT {
			assert.Contains(t, f.String(), "actions=LOCAL")
		}
		assert.NotEqual(t, ExServiceAffinityOut, Table(f.Table))
	}
}

// Consecutive periods get unrelated hash bases; period 0 none.
func TestAffinityBasis(t *testing.T) {
	assert.Zero(t, AffinityBasis(0))
	seen := map[uint64]bool{}
	for p := uint64(1); p < 1000; p++ {
		b := AffinityBasis(p)
		assert.False(t, seen[b], "period %d", p)
		seen[b] = true
		assert.Greater(t, bitsDiffer(b, AffinityBasis(p+1)), 10, "periods %d and %d", p, p+1)
	}
}

func bitsDiffer(a, b uint64) int {
	n := 0
	for x := a ^ b; x != 0; x &= x - 1 {
		n++
	}
	return n
}
