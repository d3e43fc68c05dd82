package flows

import (
	"maps"
	"net/netip"
	"slices"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// KindUDPFragments: the fragments of UDP datagrams to one address that has UDP entry points.

// BuildUDPFragments returns the ExServiceLB flow that sends every fragment (nw_frag=yes, the
// first one included) of UDP to addr through ct(zone=ZoneService,nat) (KindUDPFragments). The
// userspace datapath's conntrack reassembles the datagram and hands the fragments on with its
// state and NAT (docs/lab-facts.md#fact-12): later fragments carry no UDP ports, so they could
// not match an entry flow, and a datagram whose fragments took different flows would be held by
// ct forever. A fragment of an established connection then goes on like its datagram
// (ExServiceCT +est); anything else falls to ExServiceCT's default (the host). One flow set per
// address, so that several Service ports sharing an address (NodePorts on a node address, UDP
// ports of one LoadBalancer IP) never render the same flow, and a Service that goes away takes
// with it only the addresses no other UDP entry point uses. For an IPv6 addr the flow matches
// udp6 and ipv6_dst in ZoneService6 (nw_frag covers the IPv6 fragment header as it does IPv4's
// flags).
func BuildUDPFragments(addr netip.Addr) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindUDPFragments, Name: addr.String()}, Bridge: BrEx}
	fs.Flows = []of.Flow{flow(ExServiceLB, prioHigh, of.ProtoUDP.ForAddr(addr), 0,
		[]of.Match{of.IPDst(addr), ipFragment},
		CT{Zone: FamilyOf(addr).ServiceZone(), NAT: &NAT{}, Table: uint8(ExServiceCT), HasTable: true})}
	return fs, fs.Finish()
}

// udpEntryAddrs returns, sorted and without duplicates, the addresses (of either family) of this
// node's UDP entry points: the NodePort addresses when a UDP Service port has a NodePort, and the
// LoadBalancer ingress IPs and externalIPs of UDP Service ports.
func udpEntryAddrs(st *State) []netip.Addr {
	seen := map[netip.Addr]bool{}
	// Runs in every sync: only the UDP Service ports (State.udpServices), not every one.
	for k := range st.udpServices {
		sp := st.Services[k]
		for _, e := range sp.EntryPoints(st.NodePortAddresses) {
			if e.Addr.Port() == st.Ports.tunnelUDPPort() && e.Addr.Addr() == st.self().InternalIP {
				continue // not served (BuildServicePort)
			}
			seen[e.Addr.Addr()] = true
		}
	}
	out := slices.Collect(maps.Keys(seen))
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func udpFragmentsKeys(st *State) []Key {
	var out []Key
	for _, a := range udpEntryAddrs(st) {
		out = append(out, Key{Kind: KindUDPFragments, Name: a.String()})
	}
	return out
}

func buildUDPFragmentsKey(st *State, k Key) (*FlowSet, error) {
	a, err := netip.ParseAddr(k.Name)
	if err != nil || !slices.Contains(udpEntryAddrs(st), a) {
		return nil, nil
	}
	return BuildUDPFragments(a)
}
