package flows

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flowsOf returns the flow lines of the flow set k of d that contain every part.
func flowsOf(t *testing.T, d Desired, k Key, parts ...string) []string {
	t.Helper()
	fs, ok := d[k]
	require.True(t, ok, "no flow set %s", k)
	var out []string
	for _, l := range fs.FlowLines() {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
			out = append(out, l)
		}
	}
	return out
}

// A dual-stack pod's Neighbor Solicitations from a link-local address (its unicast reachability
// probes of the gateway) go to IntNDResponder, from its own port and MAC only; a pod without an
// IPv6 address gets no such flow.
func TestIPv6LinkLocalSolicitation(t *testing.T) {
	d, err := Build(GoldenStates()["node1-dual-stack-gateway"])
	require.NoError(t, err)
	pod := Key{Kind: KindPod, Namespace: "demo", Name: "echo-c"}
	ll := flowsOf(t, d, pod, "ipv6_src=fe80::/64")
	require.Len(t, ll, 1)
	assert.Contains(t, ll[0], "priority=360,icmp6,in_port=3,dl_src=0a:58:0a:f4:01:05,ipv6_src=fe80::/64,icmpv6_type=135,icmpv6_code=0")
	assert.Contains(t, ll[0], "goto_table:"+IntNDResponder.String())

	d, err = Build(GoldenState())
	require.NoError(t, err)
	assert.Empty(t, flowsOf(t, d, pod, "fe80::"), "an IPv4-only pod")
}

// A Neighbor Solicitation without a Source Link-Layer Address option: a multicast one is dropped
// with its own reason (its advertisement would need a TLL option that an in-place rewrite cannot
// add); a unicast one is answered without touching the options (no nd_options_type, no
// IntNDAdvert: the packet has no option to rewrite).
func TestIPv6SolicitationWithoutSLL(t *testing.T) {
	d, err := Build(GoldenStates()["node1-dual-stack-gateway"])
	require.NoError(t, err)
	base := Key{Kind: KindIntBase}
	mc := flowsOf(t, d, base, "nd_sll=00:00:00:00:00:00", "ipv6_dst=ff00::/8")
	require.Len(t, mc, 1)
	assert.Contains(t, mc[0], "priority=290,")
	assert.Contains(t, mc[0], "table="+IntNDResponder.String())
	r, ok := DropAt(BrInt, IntNDResponder, prioNDNoSLLMulticast, KindIntBase)
	require.True(t, ok)
	assert.Equal(t, DropNDNoSLL, r.Reason)

	uc := flowsOf(t, d, base, "nd_sll=00:00:00:00:00:00", "priority=280,")
	require.Len(t, uc, 1)
	assert.NotContains(t, uc[0], "nd_options_type", "no option to turn into a TLL one: %s", uc[0])
	assert.NotContains(t, uc[0], "goto_table:"+IntNDAdvert.String())
	assert.Contains(t, uc[0], "set_field:136->icmpv6_type")
	assert.Contains(t, uc[0], "set_field:3758096384->nd_reserved")
	assert.True(t, strings.HasSuffix(uc[0], "IN_PORT"), uc[0])

	// The answer of a solicitation with the option is unchanged.
	an := flowsOf(t, d, base, "priority=100,icmp6", "table="+IntNDResponder.String())
	require.Len(t, an, 1)
	assert.Contains(t, an[0], "set_field:2->nd_options_type")
}

// IPv6 OriginNode: another node's host reaching a local IPv6 pod from its IPv6 InternalIP (a
// socket bound to it) is committed with OriginNode and that node's underlay address in
// ct_label, as IPv4's from its InternalIP; the replies go back over Geneve (VNI 1). A node
// without an IPv6 InternalIP, or this node without a gateway port, gets no such flow.
func TestIPv6OriginNode(t *testing.T) {
	st := GoldenStates()["node1-dual-stack-gateway"]
	d, err := Build(st)
	require.NoError(t, err)
	commit := flowsOf(t, d, Key{Kind: KindNode, Name: "node2"}, "ipv6_src=2001:db8::12")
	require.Len(t, commit, 1)
	for _, want := range []string{"table=" + IntTunnelCT.String(), "priority=300,", "ct_state=+trk+new", "tun_src=192.0.2.12",
		"ipv6_dst=2001:db8:244:1::/64", "ct(commit,zone=64257,exec(" + string(OriginNode.Load().AppendText(nil)),
		"goto_table:" + IntL3Forwarding.String()} {
		assert.Contains(t, commit[0], want)
	}
	assert.Empty(t, flowsOf(t, d, Key{Kind: KindNode, Name: "node3"}, "ipv6_src="), "node3 is IPv4-only")
	replies := flowsOf(t, d, Key{Kind: KindGateway}, "ipv6", string(OriginNode.Match().AppendText(nil)))
	require.Len(t, replies, 2, "+est+rpl and +rel")
	for _, l := range replies {
		assert.Contains(t, l, "set_tunnel:0x1,output:2")
	}

	n := st.Nodes["node2"]
	n.InternalIPv6 = netip.Addr{}
	st.Nodes["node2"] = n
	d, err = Build(st)
	require.NoError(t, err)
	assert.Empty(t, flowsOf(t, d, Key{Kind: KindNode, Name: "node2"}, "ipv6_src=2001:db8::12"))
}
