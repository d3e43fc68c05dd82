package agent

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// A flow set that Open vSwitch rejects does not block the others (field case C33): the rest of
// the bundle is applied, the rejected Service port keeps its installed version and gets one
// SourceIPRejected Event, the metrics count it, partial syncs do not send it again, the next full
// sync retries it, and once it is accepted the rejection is cleared.
func TestRejectedFlowSetIsolated(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 4)
	require.NoError(t, f.sync())
	before := f.r.Applied(flows.BrEx)

	// svc1 gets an endpoint whose bucket the switch refuses; svc2 changes in the same sync.
	f.ex.RejectLines("nat(dst=10.244.2.99:8080)")
	f.r.OnEndpointSlice(nil, makeSlice("ns1", "svc1", "svc1-b", ep("10.244.2.99", "node2")))
	f.r.OnEndpointSlice(nil, makeSlice("ns1", "svc2", "svc2-b", ep("10.244.2.77", "node2")))
	require.NoError(t, f.sync(), "a rejected flow set does not fail the sync")
	after := f.r.Applied(flows.BrEx)
	assert.Equal(t, before[svcKey("svc1")], after[svcKey("svc1")], "svc1 keeps its installed version")
	assert.NotEqual(t, before[svcKey("svc2")].Cookie, after[svcKey("svc2")].Cookie, "svc2's change is applied")
	flowsNow := strings.Join(f.ex.Flows(), "\n")
	assert.Contains(t, flowsNow, before[svcKey("svc1")].Cookie.String(), "svc1's old flows stay")
	assert.Contains(t, flowsNow, after[svcKey("svc2")].Cookie.String())
	assert.NotContains(t, flowsNow, before[svcKey("svc2")].Cookie.String())
	assert.Equal(t, 3, f.ex.GroupBuckets(after[svcKey("svc2")].Groups[0]), "svc2's group has its new endpoint")
	assert.Equal(t, 2, f.ex.GroupBuckets(after[svcKey("svc1")].Groups[0]), "svc1's group is the old one")
	rejectedEvents := func() []string {
		var out []string
		for _, m := range f.events.msgs {
			if strings.HasPrefix(m, ReasonRejected+": ") {
				out = append(out, m)
			}
		}
		return out
	}
	require.Len(t, rejectedEvents(), 1)
	assert.Contains(t, rejectedEvents()[0], "Open vSwitch rejected the flows of service-port/ns1/svc1:http/TCP")
	assert.Contains(t, rejectedEvents()[0], "OFPBAC_BAD_ARGUMENT")
	m := f.r.metrics
	assert.Equal(t, 1.0, testutil.ToFloat64(m.RejectedFlowSets.WithLabelValues("service-port")))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.RejectedNow))
	assert.True(t, f.r.Status().FailingSince.IsZero(), "syncs are not failing: /readyz stays ready")

	// No retry storm: partial syncs (another Service changes, or nothing) do not send svc1 again.
	rej := f.ex.Rejections()
	f.r.OnEndpointSlice(nil, makeSlice("ns1", "svc0", "svc0-b", ep("10.244.2.55", "node2")))
	require.NoError(t, f.sync())
	require.NoError(t, f.sync())
	assert.Equal(t, rej, f.ex.Rejections(), "svc1 is not retried by partial syncs")
	assert.NotEqual(t, before[svcKey("svc0")].Cookie, f.r.Applied(flows.BrEx)[svcKey("svc0")].Cookie)

	// The next full sync retries it (rejected again: no second Event, no second count).
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.Greater(t, f.ex.Rejections(), rej, "the full sync retries svc1")
	assert.Len(t, rejectedEvents(), 1)
	assert.Equal(t, 1.0, testutil.ToFloat64(m.RejectedFlowSets.WithLabelValues("service-port")))
	assert.Equal(t, before[svcKey("svc1")].Cookie, f.r.Applied(flows.BrEx)[svcKey("svc1")].Cookie)
	assert.Contains(t, strings.Join(f.ex.Flows(), "\n"), before[svcKey("svc1")].Cookie.String(), "the full sync keeps svc1's old flows")

	// Once the switch takes it, the next full sync applies it and clears the rejection.
	f.ex.RejectLines()
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.NotEqual(t, before[svcKey("svc1")].Cookie, f.r.Applied(flows.BrEx)[svcKey("svc1")].Cookie)
	assert.Equal(t, 3, f.ex.GroupBuckets(f.r.Applied(flows.BrEx)[svcKey("svc1")].Groups[0]))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.RejectedNow))
	assert.NotContains(t, strings.Join(f.ex.Flows(), "\n"), before[svcKey("svc1")].Cookie.String())

	// The bridges hold exactly what a fresh agent writes.
	g := newFixture(t)
	g.seed(g.r, 4)
	for _, s := range [][3]string{{"svc1", "svc1-b", "10.244.2.99"}, {"svc2", "svc2-b", "10.244.2.77"}, {"svc0", "svc0-b", "10.244.2.55"}} {
		g.r.OnEndpointSlice(nil, makeSlice("ns1", s[0], s[1], ep(s[2], "node2")))
	}
	require.NoError(t, g.sync())
	assert.Equal(t, g.ex.Flows(), f.ex.Flows())
	assert.Equal(t, g.ex.Groups(), f.ex.Groups())
}

// A rejected Service port that is new (nothing installed) stays out; removing it clears it.
func TestRejectedNewServiceThenRemoved(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 2)
	require.NoError(t, f.sync())
	f.ex.RejectLines("nat(dst=10.244.2.98:8080)")
	bad := makeService("ns1", "bad", 30100)
	f.r.OnService(nil, bad)
	slice := makeSlice("ns1", "bad", "bad-a", ep("10.244.2.98", "node2"))
	f.r.OnEndpointSlice(nil, slice)
	f.r.OnEndpointSlice(nil, makeSlice("ns1", "svc0", "svc0-b", ep("10.244.2.55", "node2")))
	require.NoError(t, f.sync())
	_, ok := f.r.Applied(flows.BrEx)[svcKey("bad")]
	assert.False(t, ok, "nothing applied for the rejected Service")
	assert.Equal(t, 1.0, testutil.ToFloat64(f.r.metrics.RejectedNow))
	assert.NotContains(t, strings.Join(f.ex.Flows(), "\n"), "tp_dst=30100")

	f.r.OnEndpointSlice(slice, nil)
	f.r.OnService(bad, nil)
	require.NoError(t, f.sync())
	assert.Equal(t, 0.0, testutil.ToFloat64(f.r.metrics.RejectedNow), "a rejected key that is gone is forgotten")
}
