package flows

import (
	"fmt"
	"net/netip"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// The Geneve underlay per family. A node's underlay address is its Node.InternalIP: its first
// IPv4 InternalIP, else its first IPv6 one (the agent's ConvertNode). This node tunnels over the
// family of its own underlay address, to every other node whose underlay address is of the same
// family: over IPv4 the outer addresses are tun_src/tun_dst and CTLabelIngressNode holds 32 bits;
// over IPv6 they are tun_ipv6_src/tun_ipv6_dst (ovs-fields(7)) and CTLabelIngressNode6 all 128
// bits of ct_label. A node whose underlay address is of the other family (an IPv4-only node in an
// IPv6-underlay cluster, or the reverse) cannot be tunnelled to: it gets no tunnel-peer and no
// node flows here (a warning; the agent refuses it with an Event). Inner packets of both
// families go over either underlay. A node without a known underlay address of its own (not in
// State.Nodes) tunnels over IPv4, as before.

// underlayIPv6 reports whether this node's underlay is IPv6 (its InternalIP is IPv6).
func (st *State) underlayIPv6() bool { return st.self().InternalIP.Is6() }

// UnderlayFamily is the family of this node's Geneve underlay: IPv6 when its InternalIP is an
// IPv6 address, IPv4 otherwise.
func (st *State) UnderlayFamily() Family {
	if st.underlayIPv6() {
		return IPv6
	}
	return IPv4
}

// TunnelRefusal is why this node cannot tunnel to node n ("" when it can): n has no underlay
// address, or one of the other family than this node's.
func (st *State) TunnelRefusal(n Node) string {
	switch {
	case !n.InternalIP.IsValid():
		return fmt.Sprintf("node %s has no InternalIP: no Geneve tunnel to it", n.Name)
	case n.InternalIP.Is6() != st.underlayIPv6():
		return fmt.Sprintf("node %s: its underlay address %s is %s and this node's (%s) is %s: no Geneve tunnel between them (both ends need an underlay address of one family), its pods are not reachable from here",
			n.Name, n.InternalIP, FamilyOf(n.InternalIP), st.self().InternalIP, st.UnderlayFamily())
	}
	return ""
}

// tunSrcRef is the tunnel's outer source field of this node's underlay (tun_src, tun_ipv6_src).
func (st *State) tunSrcRef() of.FieldRef {
	if st.underlayIPv6() {
		return of.Ref(of.FieldTunIPv6Src)
	}
	return nxmTunSrc
}

// tunDstRef is the tunnel's outer destination field of this node's underlay (tun_dst,
// tun_ipv6_dst).
func (st *State) tunDstRef() of.FieldRef {
	if st.underlayIPv6() {
		return of.Ref(of.FieldTunIPv6Dst)
	}
	return nxmTunIPv4
}

// ingressLabel is the ct_label field that records the ingress node's underlay address in
// ZonePod: CTLabelIngressNode (IPv4), CTLabelIngressNode6 (IPv6).
func (st *State) ingressLabel() *CTLabelField {
	if st.underlayIPv6() {
		return CTLabelIngressNode6
	}
	return CTLabelIngressNode
}

// ingressFromTunSrc records the packet's tunnel source as the ingress node (in a commit's exec).
func (st *State) ingressFromTunSrc() of.Action { return st.ingressLabel().MoveFrom(st.tunSrcRef()) }

// ingressToTunDst tunnels the packet to the recorded ingress node.
func (st *State) ingressToTunDst() of.Action { return st.ingressLabel().MoveTo(st.tunDstRef()) }

// recordedIngress matches connections whose recorded ingress node is a.
func recordedIngress(a netip.Addr) of.Match {
	if a.Is4() {
		return CTLabelIngressNode.Match(ipv4Value(a))
	}
	return CTLabelIngressNode6.MatchAddr(a)
}

// tunnelProto is the protocol of Geneve on this node's underlay: udp or udp6.
func (st *State) tunnelProto() of.Protocol {
	if st.underlayIPv6() {
		return of.ProtoUDP6
	}
	return of.ProtoUDP
}

// MatchAddr matches connections whose 128-bit label field holds the IPv6 address a (ct_label
// bit 0 is the address's last bit, as a move of tun_ipv6_src into ct_label[0..127] leaves it).
func (f *CTLabelField) MatchAddr(a netip.Addr) of.Match {
	if f.end-f.start != 127 || !a.Is6() {
		panic(fmt.Sprintf("flows: MatchAddr(%v) of %s [%d..%d]", a, f.name, f.start, f.end))
	}
	b := a.As16()
	var v of.U128
	for i := 0; i < 8; i++ {
		v.Hi = v.Hi<<8 | uint64(b[i])
		v.Lo = v.Lo<<8 | uint64(b[8+i])
	}
	return of.CTLabel(v, of.U128{Hi: ^uint64(0), Lo: ^uint64(0)})
}

// egressNodeLabel is the ct_label field that records the pod's node's underlay address in
// ZoneEgress and ZoneEgress6 on an egress gateway: CTLabelEgressNode (IPv4), CTLabelEgressNode6
// (IPv6).
func (st *State) egressNodeLabel() *CTLabelField {
	if st.underlayIPv6() {
		return CTLabelEgressNode6
	}
	return CTLabelEgressNode
}

// egressLocal matches gateway connections of a pod on this node (no tunnel source recorded).
func (st *State) egressLocal() of.Match {
	if st.underlayIPv6() {
		return CTLabelEgressNode6.MatchAddr(netip.IPv6Unspecified())
	}
	return CTLabelEgressNode.Match(0)
}

// egressNodeFromTunSrc records the packet's tunnel source as the pod's node (in the SNAT
// commit's exec).
func (st *State) egressNodeFromTunSrc() of.Action {
	return st.egressNodeLabel().MoveFrom(st.tunSrcRef())
}

// egressNodeToTunDst tunnels an un-SNATed reply to the recorded pod's node.
func (st *State) egressNodeToTunDst() of.Action { return st.egressNodeLabel().MoveTo(st.tunDstRef()) }
