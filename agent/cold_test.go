package agent

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// A full sync into a bridge that holds none of the agent's flows is written in bundles of at most
// coldChunk flow sets, with the same result as one bundle; a flow set the switch rejects is
// isolated within its chunk. A full sync into a bridge that holds the agent's flows stays one
// atomic bundle per bridge.
func TestColdBridgeWrittenInChunks(t *testing.T) {
	defer func(n int) { coldChunk = n }(coldChunk)
	coldChunk = 3

	// The same cluster into one-bundle bridges (coldChunk large) as the reference.
	ref := newFixture(t)
	coldChunk = 1 << 30
	ref.seed(ref.r, 10)
	require.NoError(t, ref.sync())
	exBundles, _ := ref.ex.Applied()
	require.Equal(t, 1, exBundles)
	coldChunk = 3

	f := newFixture(t)
	f.seed(f.r, 10)
	f.ex.RejectLines("nat(dst=10.244.2.4:8080)") // svc3's remote endpoint
	require.NoError(t, f.sync(), "a rejected flow set does not fail the sync")
	exBundles, _ = f.ex.Applied()
	inBundles, _ := f.in.Applied()
	// br-ex: 10 service ports + base + node kinds, by 3, plus the isolation of svc3's chunk.
	assert.GreaterOrEqual(t, exBundles, 4, "br-ex written in chunks")
	assert.Equal(t, 4, f.ex.Encoded(), "each chunk of br-ex encoded ahead of its write (EncodedBundler)")
	assert.Equal(t, 1, inBundles, "br-int: 3 flow sets, one bundle")
	applied := f.r.Applied(flows.BrEx)
	_, ok := applied[svcKey("svc3")]
	assert.False(t, ok, "svc3 was rejected")
	for i := 0; i < 10; i++ {
		if i == 3 {
			continue
		}
		k := svcKey(fmt.Sprintf("svc%d", i))
		assert.Equal(t, ref.r.Applied(flows.BrEx)[k], applied[k], k.String())
	}
	refIn, gotIn := ref.in.Flows(), f.in.Flows()
	assert.Equal(t, refIn, gotIn, "br-int holds the same flows")
	var want []string
	for _, l := range ref.ex.Flows() {
		if !strings.Contains(l, ref.r.Applied(flows.BrEx)[svcKey("svc3")].Cookie.String()) {
			want = append(want, l)
		}
	}
	assert.Equal(t, want, f.ex.Flows(), "br-ex holds the same flows but svc3's")

	// A restarted agent whose every Service changed: the bridges are warm, one bundle each.
	f.ex.RejectLines()
	before, _ := f.ex.Applied()
	f.r = f.newReconciler()
	f.seed(f.r, 10)
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("svc%d", i)
		f.r.OnEndpointSlice(nil, makeSlice("ns1", name, name+"-b", ep(fmt.Sprintf("10.244.2.%d", 100+i), "node2")))
	}
	require.NoError(t, f.sync())
	after, _ := f.ex.Applied()
	assert.Equal(t, before+1, after, "a warm bridge gets one atomic bundle")
}
