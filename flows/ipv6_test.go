package flows

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// dualState is GoldenDualStackServices's node1 with the given Service ports instead of its own.
func dualState(svcs ...ServicePort) *State {
	st := GoldenDualStackServices()
	for k := range st.Services {
		st.DeleteService(k)
	}
	gids := NewGroupIDs()
	for _, sp := range svcs {
		sp.GroupID = gids.ID(sp.Key())
		st.SetService(sp)
	}
	return st
}

// flowText is fs's flows (without their cookies) and groups, one a line.
func flowText(fs *FlowSet) string {
	var b strings.Builder
	for i := range fs.Flows {
		f := fs.Flows[i]
		f.Cookie = 0
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	for i := range fs.Groups {
		b.WriteString(fs.Groups[i].String())
		b.WriteByte('\n')
	}
	return b.String()
}

// An IPv6 ServicePort is served on its family's addresses only: the NodePort on the IPv6
// NodePort addresses, the LB IPs and externalIPs of its family, endpoints and source ranges of
// its family; its claims keep the NodePort (shared by both families) and drop the other family's
// IPs.
func TestServicePortIPv6Family(t *testing.T) {
	sp := ServicePort{Namespace: "demo", Name: "web", PortName: "http", Protocol: TCP, Family: IPv6, Port: 80, NodePort: 30080,
		LoadBalancerIPs: []netip.Addr{ip("2001:db8:113::100"), ip("203.0.113.100")},
		ExternalIPs:     []netip.Addr{ip("2001:db8:113::101")},
		FilterSources:   true, SourceRanges: []netip.Prefix{pfx("2001:db8:51:100::1/64"), pfx("2001:db8:51::/48"), pfx("198.51.100.0/24")},
		Endpoints: []Endpoint{{IP: ip("2001:db8:244:2::5"), Port: 8080, NodeName: "node2"}, {IP: ip("10.244.2.5"), Port: 8080, NodeName: "node2"},
			{IP: ip("2001:db8:244:3::5"), Port: 0, NodeName: "node3"}}}
	assert.Equal(t, []EntryPoint{NodePortEntry(TCP, 30080),
		{Protocol: TCP, Addr: netip.MustParseAddrPort("[2001:db8:113::100]:80")},
		{Protocol: TCP, Addr: netip.MustParseAddrPort("[2001:db8:113::101]:80")}}, sp.Claims())
	eps := sp.EntryPoints([]netip.Addr{ip("192.0.2.11"), ip("2001:db8::11")})
	require.Len(t, eps, 3)
	assert.Equal(t, netip.MustParseAddrPort("[2001:db8::11]:30080"), eps[0].Addr)
	assert.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("[2001:db8:244:2::5]:8080")}, usableEndpoints(&sp))
	ranges, filter := sourceRanges(&sp)
	assert.True(t, filter)
	assert.Equal(t, []netip.Prefix{pfx("2001:db8:51::/48")}, ranges, "masked, IPv6 only, the /64 folded into the /48")
	all := sp
	all.SourceRanges = append(all.SourceRanges, pfx("::/0"))
	_, filter = sourceRanges(&all)
	assert.False(t, filter, "::/0 lets everyone in")

	st := dualState(sp)
	got := st.Services[sp.Key()]
	fs, err := BuildServicePort(st, &got)
	require.NoError(t, err)
	require.Empty(t, fs.Declined)
	txt := flowText(fs)
	for _, want := range []string{
		"priority=100,tcp6,ipv6_dst=2001:db8::11,tp_dst=30080,table=40",
		"ct(table=41,zone=64272,nat)",
		"tcp6,ct_state=+trk+new,ipv6_src=2001:db8:51::/48,ipv6_dst=2001:db8:113::100,tp_dst=80,table=41",
		"priority=95,tcp6,ct_state=+trk+new,ipv6_dst=2001:db8:113::101,tp_dst=80,table=41",
		"fields(ipv6_src,tcp_src)",
		"nat(dst=[2001:db8:244:2::5]:8080)",
	} {
		assert.Contains(t, txt, want)
	}
	assert.NotContains(t, txt, "203.0.113.100")
	assert.NotContains(t, txt, "192.0.2.11")
	assert.NotContains(t, txt, "10.244.2.5")
	for i := range fs.Flows {
		require.NoError(t, fs.Flows[i].Check(), fs.Flows[i].String())
	}
}

// A v6 endpoint outside every node's IPv6 pod CIDRs declines the IPv6 port as it does IPv4's.
func TestServicePortIPv6HostNetworkDeclined(t *testing.T) {
	sp := ServicePort{Namespace: "demo", Name: "web", Protocol: TCP, Family: IPv6, Port: 80, NodePort: 30080,
		Endpoints: []Endpoint{{IP: ip("2001:db8::12"), Port: 8080, NodeName: "node2"}}}
	st := dualState(sp)
	got := st.Services[sp.Key()]
	fs, err := BuildServicePort(st, &got)
	require.NoError(t, err)
	assert.Contains(t, fs.Declined, "[2001:db8::12]:8080")
	assert.Empty(t, fs.Flows)
}

// sessionAffinity over IPv6: the learned flow matches ipv6 and ipv6_src and names the endpoint
// by its bucket id in RegAffinityEndpoint.
func TestAffinityIPv6(t *testing.T) {
	sp := ServicePort{Namespace: "demo", Name: "sticky", Protocol: UDP, Family: IPv6, Port: 53, NodePort: 30053, AffinitySeconds: 60, AffinityPeriod: 7,
		Endpoints: []Endpoint{{IP: ip("2001:db8:244:2::6"), Port: 8053, NodeName: "node2"}, {IP: ip("2001:db8:244:3::6"), Port: 8053, NodeName: "node3"}}}
	st := dualState(sp)
	got := st.Services[sp.Key()]
	fs, err := BuildServicePort(st, &got)
	require.NoError(t, err)
	require.Len(t, fs.Learned, 2)
	ids := BucketIDs(usableEndpoints(&got))
	txt := flowText(fs)
	assert.Contains(t, txt, "fields(ipv6_src)")
	assert.Contains(t, txt, "eth_type=0x86dd,NXM_NX_REG4[]=NXM_NX_REG4[],NXM_NX_IPV6_SRC[]=NXM_NX_IPV6_SRC[]")
	for ep, id := range ids {
		tag := RegAffinityEndpoint.Load(id).AppendText(nil)
		assert.Contains(t, txt, string(tag), ep.String())
	}
	for i := range fs.Flows {
		require.NoError(t, fs.Flows[i].Check(), fs.Flows[i].String())
	}
}

// Drains and UDP fragments of IPv6 entry points: udp6/tcp6, ipv6_dst, ZoneService6.
func TestDrainAndFragmentsIPv6(t *testing.T) {
	fs, err := BuildServiceDrain(EntryPoint{Protocol: UDP, Addr: netip.MustParseAddrPort("[2001:db8::11]:30053")})
	require.NoError(t, err)
	assert.Equal(t, "priority=90,udp6,ipv6_dst=2001:db8::11,tp_dst=30053,table=40,idle_timeout=0,actions=ct(table=41,zone=64272,nat)\n", flowText(fs))
	_, err = BuildServiceDrain(NodePortEntry(TCP, 30080))
	assert.Error(t, err)
	fs, err = BuildUDPFragments(ip("2001:db8::11"))
	require.NoError(t, err)
	assert.Equal(t, "priority=300,udp6,ipv6_dst=2001:db8::11,nw_frag=yes,table=40,idle_timeout=0,actions=ct(table=41,zone=64272,nat)\n", flowText(fs))
	st := dualState(ServicePort{Namespace: "demo", Name: "dns", Protocol: UDP, Family: IPv6, Port: 53, NodePort: 30053,
		LoadBalancerIPs: []netip.Addr{ip("2001:db8:113::100")}})
	assert.Equal(t, []netip.Addr{ip("2001:db8::11"), ip("2001:db8:113::100")}, udpEntryAddrs(st))
}

// The IPv6 twins of the br-ex base flows exist only on a node that runs IPv6, and follow their
// ICMPv6 errors (Packet Too Big, Destination Unreachable, ...) through ZoneService6.
func TestExBaseIPv6Twins(t *testing.T) {
	v4, err := BuildExBase(GoldenState())
	require.NoError(t, err)
	assert.NotContains(t, flowText(v4), "ipv6")
	assert.False(t, GoldenState().selfHasIPv6())
	dual, err := BuildExBase(GoldenDualStackServices())
	require.NoError(t, err)
	txt := flowText(dual)
	for _, want := range []string{
		"priority=500,ipv6,in_port=1,dl_dst=02:00:c0:00:02:0b,table=0",
		"priority=100,icmp6,icmpv6_type=2,table=40,idle_timeout=0,actions=ct(table=41,zone=64272,nat)",
		"priority=100,icmp6,icmpv6_type=1,table=40,idle_timeout=0,actions=ct(table=41,zone=64272,nat)",
		"priority=10,ipv6,table=45,idle_timeout=0,actions=ct(table=46,zone=64272,nat)",
		"priority=200,ipv6,ct_state=+trk+rel,table=46",
		"priority=200,ipv6,ct_state=+trk+rel,table=41",
	} {
		assert.Contains(t, txt, want)
	}
	assert.Len(t, dual.Flows, len(v4.Flows)+len(exBaseIPv6(GoldenDualStackServices())))
	for i := range dual.Flows {
		require.NoError(t, dual.Flows[i].Check(), dual.Flows[i].String())
	}
	assert.Equal(t, of.ProtoTCP6, must(IPv6.protocol(TCP)))
	assert.Equal(t, ZoneService6, IPv6.ServiceZone())
	assert.Equal(t, ZoneService, IPv4.ServiceZone())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A node with an IPv6 NodePort address but no IPv6 pod CIDR (a Node given an IPv6 InternalIP when
// its cluster went dual-stack keeps its IPv4-only spec.podCIDRs) serves no IPv6: br-int would
// drop the DNATed packets, so each IPv6 Service port is declined there (the host serves it), and
// br-ex gets no IPv6 twin; the IPv4 port of the same Service is served as before.
func TestIPv6DeclinedWithoutIPv6PodCIDR(t *testing.T) {
	st := GoldenDualStackServices()
	self := st.Nodes[st.Node]
	var v4 []netip.Prefix
	for _, c := range self.PodCIDRs {
		if c.Addr().Is4() {
			v4 = append(v4, c)
		}
	}
	self.PodCIDRs = v4
	st.Nodes[st.Node] = self
	require.True(t, slices.ContainsFunc(st.NodePortAddresses, netip.Addr.Is6), "the fixture has an IPv6 NodePort address")
	assert.False(t, st.selfHasIPv6())
	ex, err := BuildExBase(st)
	require.NoError(t, err)
	assert.NotContains(t, flowText(ex), "ipv6")
	n6, n4 := 0, 0
	for k, sp := range st.Services {
		fs, err := BuildServicePort(st, &sp)
		require.NoError(t, err)
		if k.Family == IPv6 {
			n6++
			assert.Contains(t, fs.Declined, "no IPv6 pod CIDR", k.String())
			assert.Empty(t, fs.Flows, k.String())
			assert.Empty(t, fs.Groups, k.String())
		} else {
			n4++
			assert.Empty(t, fs.Declined, k.String())
			assert.NotEmpty(t, fs.Flows, k.String())
		}
	}
	assert.Positive(t, n6)
	assert.Positive(t, n4)
}
