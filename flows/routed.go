package flows

import (
	"net/netip"
	"slices"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// Routed pod networks (issue 24; docs/routed-pods.md). With State.NonMasqueradeCIDRs set (the
// agent's --non-masquerade-cidrs, ip-masq-agent's nonMasqueradeCIDRs), pods reach those
// destinations with their own IP (node-setup leaves them out of the masquerade), and hosts there
// reach pods by their IP through any node: the router may send a pod CIDR to any node, and the
// replies go back through the node the request came in by, so that a strict router sees both
// directions of a connection on one node. Without it nothing is routed to pods from outside
// through a node that does not own the pod: the backend node drops new connections tunnelled to
// its pods from a source that is no pod or node of the cluster (the guard below).

// Priorities of the routed-pod flows.
const (
	// br-ex ExClassifier, between prioHook (500) and prioEgressHook (510), on every uplink
	// (primary and secondary): a pod source to a pod (forged: pods never come in from an uplink,
	// dropped), then ICMP errors to a pod, then a listed source to a pod, then any other source
	// to a pod (dropped).
	prioRoutedPodSource = 508
	prioRoutedICMP      = 507
	prioRoutedAllow     = 506
	prioRoutedGuard     = 505
	// br-int IntTunnelCT, below the node's own commit (prioHigh, 300): a new connection from node
	// n's pods goes on (above the routed commit, so that a listed CIDR that holds pod CIDRs
	// changes nothing for them); a listed source's new connection to a local pod through n is
	// committed with n as its ingress node; any other new connection tunnelled to a local pod is
	// dropped.
	prioTunnelPodSource = 295
	prioRoutedIngress   = 290
	prioTunnelGuard     = 260
)

// LinkLocalCIDR is IPv4's link-local range (RFC 3927), which ip-masq-agent leaves out of the
// masquerade unless masqLinkLocal is set; the agent's --non-masquerade-cidrs does the same
// unless --masquerade-link-local (NonMasqueradeSet).
var LinkLocalCIDR = netip.MustParsePrefix("169.254.0.0/16")

// NonMasqueradeSet returns the destinations pods reach with their own IP for the listed CIDRs
// (--non-masquerade-cidrs, either family, masked and without duplicates, in order):
// ip-masq-agent's semantics - when the list is not empty, 169.254.0.0/16 is added unless
// masqLinkLocal. IPv6 link-local (fe80::/10) is never forwarded by a router and is not added.
// An empty list gives nil: routed pods are off, everything leaving the cluster is masqueraded.
func NonMasqueradeSet(cidrs []netip.Prefix, masqLinkLocal bool) []netip.Prefix {
	if len(cidrs) == 0 {
		return nil
	}
	var out []netip.Prefix
	seen := map[netip.Prefix]bool{}
	add := func(p netip.Prefix) {
		p = p.Masked()
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range cidrs {
		add(p)
	}
	if !masqLinkLocal {
		add(LinkLocalCIDR)
	}
	return out
}

// routed reports whether routed pods are on for this node: non-masquerade CIDRs are set and the
// node has a gateway port (the host routes pod CIDRs into br-int; in chained mode the main CNI
// owns the pods' addresses and nothing here applies).
func (st *State) routed() bool { return len(st.NonMasqueradeCIDRs) > 0 && st.Ports.HasGateway() }

// routedCIDRs returns the non-masquerade CIDRs of c's family.
func (st *State) routedCIDRs(c netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range st.NonMasqueradeCIDRs {
		if p.Addr().Is4() == c.Addr().Is4() {
			out = append(out, p)
		}
	}
	return out
}

// ipProto is the IP protocol of c's family (ip or ipv6).
func ipProto(c netip.Prefix) of.Protocol {
	if c.Addr().Is4() {
		return of.ProtoIP
	}
	return of.ProtoIPv6
}

// routedGuardFlows are BuildExBase's flows for routed pods (State.routed): a packet from the
// uplink to this node's MAC and an address in any Node's pod CIDR goes on into ExServiceLB (and
// from there to the host, which routes it to the pod, here or over Geneve) when its source is in
// a non-masquerade CIDR of its family, and is dropped otherwise (DropRoutedSourceNotListed): no
// pod answers a host it may not reach with its own IP. ICMP errors to a pod address (a router's
// "fragmentation needed" about a pod's routed connection, from the router's own address) go on
// from any source: conntrack relates them, or drops them, further on.
//
// The same flows guard each secondary uplink (node-setup --egress-interface), whose flows
// otherwise hand everything to the host, without the MAC match (what comes in there is the
// host's). A source in any Node's pod CIDR is dropped first on every uplink (pods never come in
// from outside; a listed CIDR that holds pod CIDRs must not let forged pod sources in).
func routedGuardFlows(st *State) []of.Flow {
	if !st.routed() {
		return nil
	}
	p := st.Ports
	type uplink struct {
		port int
		mac  []of.Match
	}
	ups := []uplink{{p.ExUplink, []of.Match{of.EthDst(p.ExMAC)}}}
	sec, _ := st.SecondaryUplinks()
	for _, s := range sec {
		if s.OFPort > 0 {
			ups = append(ups, uplink{port: s.OFPort})
		}
	}
	nodes := sortedNodes(st)
	var fl []of.Flow
	for _, up := range ups {
		m := func(ms ...of.Match) []of.Match { return append(slices.Clone(up.mac), ms...) }
		for _, n := range nodes {
			for _, c := range n.PodCIDRs {
				c = c.Masked()
				dst, proto := of.IPDstPrefix(c), ipProto(c)
				for _, o := range nodes {
					for _, oc := range o.PodCIDRs {
						if oc.Addr().Is4() == c.Addr().Is4() {
							fl = append(fl, flow(ExClassifier, prioRoutedPodSource, proto, up.port,
								m(of.IPSrcPrefix(oc.Masked()), dst), DropFor(DropRoutedSourceNotListed)))
						}
					}
				}
				if c.Addr().Is4() {
					for _, t := range []uint8{icmpDestUnreachable, icmpTimeExceeded, icmpParamProblem} {
						fl = append(fl, flow(ExClassifier, prioRoutedICMP, of.ProtoICMP, up.port,
							m(dst, of.ICMPType(t)), Goto(ExServiceLB)))
					}
				} else {
					for _, t := range []uint8{icmp6DestUnreachable, icmp6PacketTooBig, icmp6TimeExceeded, icmp6ParamProblem} {
						fl = append(fl, flow(ExClassifier, prioRoutedICMP, of.ProtoICMP6, up.port,
							m(dst, of.ICMPv6Type(t)), Goto(ExServiceLB)))
					}
				}
				for _, src := range st.routedCIDRs(c) {
					fl = append(fl, flow(ExClassifier, prioRoutedAllow, proto, up.port,
						m(of.IPSrcPrefix(src), dst), Goto(ExServiceLB)))
				}
				fl = append(fl, flow(ExClassifier, prioRoutedGuard, proto, up.port,
					m(dst), DropFor(DropRoutedSourceNotListed)))
			}
		}
	}
	return fl
}

// tunnelGuardFlows are BuildNode's IntTunnelCT flows for node n's new connections to this node's
// pod CIDRs (with a gateway port): from a non-masquerade CIDR (routed pods on; the router sent
// the client to n, whose host handed it to br-int) the connection is committed with OriginNode
// and n as its ingress node, so that its replies go back over Geneve to n (BuildGateway) and
// leave where the request came in; from n's own pods it goes on as before; from any other
// source it is dropped (DropTunnelSourceNotCluster): only the cluster's pods and nodes, and the
// listed CIDRs, reach pods through another node. The node's own commit (its InternalIP, prioHigh)
// stays above these.
func tunnelGuardFlows(st *State, n Node, tunSrc of.Match) []of.Flow {
	var fl []of.Flow
	newConn := ctState(of.CTTracked.Set(), of.CTNew.Set())
	for _, c := range st.self().PodCIDRs {
		c = c.Masked()
		dst, proto := of.IPDstPrefix(c), ipProto(c)
		if st.routed() {
			for _, src := range st.routedCIDRs(c) {
				fl = append(fl, flow(IntTunnelCT, prioRoutedIngress, proto, 0,
					[]of.Match{tunSrc, of.IPSrcPrefix(src), dst, newConn},
					CT{Commit: true, Zone: ZonePod, Exec: []of.Action{OriginNode.Load(), st.ingressFromTunSrc()}},
					Goto(IntL3Forwarding)))
			}
		}
		for _, pc := range n.PodCIDRs {
			if pc.Addr().Is4() != c.Addr().Is4() {
				continue
			}
			fl = append(fl, flow(IntTunnelCT, prioTunnelPodSource, proto, 0,
				[]of.Match{tunSrc, of.IPSrcPrefix(pc.Masked()), dst, newConn}, Goto(IntL3Forwarding)))
		}
		fl = append(fl, flow(IntTunnelCT, prioTunnelGuard, proto, 0,
			[]of.Match{tunSrc, dst, newConn}, DropFor(DropTunnelSourceNotCluster)))
	}
	return fl
}
