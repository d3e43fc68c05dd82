package flows

import (
	"encoding/binary"
	"net/netip"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// IPv6 egress gateways (issue 22, docs/egress.md "IPv6"). A policy's IPv6 egress IPs govern only
// the IPv6 traffic of its pods (Pod.Egress6), its IPv4 ones only their IPv4 traffic (Pod.Egress):
// each family is decided, pinned and translated on its own, so no connection is ever half
// translated. The IPv6 path mirrors the IPv4 one table for table: the pod's node pins a new
// connection in ZonePod (EgressPath, the egress IP's id in CTLabelEgressIP) and tunnels it to
// the active gateway (VNIEgress, inner eth_dst EgressMAC); the gateway SNATs it in its own zone,
// ZoneEgress6, hands it to its host through br-ex, answers Neighbor Solicitations for the egress
// IP on the uplink and tunnels the un-SNATed replies back (VNIEgressReply). Both families go
// over either underlay: the outer addresses are the nodes' underlay addresses (tun_src/tun_dst
// and CTLabelEgressNode over IPv4, tun_ipv6_src/tun_ipv6_dst and CTLabelEgressNode6 over IPv6,
// underlay.go). All of it exists
// only on a node that runs IPv6 (State.selfHasIPv6) and carries the IPv6 egress path
// (State.egress6): a dual-stack node without IPv6 egress IPs renders as before.

// EgressID returns the 32-bit value that names egress IP ip in RegEgressIP and CTLabelEgressIP
// (and the last four bytes of its EgressMAC): an IPv4 address itself (network byte order), an
// IPv6 address's last 32 bits. Two IPv6 egress IPs with the same last 32 bits cannot both be
// programmed (the agent refuses the younger one).
func EgressID(ip netip.Addr) uint32 {
	if ip.Is4() {
		return uint32(ipv4Value(ip))
	}
	b := ip.As16()
	return binary.BigEndian.Uint32(b[12:])
}

// egress6 reports whether this node carries the IPv6 egress path of br-int's base: whenever it
// runs IPv6 (an IPv6 pod CIDR), as the IPv4 path is always there, whether or not State.Egress
// holds an IPv6 egress IP. IPv6 connections pinned to an egress IP outlive it and must keep
// being dropped (C37), also by an agent restarted after it went; and a restart must find the
// base it wrote (no rewrite of br-int when nothing changed).
func (st *State) egress6() bool { return st.selfHasIPv6() }

// egressBase6 are BuildIntBase's IPv6 egress flows (State.egress6): the ipv6 twins of
// egressBaseFlows (a pinned connection's packets to IntEgressOut, the gateway's replies back to
// the pod's node or to its local pod, IntEgressReplyCT). The twins of egressNodeFlows (the
// Geneve classification of VNIEgress and VNIEgressReply from a peer) are in that peer's node
// flow set (BuildNode), as the IPv4 ones.
func egressBase6(st *State) []of.Flow { return twin6(egressBaseFlows(st)) }

// Egress6SecondaryNote is what the agent and the pipeline say about an IPv6 egress IP inside an
// IPv6 subnet of a secondary uplink, after "IPv6 egress IP X is inside IPv6 subnet S of
// secondary NIC N on node M: ".
const Egress6SecondaryNote = "not served by that node (it declines it: node-setup records the NIC's IPv6 subnets but has " +
	"no IPv6 source routing for it, so the SNATed packets would leave through the primary uplink, on the wrong segment); " +
	"give the IP to nodes whose primary uplink is on that segment (gatewayNodeSelector), or use an IPv4 egress IP in the NIC's IPv4 subnet"

// egress6SecondaryRefusal is why this node does not serve IPv6 egress IP ip ("" when it may):
// ip is inside an IPv6 subnet of one of its secondary uplinks (State.SecondarySubnet6For), whose
// segment this node cannot send IPv6 to (docs/egress.md "Secondary NICs").
func (st *State) egress6SecondaryRefusal(ip netip.Addr) string {
	_, _, where, ok := st.SecondarySubnet6For(ip)
	if !ok {
		return ""
	}
	return "IPv6 egress IP " + ip.String() + " is " + where + " on node " + st.Node + ": " + Egress6SecondaryNote + "; its traffic is dropped"
}

// ndAdvertFlagsEgress is the NA flags br-ex answers for an egress IP with: S (solicited) and O
// (override), not R: br-ex is a host for that address, not a router (RFC 4861 4.4).
const ndAdvertFlagsEgress = 0x60000000

// Priorities of br-ex's solicitation flows for an IPv6 egress IP (buildEgressAnnounce6), above
// its answer (prioEgressHook): duplicate address detection (source ::, never answered), then a
// multicast solicitation without a Source Link-Layer Address option (dropped), then a unicast
// one without it (answered without a Target Link-Layer Address option).
const (
	prioEgressNDDAD            = prioEgressHook + 3
	prioEgressNDNoSLLMulticast = prioEgressHook + 2
	prioEgressNDNoSLL          = prioEgressHook + 1
)

// buildEgressAnnounce6 is BuildEgressAnnounce for an IPv6 egress IP on its active gateway (a
// node that runs IPv6): on its uplink (State.UplinkFor), a Neighbor Solicitation for the egress
// IP is answered with br-ex's MAC (ndAnswerTo's rewrite with flags S|O, then ExNDAdvert writes
// the Target Link-Layer Address option and sends it back), except duplicate address detection
// (source ::), which is dropped (an answer to :: has no destination); IPv6 to the egress IP
// from the uplink goes to br-int (the un-SNAT); the SNATed packets br-int sends go to the host,
// which routes them (next hop from its IPv6 routing table).
func buildEgressAnnounce6(st *State, e EgressIP, fs *FlowSet) {
	if !st.selfHasIPv6() {
		return
	}
	if st.egress6SecondaryRefusal(e.IP) != "" {
		return // declined (BuildEgress warns): answered on no uplink
	}
	p := st.Ports
	up := st.UplinkFor(e.IP)
	target := of.NDTarget(e.IP)
	fs.Flows = []of.Flow{
		flow(ExClassifier, prioEgressNDDAD, of.ProtoICMP6, up,
			nsMatch(of.IPv6Src(netip.IPv6Unspecified()), target), DropFor(DropNDNotOurs)),
		// A solicitation without a Source Link-Layer Address option, as on br-int (intBase6): a
		// multicast one is not answered (RFC 4861 4.3, 7.2.4, 7.2.5), a unicast one (the
		// router's reachability probe) is answered without a Target Link-Layer Address option
		// (writing nd_options_type would touch the byte after the packet's end).
		flow(ExClassifier, prioEgressNDNoSLLMulticast, of.ProtoICMP6, up,
			nsMatch(of.IPv6DstPrefix(multicast6), of.NDSLL(noLLAddr), target), DropFor(DropNDNoSLL)),
		flow(ExClassifier, prioEgressNDNoSLL, of.ProtoICMP6, up, nsMatch(of.NDSLL(noLLAddr), target),
			append(ndAdvertise(p.ExMAC, ndAdvertFlagsEgress), outputInPort)...),
		flow(ExClassifier, prioEgressHook, of.ProtoICMP6, up, nsMatch(target),
			ndAnswerTo(p.ExMAC, ndAdvertFlagsEgress, ExNDAdvert)...),
		flow(ExNDAdvert, prioMid, of.ProtoICMP6, up,
			[]of.Match{of.ICMPv6Type(icmp6NeighAdvert), of.ICMPv6Code(0), target},
			of.Move{Src: nxmEthSrc, Dst: of.Ref(of.FieldNDTLL)}, outputInPort),
	}
	fs.Flows = append(fs.Flows, egressHandoffFlows(st, e.IP, egressIPv6, up)...)
}
