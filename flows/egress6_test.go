package flows

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// egressFlowText lists the rendered flows of d that lead to IntEgressOut or sit in an egress
// table, by family.
func egressFlowText(t *testing.T, d Desired) (v4, v6 []string) {
	t.Helper()
	for _, fs := range d {
		for i := range fs.Flows {
			f := &fs.Flows[i]
			text := f.String()
			tbl := Table(f.Table)
			egress := strings.Contains(text, "goto_table:"+IntEgressOut.String()) ||
				fs.Bridge == BrInt && (tbl >= IntEgressOut && tbl <= IntEgressReply || tbl == IntEgressReplyCT)
			if !egress || f.Protocol == 0 {
				continue
			}
			if isIPv6Flow(f) {
				v6 = append(v6, fs.Key.String()+": "+text)
			} else {
				v4 = append(v4, fs.Key.String()+": "+text)
			}
		}
	}
	return v4, v6
}

// A dual-stack pod selected per family: its IPv4 connections follow the IPv4 egress IP, its
// IPv6 ones the IPv6 egress IP; no flow mixes the families (an IPv4 flow never names an IPv6
// egress IP's id or zone, an IPv6 flow never the IPv4 ones).
func TestEgress6PerFamily(t *testing.T) {
	st := GoldenStates()["node1-dual-stack-egress6"]
	d, err := Build(st)
	require.NoError(t, err)
	v4, v6 := egressFlowText(t, d)
	zone4 := fmt.Sprintf("zone=%d,nat", ZoneEgress)
	zone6 := fmt.Sprintf("zone=%d,nat", ZoneEgress6)
	for _, l := range v4 {
		assert.NotContains(t, l, zone6, l)
		assert.NotContains(t, l, "0a:5f:", l)
	}
	for _, l := range v6 {
		assert.NotContains(t, l, zone4, l)
		assert.NotContains(t, l, "0a:5e:", l)
		assert.NotContains(t, l, "0xc0000232", "the IPv4 egress IP's id in an IPv6 flow: %s", l)
	}
	pod := strings.Join(d[Key{Kind: KindPod, Namespace: "demo", Name: "echo-c"}].FlowLines(), "\n")
	// IPv4: 192.0.2.50 (0xc0000232) to 198.51.100.0/24 only; IPv6: 2001:db8::50 (id 0x50) to
	// 2001:db8:100::/48 only, its excluded /64 on the host path.
	assert.Contains(t, pod, "ip,reg0=0x1/0xf,nw_src=10.244.1.5,ct_state=+trk+new,nw_dst=198.51.100.0/24,table=60")
	assert.Contains(t, pod, "load:0xc0000232->NXM_NX_REG3[]")
	assert.Contains(t, pod, "ipv6,reg0=0x1/0xf,ipv6_src=2001:db8:244:1::5,ct_state=+trk+new,ipv6_dst=2001:db8:100::/48,table=60")
	assert.Contains(t, pod, "load:0x50->NXM_NX_CT_LABEL[32..63]")
	assert.Contains(t, pod, "ipv6_dst=2001:db8:100:ff::/64,ct_state=+trk+new,table=60,")
	assert.NotContains(t, pod, "nw_dst=2001:db8", "an IPv6 destination in an IPv4 flow")

	eg6 := strings.Join(d[Key{Kind: KindEgress, Name: "2001:db8::50"}].FlowLines(), "\n")
	assert.Contains(t, eg6, "actions=mod_dl_dst:0a:5f:00:00:00:50,set_field:192.0.2.12->tun_dst,set_tunnel:0x4,output:2",
		"to node2 over Geneve with an IPv4 underlay")
	self6 := strings.Join(d[Key{Kind: KindEgress, Name: "2001:db8::51"}].FlowLines(), "\n")
	assert.Contains(t, self6, "ct(commit,table=77,zone=64274,nat(src=2001:db8::51)")
	ann := strings.Join(d[Key{Kind: KindEgressAnnounce, Name: "2001:db8::51"}].FlowLines(), "\n")
	assert.Contains(t, ann, "nd_target=2001:db8::51,icmpv6_type=135")
	assert.Contains(t, ann, "set_field:1610612736->nd_reserved", "S|O, not R")
	assert.Empty(t, d[Key{Kind: KindEgressAnnounce, Name: "2001:db8::50"}].Flows, "node1 is not the gateway of 2001:db8::50")
}

// The reverse of TestEgressNoIPv6: a pod selected only for IPv6 (Pod.Egress nil) sends its
// IPv4 traffic the normal way: no IPv4 flow of its flow set leads to IntEgressOut.
func TestEgress6OnlyKeepsIPv4(t *testing.T) {
	st := GoldenStates()["node1-dual-stack-egress6"]
	k := Key{Kind: KindPod, Namespace: "demo", Name: "echo-c"}
	pod := st.Pods[k]
	pod.Egress = nil
	st.Pods[k] = pod
	fs, err := BuildPod(st, pod)
	require.NoError(t, err)
	n6 := 0
	for i := range fs.Flows {
		f := &fs.Flows[i]
		if !strings.Contains(f.String(), "goto_table:"+IntEgressOut.String()) {
			continue
		}
		require.True(t, isIPv6Flow(f), "an IPv4 flow to the egress path: %s", f.String())
		n6++
	}
	assert.Equal(t, 1, n6, "the IPv6 egress flow (2001:db8:100::/48)")
}

// The IPv6 egress path of br-int's base exists on every node that runs IPv6, with or without an
// IPv6 egress IP (as the IPv4 path; a restarted agent writes the same base); an IPv4-only node
// programs nothing of an IPv6 egress IP.
func TestEgress6Gating(t *testing.T) {
	base6 := func(st *State) int {
		fs, err := BuildIntBase(st)
		require.NoError(t, err)
		n := 0
		for i := range fs.Flows {
			f := &fs.Flows[i]
			if isIPv6Flow(f) && (strings.Contains(f.String(), "tun_id=0x4") || Table(f.Table) == IntEgressReply) {
				n++
			}
		}
		return n
	}
	ds := GoldenStates()["node1-dual-stack-egress"] // IPv4 egress IPs only
	assert.Equal(t, 4, base6(ds), "the 4 IntEgressReply twins (VNI 4 and 5 are classified in the node flow sets)")
	ds.Egress[netip.MustParseAddr("2001:db8::50")] = EgressIP{IP: netip.MustParseAddr("2001:db8::50"), Policy: "p", Gateway: "node1"}
	assert.Equal(t, 4, base6(ds))
	// The IPv6 classification of VNI 4 and 5 from node2 is in node2's flow set.
	nfs, err := BuildNode(ds, ds.Nodes["node2"])
	require.NoError(t, err)
	n := 0
	for i := range nfs.Flows {
		if f := &nfs.Flows[i]; isIPv6Flow(f) && (strings.Contains(f.String(), "tun_id=0x4") || strings.Contains(f.String(), "tun_id=0x5")) {
			n++
		}
	}
	assert.Equal(t, 2, n, "VNI 4 and 5 from node2, IPv6")

	v4only := GoldenState()
	e6 := EgressIP{IP: netip.MustParseAddr("2001:db8::50"), Policy: "p", Gateway: "node1"}
	v4only.Egress = map[netip.Addr]EgressIP{e6.IP: e6}
	assert.Zero(t, base6(v4only))
	for _, b := range []func(*State, EgressIP) (*FlowSet, error){BuildEgress, BuildEgressAnnounce} {
		fs, err := b(v4only, e6)
		require.NoError(t, err)
		assert.Empty(t, fs.Flows, "an IPv4-only node")
	}
}

func TestEgressIDAndMAC(t *testing.T) {
	assert.Equal(t, uint32(0xc0000232), EgressID(netip.MustParseAddr("192.0.2.50")))
	assert.Equal(t, uint32(0xbeef0050), EgressID(netip.MustParseAddr("2001:db8::beef:50")))
	assert.Equal(t, "0a:5e:c0:00:02:32", EgressMAC(netip.MustParseAddr("192.0.2.50")).String())
	assert.Equal(t, "0a:5f:be:ef:00:50", EgressMAC(netip.MustParseAddr("2001:db8::beef:50")).String())
}

// The stateless reply path of an IPv6 egress IP (EgressIP.ReplyBlocks) matches ipv6_dst and the
// block under a mask in IntEgressReply and tunnels to the pod's node like the IPv4 one; the
// node flow set classifies VNI 6 with an inner IPv6 packet too.
func TestEgress6ReplyBlocks(t *testing.T) {
	st := GoldenStates()["node1-dual-stack-egress6"]
	var e6 EgressIP
	for _, e := range st.Egress {
		if e.IP.Is6() {
			e6 = e
		}
	}
	require.True(t, e6.IP.IsValid(), "the golden state has an IPv6 egress IP")
	e6.Gateway = "node1"
	e6.ReplyBlocks = []EgressReplyBlock{{First: 2048, Size: 512, Node: "node2"}, {First: 1024, Size: 512, Node: "node1"}}
	fs, err := BuildEgress(st, e6)
	require.NoError(t, err)
	var got []string
	for i := range fs.Flows {
		if f := &fs.Flows[i]; Table(f.Table) == IntEgressReply && strings.Contains(f.String(), "tp_dst=0x") {
			got = append(got, f.String())
		}
	}
	require.Len(t, got, 4, "2 blocks x TCP, UDP: %v", got)
	for _, s := range got {
		assert.Contains(t, s, "ipv6_dst="+e6.IP.String())
		switch {
		case strings.Contains(s, "tp_dst=0x800/0xfe00"):
			assert.Contains(t, s, "set_tunnel:0x6")
		case strings.Contains(s, "tp_dst=0x400/0xfe00"):
			assert.Contains(t, s, "resubmit(,53)")
		default:
			t.Errorf("unexpected block flow %s", s)
		}
	}
	nfs, err := BuildNode(st, st.Nodes["node2"])
	require.NoError(t, err)
	n := 0
	for i := range nfs.Flows {
		if f := &nfs.Flows[i]; isIPv6Flow(f) && strings.Contains(f.String(), "tun_id=0x6") {
			n++
		}
	}
	assert.Equal(t, 1, n, "VNI 6 from node2, inner IPv6")
}
