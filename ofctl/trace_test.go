package ofctl

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// TestParseTrace parses real ofproto/trace outputs of the demo lab (OVS 3.1, userspace
// datapath): the client's SYN on node1 to an endpoint on node2, and the reply arriving back on
// node1.
func TestParseTrace(t *testing.T) {
	b, err := os.ReadFile("testdata/trace-remote.txt")
	require.NoError(t, err)
	r := ParseTrace(string(b), nil)
	var path []string
	for _, s := range r.Steps {
		path = append(path, s.Bridge.String()+"/"+s.Table.Name(s.Bridge))
	}
	// The encapsulated packet's own trace through br-ex (NORMAL, flooded into the patch port) is
	// not the packet's path.
	assert.Equal(t, []string{"br-ex/ExClassifier", "br-ex/ExServiceLB", "br-ex/ExServiceCT", "br-ex/ExServiceOut",
		"br-int/IntClassifier", "br-int/IntL3Forwarding"}, path)
	ct := r.Steps[2]
	assert.Equal(t, int64(4222283821), ct.Bucket)
	assert.True(t, flows.OwnedGroup(ct.Group))
	assert.Equal(t, flows.KindServicePort, ct.Cookie.Kind())
	assert.True(t, ct.Has("nat(dst=10.244.2.5:8080)"), "the chosen bucket's actions are the step's")
	assert.Equal(t, "ct_state=+new+trk,tcp,nw_dst=203.0.113.100,tp_dst=80", ct.Match)
	assert.Equal(t, []string{"goto_table:40"}, r.Steps[0].Actions)
	assert.Equal(t, "10.244.2.5:8080", r.NATDst)
	assert.Equal(t, "192.0.2.12", r.TunDst)
	assert.Equal(t, "0x2", r.VNI)
	assert.False(t, r.Dropped())
	require.Len(t, r.DatapathActions, 3, "one per recirculation")
	assert.Equal(t, "ct(zone=64256,nat),recirc(0x14)", r.DatapathActions[0])
	assert.Equal(t, r.DatapathActions[2], r.Final)

	b, err = os.ReadFile("testdata/trace-reply.txt")
	require.NoError(t, err)
	r = ParseTrace(string(b), nil)
	last, ok := r.Last()
	require.True(t, ok)
	// After the recirculation ofproto/trace names br-int; the table is br-ex's.
	assert.Equal(t, flows.BrEx, last.Bridge)
	assert.Equal(t, flows.ExServiceReply, last.Table)

	// Bridges the map does not name have no steps.
	r = ParseTrace(string(b), map[string]flows.Bridge{"br-ex": flows.BrEx})
	for _, s := range r.Steps {
		assert.Equal(t, flows.BrEx, s.Bridge)
	}
	assert.Empty(t, ParseTrace("", nil).Steps)
	assert.True(t, ParseTrace("", nil).Dropped())
}

// An IPv6 endpoint's nat(dst=[ADDR]:PORT) is read as NATDst (netip.ParseAddrPort's form).
func TestParseTraceIPv6NAT(t *testing.T) {
	r := ParseTrace("bridge(\"br-ex\")\n-----------\n 0. in_port=1, priority 100\n    ct(commit,zone=64272,nat(dst=[2001:db8:244:2::5]:8080))\n\nFinal flow: unchanged\nDatapath actions: drop\n", nil)
	assert.Equal(t, "[2001:db8:244:2::5]:8080", r.NATDst)
}

// Over an IPv6 underlay the tunnel destination is read from set_field ...->tun_ipv6_dst and from
// the tnl_push's ipv6() header.
func TestParseTraceIPv6Underlay(t *testing.T) {
	out := `bridge("br-int")
---------------
 0. in_port=3, priority 200, cookie 0x5c02000000000000
    set_field:2001:db8:0:2::12->tun_ipv6_dst
    set_field:0x2->tun_id
    output:2

Final flow: unchanged
Datapath actions: set(tunnel(tun_id=0x2,ipv6_dst=2001:db8:0:2::12,ttl=64,tp_dst=6081,flags(df|key))),1
`
	tr := ParseTrace(out, nil)
	assert.Equal(t, "2001:db8:0:2::12", tr.TunDst)
	out2 := out + "Datapath actions: tnl_push(tnl_port(6),header(size=70,type=5,eth(dst=02:00:c0:00:02:0c,src=02:00:c0:00:02:0b,dl_type=0x86dd),ipv6(src=2001:db8:0:2::11,dst=2001:db8:0:2::13,label=0,proto=17,tclass=0x0,hlimit=64),udp(src=0,dst=6081,csum=0xffff),geneve(vni=0x2)),out_port(1)),2\n"
	tr = ParseTrace(out2, nil)
	assert.Equal(t, "2001:db8:0:2::13", tr.TunDst, "the datapath's tnl_push is the truth")
}
