package flows

import (
	"slices"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// DropReason names why the pipeline drops a packet. It is the value of the "reason" label of
// srcip_agent_dropped_packets_total and what srcipctl prints next to a drop. Every flow whose
// action is drop is written with DropFor(reason) (never a bare openflow.Drop), and its place in the pipeline
// is declared once in dropSpots; TestEveryDropHasAReason checks both against the golden states.
type DropReason string

// Drop reasons. The first group are drop flows (DropSpots says where); the last two are drops
// that no flow states: a select group without buckets, and the datapath's MTU limit.
const (
	// DropTunnelUnknownNode: Geneve to this node from an address that is no Node's InternalIP
	// (br-ex ExClassifier): only nodes may tunnel.
	DropTunnelUnknownNode DropReason = "tunnel-from-unknown-node"
	// DropTunnelUnknownVNI: Geneve that br-int cannot classify: from an unknown tun_src, or a VNI
	// the sending node may not use (br-int IntClassifier).
	DropTunnelUnknownVNI DropReason = "tunnel-unknown-source-or-vni"
	// DropUnknownInput: a packet from a br-int port the agent does not know (no pod port, patch,
	// tunnel or gateway flow matched), or non-IP from the patch port.
	DropUnknownInput DropReason = "unknown-input-port"
	// DropTCPSourcePortZero: TCP from source port 0 (only the learned reset flows may send it).
	DropTCPSourcePortZero DropReason = "tcp-source-port-0"
	// DropSpoofGuard: a pod sent a frame whose MAC or IP is not its own.
	DropSpoofGuard DropReason = "spoof-guard"
	// DropSourceRange: a new connection to a LoadBalancer IP or externalIP from a client outside
	// spec.loadBalancerSourceRanges.
	DropSourceRange DropReason = "outside-source-ranges"
	// DropFromIntNotIP: non-IP traffic from br-int to br-ex.
	DropFromIntNotIP DropReason = "non-ip-from-br-int"
	// DropReplyNoConnection: a packet from br-int that ZoneService does not hold as a reply (or
	// related) of a DNATed connection: nothing to un-DNAT, so it does not leave the uplink.
	DropReplyNoConnection DropReason = "reply-without-connection"
	// DropARPNotOurs: an ARP request for an address outside the pod CIDRs br-int answers for.
	DropARPNotOurs DropReason = "arp-not-answered"
	// DropNDNotOurs: an IPv6 Neighbor Solicitation br-int does not answer (duplicate address
	// detection, a pod's from a source that is not its own) or a Neighbor Advertisement (br-int
	// never solicits, and answers for every pod itself).
	DropNDNotOurs DropReason = "nd-not-answered"
	// DropNDNoSLL: a multicast Neighbor Solicitation without a Source Link-Layer Address option
	// (RFC 4861 4.3 makes it a MUST): its answer must carry a Target Link-Layer Address option
	// (7.2.4), which br-int's in-place rewrite cannot add.
	DropNDNoSLL DropReason = "nd-multicast-without-source-lladdr"
	// DropICMPv6Control: an IPv6 router solicitation or advertisement, redirect or multicast
	// listener message from a pod or the host: br-int is no router on the link (pods' routes are
	// static) and forwards no multicast.
	DropICMPv6Control DropReason = "icmpv6-control"
	// DropNoRoute: a destination that is no pod of the cluster (and no gateway port to hand it
	// to the host).
	DropNoRoute DropReason = "no-route"
	// DropPodIngressInvalid: a packet to a local pod that ZonePod holds invalid (out of window,
	// a second connection's non-SYN on an established 4-tuple).
	DropPodIngressInvalid DropReason = "pod-conntrack-invalid"
	// DropPodEgressInvalid: a TCP segment from a pod (local, or another node's over Geneve) that
	// ZonePod holds invalid (out of window): it would reach the client untranslated
	// (kubernetes#74839).
	DropPodEgressInvalid DropReason = "pod-egress-conntrack-invalid"
	// DropGatewayInvalid: a packet from the host (gateway port) that ZonePod holds invalid.
	DropGatewayInvalid DropReason = "gateway-conntrack-invalid"
	// DropEgressNoGateway: a selected pod's packet whose egress IP has no active gateway (or no
	// flow set yet): fail closed, it never leaves with the node address (C29).
	DropEgressNoGateway DropReason = "egress-no-gateway"
	// DropEgressNoPortBlock: a selected pod's new TCP or UDP connection to the destinations
	// while the pool of its egress IP is exhausted and the pod has no source-port block
	// (condition PortBlocksExhausted): fail closed.
	DropEgressNoPortBlock DropReason = "egress-no-port-block"
	// DropEgressNotGateway: an egress packet tunnelled to a node that is not (any more) the
	// active gateway of its egress IP, or that its ZoneEgress could not SNAT.
	DropEgressNotGateway DropReason = "egress-not-gateway"
	// DropEgressReplyNoConnection: a packet to an egress IP, or tunnelled back to a pod's node,
	// that is no reply of a connection the pod opened on the egress path.
	DropEgressReplyNoConnection DropReason = "egress-reply-without-connection"
	// DropChainedNotEgress: a packet for a chained pod's main-CNI address that reached br-int
	// but is no reply of a connection the pod opened through an egress gateway (the main CNI
	// owns that address; docs/egress.md#chained-mode).
	DropChainedNotEgress DropReason = "chained-not-egress"
	// DropRoutedSourceNotListed: with routed pods on, a packet from an uplink to a pod address
	// from a source outside the non-masquerade CIDRs, or from a pod address (br-ex ExClassifier;
	// routed.go).
	DropRoutedSourceNotListed DropReason = "routed-source-not-listed"
	// DropTunnelSourceNotCluster: a new connection tunnelled (VNIPod) to a local pod from a source
	// that is no pod of the sending node, not its InternalIP and (routed pods on) in no
	// non-masquerade CIDR: an outside host sent to a pod address through a node that does not
	// own it (br-int IntTunnelCT; routed.go).
	DropTunnelSourceNotCluster DropReason = "tunnel-source-not-cluster"
	// DropNoEndpoints: a new connection to a Service port without usable endpoints. It is not
	// dropped here: ExServiceCT hands it, uncommitted, to the host, where kube-proxy rejects it
	// (ICMP port unreachable); no drop flow states it (the metric counts the
	// ExServiceCT flows of ports without endpoints).
	DropNoEndpoints DropReason = "no-endpoints"
	// DropMTU: a packet larger than the underlay MTU minus the Geneve overhead (GeneveOverhead,
	// GeneveOverheadIPv6 over an IPv6 underlay) on its way to another node; the userspace datapath drops it with only a log line.
	DropMTU DropReason = "mtu"
)

// GeneveOverhead is what Geneve adds to every packet sent to another node over an IPv4
// underlay, in bytes: outer IPv4 20 + UDP 8 + Geneve 8 + inner Ethernet 14.
const GeneveOverhead = 50

// GeneveOverheadIPv6 is GeneveOverhead over an IPv6 underlay, in bytes: the outer IPv6 header
// is 40 bytes instead of 20.
const GeneveOverheadIPv6 = 70

// DropSpot is where one drop flow lives: bridge, table, priority and the kind of the flow set
// that writes it. A (bridge, table, priority, kind) names at most one reason.
type DropSpot struct {
	Bridge   Bridge
	Table    Table
	Priority int
	Kind     Kind
}

// DropInfo documents one DropReason: what it means for a user and where it happens.
type DropInfo struct {
	Reason DropReason
	// Doc is one sentence for srcipctl and docs/troubleshooting.md: what happened and what to
	// check.
	Doc string
	// Spots are the drop flows with this reason (none for DropNoEndpoints and DropMTU).
	Spots []DropSpot
}

// dropInfos is the one place drop reasons are declared.
var dropInfos = []DropInfo{
	{DropTunnelUnknownNode, "Geneve from an address that is no Node's InternalIP: only nodes may tunnel (check the sender's Node object and its InternalIP)",
		[]DropSpot{{BrEx, ExClassifier, prioTunnel, KindExBase}}},
	{DropTunnelUnknownVNI, "Geneve from an unknown tunnel source or with a VNI that node may not use",
		[]DropSpot{{BrInt, IntClassifier, prioLow, KindIntBase}}},
	{DropUnknownInput, "a packet from a br-int port the agent does not program (no Pod object for the port, or not IP from the patch port)",
		[]DropSpot{{BrInt, IntClassifier, prioDefault, KindIntBase}}},
	{DropTCPSourcePortZero, "TCP from source port 0",
		[]DropSpot{{BrInt, IntClassifier, prioPortZero, KindIntBase}}},
	{DropSpoofGuard, "spoof guard: the pod sent a frame with a MAC or IP address that is not its own",
		[]DropSpot{{BrInt, IntClassifier, prioMid, KindPod}}},
	{DropSourceRange, "the client is outside the Service's spec.loadBalancerSourceRanges (new connections to LoadBalancer IPs and externalIPs)",
		[]DropSpot{{BrEx, ExServiceCT, prioSourceDeny, KindServicePort}}},
	{DropFromIntNotIP, "non-IP traffic from br-int to br-ex",
		[]DropSpot{{BrEx, ExFromInt, prioDefault, KindExBase}}},
	{DropReplyNoConnection, "a reply from br-int that this node's ZoneService holds no connection for: nothing to un-DNAT (the connection entered through another node, or its conntrack entry is gone)",
		[]DropSpot{{BrEx, ExServiceReply, prioDefault, KindExBase}}},
	{DropARPNotOurs, "an ARP request for an address br-int does not answer for",
		[]DropSpot{{BrInt, IntARPResponder, prioDefault, KindIntBase}}},
	{DropNDNotOurs, "an IPv6 Neighbor Solicitation br-int (or br-ex, for an IPv6 egress IP) does not answer (duplicate address detection, whose silence tells the sender its address is unique; a pod's from a source address or MAC that is not its own) or a Neighbor Advertisement (br-int never solicits one and answers for every pod itself)",
		[]DropSpot{{BrInt, IntClassifier, prioND, KindIntBase}, {BrInt, IntNDResponder, prioHigh, KindIntBase}, {BrInt, IntNDResponder, prioDefault, KindIntBase}, {BrEx, ExClassifier, prioEgressNDDAD, KindEgressAnnounce}}},
	{DropNDNoSLL, "an IPv6 Neighbor Solicitation to a multicast address without a source link-layer address option (RFC 4861 4.3 requires it there): its advertisement must carry the target link-layer address option (7.2.4), which br-int (or br-ex, for an IPv6 egress IP) cannot add to the solicitation it rewrites, and its sender would discard one without it (7.2.5); unicast solicitations without the option are answered (check the sender's IPv6 stack)",
		[]DropSpot{{BrInt, IntNDResponder, prioNDNoSLLMulticast, KindIntBase}, {BrEx, ExClassifier, prioEgressNDNoSLLMulticast, KindEgressAnnounce}}},
	{DropICMPv6Control, "an IPv6 router solicitation or advertisement, redirect or multicast listener (MLD) message from a pod or the host: br-int is no IPv6 router on the link (pod routes are static) and forwards no multicast",
		[]DropSpot{{BrInt, IntClassifier, prioICMPv6Control, KindIntBase}}},
	{DropNoRoute, "the destination is no pod of the cluster (no Node's pod CIDR holds it; without a gateway port nothing else is routed)",
		[]DropSpot{{BrInt, IntL3Forwarding, prioDefault, KindIntBase}, {BrInt, IntL3Forwarding, prioEgressExcl, KindPod}}},
	{DropPodIngressInvalid, "the backend node's ZonePod holds the packet invalid (out of window, or a second connection on an established 4-tuple)",
		[]DropSpot{{BrInt, IntPodIngressCT, prioDefault, KindIntBase}}},
	{DropPodEgressInvalid, "a pod's TCP segment that ZonePod holds invalid (out of the connection's window): delivered, it would reach the client without the un-DNAT of its Service and be answered with a RST (kubernetes#74839)",
		[]DropSpot{{BrInt, IntPodEgressCT, prioMid, KindIntBase}, {BrInt, IntTunnelCT, prioMid, KindGateway}}},
	{DropGatewayInvalid, "a packet from the host (gateway port) that ZonePod holds invalid",
		[]DropSpot{{BrInt, IntGatewayCT, prioDefault, KindGateway}}},
	{DropEgressNoGateway, "a pod selected by an EgressGateway sent to its destinations while its egress IP has no active gateway (check the policy's status: Ready, activeGateways, and the egress-<IP> Lease)",
		[]DropSpot{{BrInt, IntEgressOut, prioDefault, KindIntBase}, {BrInt, IntEgressOut, prioMid, KindEgress}}},
	{DropEgressNoPortBlock, "a pod selected by an EgressGateway opened a TCP or UDP connection to its destinations while it has no source-port block because the pool of its egress IP is exhausted (check the policy's PortBlocksExhausted condition and status.portBlocks)",
		[]DropSpot{{BrInt, IntL3Forwarding, prioEgressPorts, KindPod}}},
	{DropEgressNotGateway, "egress traffic reached a node that is not the active gateway of its egress IP (a failover in progress), or its ZoneEgress could not SNAT it",
		[]DropSpot{{BrInt, IntEgressSNAT, prioDefault, KindIntBase}, {BrInt, IntEgressSend, prioDefault, KindIntBase}}},
	{DropEgressReplyNoConnection, "a packet to an egress IP, or tunnelled back to a pod's node, that is no reply of a connection the pod opened through the gateway",
		[]DropSpot{{BrInt, IntEgressReply, prioDefault, KindIntBase}, {BrInt, IntEgressReplyCT, prioDefault, KindIntBase}}},
	{DropChainedNotEgress, "a packet for a chained pod's address (its main CNI's) reached br-int without being an egress gateway's reply to that pod: the main CNI owns the address",
		[]DropSpot{{BrInt, IntL3Forwarding, prioMid - 1, KindPod}}},
	{DropRoutedSourceNotListed, "routed pods are on and a packet from an uplink to a pod address came from a source outside --non-masquerade-cidrs, or from a pod address (forged: pods never come in from outside): only the listed hosts reach pods by their IP (add the source's network to --non-masquerade-cidrs of node-setup and the agent, or reach the pod through a Service)",
		[]DropSpot{{BrEx, ExClassifier, prioRoutedGuard, KindExBase}, {BrEx, ExClassifier, prioRoutedPodSource, KindExBase}}},
	{DropTunnelSourceNotCluster, "a new connection tunnelled from another node to a local pod came from a source that is no pod of that node, not its InternalIP and in no --non-masquerade-cidrs: an outside host sent to a pod address through a node that does not own it (route the pod CIDR to its own node, turn routed pods on for that source, or use a Service)",
		[]DropSpot{{BrInt, IntTunnelCT, prioTunnelGuard, KindNode}}},
	{DropNoEndpoints, "the Service port has no usable endpoint: new connections go to the host untouched, where kube-proxy rejects them (ICMP port unreachable: the client gets ECONNREFUSED at once; check the EndpointSlices: ready, or serving and terminating, endpoints)", nil},
	{DropMTU, "the packet is larger than the underlay MTU minus the 50 bytes of Geneve (70 over an IPv6 underlay): the userspace datapath drops it with only a log line (give pods an MTU of at most underlay MTU - 50, - 70 over IPv6)", nil},
}

// DropInfos returns every drop reason with its documentation and spots, in declaration order.
func DropInfos() []DropInfo { return dropInfos }

// DropInfoOf returns the documentation of r.
func DropInfoOf(r DropReason) (DropInfo, bool) {
	i := slices.IndexFunc(dropInfos, func(d DropInfo) bool { return d.Reason == r })
	if i < 0 {
		return DropInfo{}, false
	}
	return dropInfos[i], true
}

// DropAt returns the reason of the drop flow at (bridge, table, priority) written by a flow set
// of kind k (the cookie's kind byte): the lookup for a dump-flows or ofproto/trace line.
func DropAt(b Bridge, t Table, priority int, k Kind) (DropInfo, bool) {
	for _, d := range dropInfos {
		if slices.Contains(d.Spots, DropSpot{b, t, priority, k}) {
			return d, true
		}
	}
	return DropInfo{}, false
}

// DropFor is the drop action of a flow that drops for reason r (see DropReason).
func DropFor(r DropReason) of.Action { return of.Drop{Reason: string(r)} }

// FlowDropReason returns the reason of a flow built with DropFor (false: it does not drop, or
// drops without a reason).
func FlowDropReason(f *of.Flow) (DropReason, bool) {
	for _, a := range f.Actions {
		if d, ok := a.(of.Drop); ok && d.Reason != "" {
			return DropReason(d.Reason), true
		}
	}
	return "", false
}

// FlowStat is one installed flow's place and counters, as dump-flows reports them (read by
// ofctl.OpenFlow.FlowStats for the per-Service and drop metrics).
type FlowStat struct {
	Cookie   Cookie
	Table    Table
	Priority int
	// Packets and Bytes are the flow's n_packets and n_bytes since it was installed (a flow set
	// with a new cookie starts again from zero).
	Packets, Bytes uint64
	// ToGroup: the flow's first action is group:N.
	ToGroup bool
}
