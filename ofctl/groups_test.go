package ofctl_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ovstest"
)

// bigService builds the service-port flow set of demo/big:http/TCP with n endpoints in the pod
// CIDRs of node2 and node3 (port 8080 + i/500, so that n may exceed the CIDRs' addresses).
func bigService(t testing.TB, n int) *flows.FlowSet {
	t.Helper()
	eps := make([]flows.Endpoint, 0, n)
	for i := 0; i < n; i++ {
		node := 2 + i%2
		eps = append(eps, flows.Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, byte(node), byte(1 + i/2%250)}),
			Port: uint16(8080 + i/500), NodeName: fmt.Sprintf("node%d", node)})
	}
	return servicePortOf(t, eps)
}

func servicePortOf(t testing.TB, eps []flows.Endpoint) *flows.FlowSet {
	t.Helper()
	return servicePortNamed(t, "big", 80, 30080, eps)
}

// servicePortNamed is the flow set of TCP Service port demo/name with port, nodePort and eps.
func servicePortNamed(t testing.TB, name string, port, nodePort uint16, eps []flows.Endpoint) *flows.FlowSet {
	t.Helper()
	sp := flows.ServicePort{Namespace: "demo", Name: name, PortName: "http", Protocol: flows.TCP, Port: port, NodePort: nodePort, Endpoints: eps}
	sp.GroupID = flows.NewGroupIDs().ID(sp.Key())
	mac, _ := net.ParseMAC("02:00:c0:00:02:0b")
	st := flows.NewState("node1", flows.Ports{ExUplink: 1, ExPatch: 2, IntPatch: 1, IntTunnel: 2, ExMAC: mac},
		[]netip.Addr{netip.MustParseAddr("192.0.2.11")},
		[]flows.Node{
			{Name: "node1", InternalIP: netip.MustParseAddr("192.0.2.11"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}},
			{Name: "node2", InternalIP: netip.MustParseAddr("192.0.2.12"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}},
			{Name: "node3", InternalIP: netip.MustParseAddr("192.0.2.13"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}},
		},
		nil, []flows.ServicePort{sp})
	fs, err := flows.BuildServicePort(st, &sp)
	require.NoError(t, err)
	return fs
}

// A 2,000-bucket group goes into OVS 3.1 in one bundle (add_or_mod + insert_bucket messages),
// is read back with all its buckets, and survives the deep repair and FullDiff; one group
// message of 750 such buckets is refused (docs/lab-facts.md#fact-9) and reported as Rejected.
func TestLargeGroupBundle(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br-ex", "eth0")
	of := ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex"))

	fs := bigService(t, 2000)
	gid := fs.Groups[0].ID
	p := flows.FullDiff(flows.BrEx, []*flows.FlowSet{fs}, flows.Inventory{})
	lines := p.Lines()
	inserts := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "group insert_bucket ") {
			inserts++
		}
	}
	assert.Equal(t, 7, inserts, "2,000 buckets: 256 in add_or_mod, the rest in 7 insert_bucket messages")
	require.NoError(t, of.Bundle(ctx, p.Messages()))

	inv, err := of.Inventory(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2000, inv.Buckets[gid])
	stats := sb.Run(t, "ovs-ofctl", "-O", "OpenFlow15", "dump-group-stats", sb.MgmtTarget("br-ex"), fmt.Sprintf("group_id=%d", gid))
	assert.Equal(t, 2000, strings.Count(stats, ",bucket"), "dump-group-stats shows 2,000 buckets")
	// dump-groups cannot show it: its 16-bit entry length overflows (this is why Inventory reads
	// dump-group-stats).
	desc := sb.Run(t, "ovs-ofctl", "-O", "OpenFlow15", "dump-groups", sb.MgmtTarget("br-ex"))
	assert.NotContains(t, desc, fmt.Sprintf("group_id=%d,", gid))

	// The bucket ids are the endpoints' (a trace names one of them).
	ids := map[string]bool{}
	for _, b := range fs.Groups[0].Buckets {
		ids[strconv.FormatUint(uint64(b.ID), 10)] = true
	}
	assert.Equal(t, 2000, len(ids))

	// Nothing to do in the next full sync; the deep repair re-sends the group in 8 messages and
	// keeps 2,000 buckets.
	again := flows.FullDiff(flows.BrEx, []*flows.FlowSet{fs}, inv)
	assert.True(t, again.Empty(), "FullDiff of an installed large group: %v", again.Lines())
	again.RepairAll([]*flows.FlowSet{fs})
	require.NoError(t, of.Bundle(ctx, again.Messages()))
	inv, err = of.Inventory(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2000, inv.Buckets[gid])

	// A group cut short (a bucket removed by hand) is re-added by FullDiff.
	sb.Run(t, "ovs-ofctl", "-O", "OpenFlow15", "remove-buckets", sb.MgmtTarget("br-ex"), fmt.Sprintf("group_id=%d,command_bucket_id=last", gid))
	inv, err = of.Inventory(ctx)
	require.NoError(t, err)
	require.Equal(t, 1999, inv.Buckets[gid])
	fix := flows.FullDiff(flows.BrEx, []*flows.FlowSet{fs}, inv)
	require.Len(t, fix.Add, 1)
	require.NoError(t, of.Bundle(ctx, fix.Messages()))
	inv, err = of.Inventory(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2000, inv.Buckets[gid])

	// The per-message limit: 740 buckets in one message are taken, 750 refused.
	for n, ok := range map[int]bool{740: true, 750: false} {
		one := flows.Plan{Bridge: flows.BrEx, Add: []*flows.FlowSet{bigService(t, n)}, BucketsPerMessage: 1000}
		err := of.Bundle(ctx, one.Messages())
		if ok {
			assert.NoError(t, err, "%d buckets in one message", n)
			continue
		}
		var oe *ofctl.Error
		require.ErrorAs(t, err, &oe, "%d buckets in one message", n)
		assert.Contains(t, oe.Stderr, "OFPGMFC_BAD_BUCKET")
		assert.True(t, oe.Rejected())
	}

	// A switch that cannot be reached is not a rejection.
	bad := ofctl.NewOpenFlow("br-ex", "unix:"+sb.RunDir+"/nothing.mgmt")
	err = bad.Bundle(ctx, p.Messages()[:1])
	var oe *ofctl.Error
	require.ErrorAs(t, err, &oe)
	assert.False(t, oe.Rejected(), oe.Stderr)
}

var usingBucket = regexp.MustCompile(`-> using bucket (\d+)`)

// traceChoices loads group lines (and a flow sending every IP packet of eth0 to the group) into
// br0 and returns, for each of the clients, the bucket id OVS picks (ofproto/trace).
func traceChoices(b testing.TB, sb *ovstest.Sandbox, of *ofctl.OpenFlow, groupLines []string, gid uint32, clients []netip.AddrPort) []uint32 {
	b.Helper()
	ctx := context.Background()
	require.NoError(b, of.BundleText(ctx, append(groupLines, fmt.Sprintf("flow add table=0,priority=10,ip,actions=group:%d", gid))))
	out := make([]uint32, len(clients))
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	sem := make(chan struct{}, 2)
	for i, c := range clients {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			tr, err := of.Trace(ctx, fmt.Sprintf("in_port=1,tcp,nw_src=%s,tcp_src=%d,nw_dst=192.0.2.11,tcp_dst=30080", c.Addr(), c.Port()), nil)
			if err != nil {
				errs[i] = err
				return
			}
			m := usingBucket.FindStringSubmatch(tr)
			if m == nil {
				errs[i] = fmt.Errorf("no bucket in trace of %s", c)
				return
			}
			id, _ := strconv.ParseUint(m[1], 10, 32)
			out[i] = uint32(id)
		}()
	}
	wg.Wait()
	require.NoError(b, errors.Join(errs...))
	return out
}

// groupLinesOf returns the group messages of fs.
func groupLinesOf(fs *flows.FlowSet) []string {
	var out []string
	p := flows.Plan{Bridge: flows.BrEx, Add: []*flows.FlowSet{fs}}
	for _, l := range p.Lines() {
		if strings.HasPrefix(l, "group ") {
			out = append(out, l)
		}
	}
	return out
}

// endpointOf maps each bucket id of fs's group to its endpoint (the bucket's nat(dst=...)).
func endpointOf(fs *flows.FlowSet) map[uint32]string {
	out := map[uint32]string{}
	re := regexp.MustCompile(`bucket=bucket_id:(\d+),[^,]*,actions=ct\(commit,table=\d+,zone=\d+,nat\(dst=([0-9.:]+)\)`)
	for _, m := range re.FindAllStringSubmatch(groupLinesOf(fs)[0], -1) {
		id, _ := strconv.ParseUint(m[1], 10, 32)
		out[uint32(id)] = m[2]
	}
	return out
}

// positional renumbers fs's buckets 0..n-1 in endpoint order, as the agent did before bucket ids
// were derived from the endpoint (for comparison).
func positional(fs *flows.FlowSet) *flows.FlowSet {
	g := fs.Groups[0]
	g.Buckets = append([]flows.Bucket{}, g.Buckets...)
	// Endpoint order is the address order of the endpoints.
	eps := endpointOf(fs)
	slicesSortByEndpoint(g.Buckets, eps)
	for i := range g.Buckets {
		g.Buckets[i].ID = uint32(i)
	}
	out := &flows.FlowSet{Key: fs.Key, Bridge: fs.Bridge, Groups: []flows.OFGroup{g}}
	if err := out.Finish(); err != nil {
		panic(err)
	}
	return out
}

func slicesSortByEndpoint(bs []flows.Bucket, eps map[uint32]string) {
	key := func(b flows.Bucket) netip.AddrPort { return netip.MustParseAddrPort(eps[b.ID]) }
	for i := 1; i < len(bs); i++ {
		for j := i; j > 0 && key(bs[j]).Compare(key(bs[j-1])) < 0; j-- {
			bs[j], bs[j-1] = bs[j-1], bs[j]
		}
	}
}

// moved returns the share of clients whose endpoint differs between two traces.
func moved(before, after []uint32, epBefore, epAfter map[uint32]string) float64 {
	n := 0
	for i := range before {
		if epBefore[before[i]] != epAfter[after[i]] {
			n++
		}
	}
	return float64(n) / float64(len(before))
}

// BenchmarkBucketRemap measures with OVS 3.1's own selection (ofproto/trace of 2,000 distinct
// client ip:ports, dummy datapath) the share of new connections whose endpoint changes when one
// endpoint is added to (remapped-add) or removed from (remapped-remove) a group of N endpoints,
// with the agent's bucket ids (hash of the endpoint) and, for comparison, with position ids
// (remapped-add-positional, the agent's old scheme; the new endpoint sorts first). The ideal is
// 1/(N+1) for an add and 1/N for a remove. Run alone:
//
//	go test -count=1 -run '^$' -bench BucketRemap -benchtime 1x ./ofctl/
func BenchmarkBucketRemap(b *testing.B) {
	const clients = 2000
	cs := make([]netip.AddrPort, clients)
	for i := range cs {
		cs[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, byte(100 + i/250), byte(1 + i%250)}), uint16(20000+i*7))
	}
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			sb := ovstest.StartDummy(b)
			sb.AddBridge(b, "br0", "eth0")
			of := ofctl.NewOpenFlow("br0", sb.MgmtTarget("br0"))
			var add, remove, addPos float64
			for i := 0; i < b.N; i++ {
				eps := make([]flows.Endpoint, 0, n+1)
				for j := 0; j <= n; j++ {
					eps = append(eps, flows.Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, byte(2 + j%2), byte(10 + j)}), Port: 8080})
				}
				// The added endpoint sorts first (10.244.2.9).
				extra := flows.Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, 2, 9}), Port: 8080}
				base, withOne, without := servicePortOf(b, eps[:n]), servicePortOf(b, append([]flows.Endpoint{extra}, eps[:n]...)), servicePortOf(b, eps[1:n])
				gid := base.Groups[0].ID
				t0 := traceChoices(b, sb, of, groupLinesOf(base), gid, cs)
				tAdd := traceChoices(b, sb, of, groupLinesOf(withOne), gid, cs)
				tRem := traceChoices(b, sb, of, groupLinesOf(without), gid, cs)
				add += moved(t0, tAdd, endpointOf(base), endpointOf(withOne))
				remove += moved(t0, tRem, endpointOf(base), endpointOf(without))
				pb, pa := positional(base), positional(withOne)
				p0 := traceChoices(b, sb, of, groupLinesOf(pb), gid, cs)
				pAdd := traceChoices(b, sb, of, groupLinesOf(pa), gid, cs)
				addPos += moved(p0, pAdd, endpointOf(pb), endpointOf(pa))
			}
			b.ReportMetric(add/float64(b.N), "remapped-add")
			b.ReportMetric(1/float64(n+1), "ideal-add")
			b.ReportMetric(remove/float64(b.N), "remapped-remove")
			b.ReportMetric(1/float64(n), "ideal-remove")
			b.ReportMetric(addPos/float64(b.N), "remapped-add-positional")
		})
	}
}
