package flows

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildBridgeText is every flow set of st on bridge b (flowText), and their warnings.
func buildBridgeText(t *testing.T, st *State, b Bridge) (string, []string) {
	t.Helper()
	d, err := Build(st)
	require.NoError(t, err)
	var sb strings.Builder
	var warnings []string
	for _, fs := range d {
		if fs.Bridge == b {
			sb.WriteString(flowText(fs))
			warnings = append(warnings, fs.Warnings...)
		}
	}
	return sb.String(), warnings
}

// Over an IPv6 underlay every tunnel field is the IPv6 one: br-ex lets in udp6 Geneve from each
// node's IPv6 InternalIP to this node's and drops the rest (also Geneve over IPv4); br-int
// classifies by tun_ipv6_src, routes both inner families with tun_ipv6_dst, records the ingress
// node in all 128 bits of ct_label and sends replies back from there; no tun_src or tun_dst is
// matched, moved or set anywhere (the egress path included: TestIPv6UnderlayEgress).
func TestIPv6UnderlayFields(t *testing.T) {
	st := goldenIPv6Underlay()
	assert.Equal(t, IPv6, st.UnderlayFamily())
	ex, warnings := buildBridgeText(t, st, BrEx)
	assert.Empty(t, warnings)
	for _, want := range []string{
		"priority=610,udp6,in_port=1,ipv6_src=2001:db8:0:2::12,ipv6_dst=2001:db8:0:2::11,tp_dst=6081,table=0,idle_timeout=0,actions=LOCAL",
		"priority=610,udp6,in_port=1,ipv6_src=2001:db8:0:2::13,ipv6_dst=2001:db8:0:2::11,tp_dst=6081,table=0,idle_timeout=0,actions=LOCAL",
		"priority=600,udp6,in_port=1,ipv6_dst=2001:db8:0:2::11,tp_dst=6081,table=0,idle_timeout=0,actions=drop",
		"priority=600,udp,in_port=1,tp_dst=6081,table=0,idle_timeout=0,actions=drop",
	} {
		assert.Contains(t, ex, want)
	}
	in, warnings := buildBridgeText(t, st, BrInt)
	assert.Empty(t, warnings)
	for _, want := range []string{
		"tun_ipv6_src=2001:db8:0:2::12,tun_id=0x1",
		"tun_ipv6_src=2001:db8:0:2::12,tun_id=0x2",
		"tun_ipv6_src=2001:db8:0:2::12,tun_id=0x3",
		"nw_dst=10.244.2.0/24,table=60,idle_timeout=0,actions=set_field:2001:db8:0:2::12->tun_ipv6_dst,set_tunnel:0x2,output:2",
		"ipv6_dst=2001:db8:244:2::/64,table=60,idle_timeout=0,actions=set_field:2001:db8:0:2::12->tun_ipv6_dst,set_tunnel:0x1,output:2",
		"nw_dst=10.244.3.0/24,table=60,idle_timeout=0,actions=set_field:2001:db8:0:2::13->tun_ipv6_dst,set_tunnel:0x1,output:2",
		"move:NXM_NX_TUN_IPV6_SRC[]->NXM_NX_CT_LABEL[0..127]",
		"actions=move:NXM_NX_CT_LABEL[0..127]->NXM_NX_TUN_IPV6_DST[],set_tunnel:0x3,output:2",
		"ct_label=0x20010db8000000020000000000000012/0xffffffffffffffffffffffffffffffff",
		"load:NXM_NX_TUN_IPV6_SRC[]->NXM_NX_TUN_IPV6_DST[],load:0x3->NXM_NX_TUN_ID[]",
	} {
		assert.Contains(t, in, want)
	}
	for _, no := range []string{"tun_src=", "->tun_dst", "NXM_NX_TUN_IPV4_SRC", "NXM_NX_TUN_IPV4_DST"} {
		assert.NotContains(t, in, no)
	}
	// No OriginNode commit: the other nodes' hosts reach pods from their pod gateway addresses.
	assert.NotContains(t, in, "load:0x8->NXM_NX_CT_MARK[0..3]")
}

// A tunnel needs one underlay family at both ends: this node refuses, with a warning and no flow,
// a peer whose underlay address is of the other family, in both directions; its other peers are
// unaffected.
func TestUnderlayFamilyMismatch(t *testing.T) {
	st := GoldenState()
	n3 := st.Nodes["node3"]
	n3.InternalIP = ip("2001:db8:0:2::13")
	st.Nodes["node3"] = n3
	for _, b := range []Bridge{BrEx, BrInt} {
		text, warnings := buildBridgeText(t, st, b)
		assert.NotContains(t, text, "2001:db8:0:2::13")
		assert.NotContains(t, text, "10.244.3.0/24")
		assert.Contains(t, text, "192.0.2.12")
		require.Len(t, warnings, 1, b)
		assert.Contains(t, warnings[0], "node node3: its underlay address 2001:db8:0:2::13 is IPv6 and this node's (192.0.2.11) is IPv4: no Geneve tunnel between them")
	}

	st = goldenIPv6Underlay()
	n3 = st.Nodes["node3"]
	n3.InternalIP = ip("192.0.2.13")
	st.Nodes["node3"] = n3
	for _, b := range []Bridge{BrEx, BrInt} {
		text, warnings := buildBridgeText(t, st, b)
		assert.NotContains(t, text, "192.0.2.13")
		assert.Contains(t, text, "2001:db8:0:2::12")
		require.Len(t, warnings, 1, b)
		assert.Contains(t, warnings[0], "node node3: its underlay address 192.0.2.13 is IPv4 and this node's (2001:db8:0:2::11) is IPv6")
	}
}

// An endpoint on a node this node does not program (refused for its underlay family, so absent
// from State.Nodes) declines the port with a reason that names the node, not "hostNetwork?": its
// pod CIDR is unknown here, not outside the cluster's.
func TestEndpointOnUnprogrammedNodeDeclined(t *testing.T) {
	st := GoldenState()
	delete(st.Nodes, "node3")
	sp := ServicePort{Namespace: "demo", Name: "web", Protocol: TCP, Family: IPv4, Port: 80, NodePort: 30080,
		Endpoints: []Endpoint{{IP: ip("10.244.2.5"), Port: 8080, NodeName: "node2"}, {IP: ip("10.244.3.5"), Port: 8080, NodeName: "node3"}}}
	sp.GroupID = NewGroupIDs().ID(sp.Key())
	fs, err := BuildServicePort(st, &sp)
	require.NoError(t, err)
	assert.Empty(t, fs.Flows)
	assert.Contains(t, fs.Declined, "1 of 2 endpoint(s) on a node this node does not program")
	assert.Contains(t, fs.Declined, "10.244.3.5:8080 on node node3")
	assert.NotContains(t, fs.Declined, "hostNetwork")

	// A hostNetwork endpoint on a programmed node keeps its own reason.
	sp.Endpoints[1] = Endpoint{IP: ip("192.0.2.12"), Port: 8080, NodeName: "node2"}
	fs, err = BuildServicePort(st, &sp)
	require.NoError(t, err)
	assert.Contains(t, fs.Declined, "outside every node's pod CIDRs (hostNetwork?): 192.0.2.12:8080")
}

// Egress over an IPv6 underlay (issue 22): the pod's node tunnels both inner families to the
// gateway with tun_ipv6_dst; the gateway accepts VNIs 4 and 5 only with a node's tun_ipv6_src,
// records it in all 128 bits of ct_label (CTLabelEgressNode6) at the SNAT and tunnels the
// un-SNATed replies back to it; a local pod's connection (label all zero) is delivered here. No
// IPv4 tunnel field appears. A gateway of the other underlay family cannot be tunnelled to: its
// egress IP's traffic is dropped, with a warning.
func TestIPv6UnderlayEgress(t *testing.T) {
	st := goldenIPv6UnderlayEgress()
	in, warnings := buildBridgeText(t, st, BrInt)
	assert.Empty(t, warnings)
	for _, want := range []string{
		"ip,reg3=0xc0000232,table=75,idle_timeout=0,actions=mod_dl_dst:0a:5e:c0:00:02:32,set_field:2001:db8:0:2::12->tun_ipv6_dst,set_tunnel:0x4,output:2",
		"ipv6,reg3=0x50,table=75,idle_timeout=0,actions=mod_dl_dst:0a:5f:00:00:00:50,set_field:2001:db8:0:2::12->tun_ipv6_dst,set_tunnel:0x4,output:2",
		"ip,in_port=2,tun_ipv6_src=2001:db8:0:2::12,tun_id=0x4,table=0",
		"ipv6,in_port=2,tun_ipv6_src=2001:db8:0:2::13,tun_id=0x4,table=0",
		"ipv6,in_port=2,tun_ipv6_src=2001:db8:0:2::12,tun_id=0x5,table=0",
		"nat(src=192.0.2.51),exec(move:NXM_NX_TUN_IPV6_SRC[]->NXM_NX_CT_LABEL[0..127])",
		"nat(src=2001:db8:0:2::51),exec(move:NXM_NX_TUN_IPV6_SRC[]->NXM_NX_CT_LABEL[0..127])",
		"priority=200,ipv6,ct_state=+trk+est+rpl,ct_label=0x0/0xffffffffffffffffffffffffffffffff,table=78",
		"priority=11,ipv6,ct_state=+trk+est+rpl,table=78,idle_timeout=0,actions=move:NXM_NX_CT_LABEL[0..127]->NXM_NX_TUN_IPV6_DST[],set_tunnel:0x5,output:2",
		"priority=11,ip,ct_state=+trk+rel,table=78,idle_timeout=0,actions=move:NXM_NX_CT_LABEL[0..127]->NXM_NX_TUN_IPV6_DST[],set_tunnel:0x5,output:2",
	} {
		assert.Contains(t, in, want)
	}
	for _, no := range []string{"tun_src=", "->tun_dst", "NXM_NX_TUN_IPV4_SRC", "NXM_NX_TUN_IPV4_DST", "NXM_NX_CT_LABEL[0..31]"} {
		assert.NotContains(t, in, no)
	}
	// A gateway whose underlay is IPv4 (a mixed-family cluster): dropped, with a warning.
	n3 := st.Nodes["node3"]
	n3.InternalIP = goldenIP("192.0.2.13")
	st.Nodes["node3"] = n3
	fs, err := BuildEgress(st, st.Egress[goldenIP("192.0.2.53")])
	require.NoError(t, err)
	require.Len(t, fs.Flows, 1)
	assert.Contains(t, fs.Flows[0].String(), "reg3=0xc0000235")
	assert.Contains(t, fs.Flows[0].String(), "drop")
	require.Len(t, fs.Warnings, 1)
	assert.Contains(t, fs.Warnings[0], "egress IP 192.0.2.53: gateway node node3: its underlay address 192.0.2.13 is IPv4 and this node's (2001:db8:0:2::11) is IPv6")
}
