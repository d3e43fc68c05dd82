package flows

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// KindPod: one local pod's spoof guard and delivery.

// BuildPod returns a local pod's flows (KindPod) on br-int: the spoof guard in IntClassifier
// (only the pod's MAC and IPs are accepted from its port), and its delivery in IntL3Forwarding.
func BuildPod(st *State, p Pod) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindPod, Namespace: p.Namespace, Name: p.Name}, Bridge: BrInt}
	if p.OFPort <= 0 || len(p.MAC) != 6 {
		return nil, fmt.Errorf("pod %s/%s: no ofport or MAC", p.Namespace, p.Name)
	}
	mac := of.EthSrc(p.MAC)
	for _, ip := range p.IPs {
		if ip.Is6() && p.Chained {
			// A chained pod's IPv6 address (its main CNI's): only on a node whose br-int
			// carries IPv6 (its twins of the pod path and the IPv6 egress path).
			if !st.selfHasIPv6() {
				fs.Warnings = append(fs.Warnings, fmt.Sprintf("chained pod %s/%s: IP %s not programmed: this node has no IPv6 pod CIDR (br-int carries no IPv6)", p.Namespace, p.Name, ip))
				continue
			}
			fs.Flows = append(fs.Flows, chainedPodFlows(st, p, ip)...)
			continue
		}
		if ip.Is6() {
			// IPv6 (a dual-stack pod): the same checks, pod6Flows.
			cidr, ok := st.localCIDR(ip)
			switch {
			case !ok:
				fs.Warnings = append(fs.Warnings, fmt.Sprintf("pod %s/%s: IP %s is outside this node's pod CIDRs", p.Namespace, p.Name, ip))
			case ip == GatewayIP(cidr):
				fs.Warnings = append(fs.Warnings, fmt.Sprintf("pod %s/%s: IP %s is the pod gateway address of %s", p.Namespace, p.Name, ip, cidr))
			default:
				fs.Flows = append(fs.Flows, pod6Flows(st, p, ip)...)
				// Its IPv6 egress path (Pod.Egress6), part of its own flow set as IPv4's (C29).
				fs.Flows = append(fs.Flows, podEgressFlows(st, p, ip)...)
			}
			continue
		}
		if !ip.Is4() {
			continue
		}
		if p.Chained {
			fs.Flows = append(fs.Flows, chainedPodFlows(st, p, ip)...)
			continue
		}
		cidr, ok := st.localCIDR(ip)
		if !ok {
			fs.Warnings = append(fs.Warnings, fmt.Sprintf("pod %s/%s: IP %s is outside this node's pod CIDRs", p.Namespace, p.Name, ip))
			continue
		}
		if ip == GatewayIP(cidr) {
			// The gateway address is the host's (the gateway port's) and br-int's ARP answer.
			fs.Warnings = append(fs.Warnings, fmt.Sprintf("pod %s/%s: IP %s is the pod gateway address of %s", p.Namespace, p.Name, ip, cidr))
			continue
		}
		gwMAC := GatewayMAC(GatewayIP(cidr))
		fs.Flows = append(fs.Flows,
			flow(IntClassifier, prioHigh, of.ProtoIP, p.OFPort, []of.Match{mac, of.IPv4Src(ip)},
				SourcePod.Load(), CT{Zone: ZonePod, NAT: &NAT{}, Table: uint8(IntPodEgressCT), HasTable: true}),
			flow(IntClassifier, prioHigh, of.ProtoARP, p.OFPort, []of.Match{mac, of.ARPSPA(ip)},
				Goto(IntARPResponder)),
			flow(IntL3Forwarding, prioMid, of.ProtoIP, 0, []of.Match{of.IPv4Dst(ip)},
				of.ModDLSrc{MAC: gwMAC}, of.ModDLDst{MAC: p.MAC},
				RegOutPort.Load(uint32(p.OFPort)), Goto(IntPodIngress)),
		)
		// Its egress path is part of the pod's own flow set: the port is never programmed
		// without it, so a selected pod's first packet cannot leave with the node IP (C29).
		fs.Flows = append(fs.Flows, podEgressFlows(st, p, ip)...)
	}
	if !p.Chained && slices.ContainsFunc(fs.Flows, func(f of.Flow) bool { return f.Protocol == of.ProtoIPv6 }) {
		// (A chained pod never solicits on its egress interface: permanent neighbour entry
		// for ChainedGatewayIP6.)
		fs.Flows = append(fs.Flows, pod6LinkLocalFlow(p))
	}
	if len(fs.Flows) > 0 {
		// Spoof guard: anything else from the pod's port is dropped.
		fs.Flows = append(fs.Flows, flow(IntClassifier, prioMid, of.ProtoNone, p.OFPort, nil, DropFor(DropSpoofGuard)))
	}
	return fs, fs.Finish()
}

// ChainedGatewayIP is the next hop srcip-cni's chained mode gives the IPv4 routes of the egress
// interface (onlink, with a permanent neighbour entry ChainedGatewayMAC, so the pod never ARPs
// on that interface); br-int never answers for it.
var ChainedGatewayIP = netip.MustParseAddr("169.254.1.1")

// ChainedGatewayIP6 is the IPv6 next hop of the egress interface's IPv6 routes: a link-local
// address (RFC 4291 2.5.6) whose last 32 bits are ChainedGatewayIP's, so that its MAC by
// GatewayMAC's convention is ChainedGatewayMAC too. srcip-cni gives it a permanent neighbour
// entry (lladdr ChainedGatewayMAC): the pod never sends a Neighbor Solicitation on that
// interface, and br-int never answers for it (a chained pod's port has no ND flow).
var ChainedGatewayIP6 = netip.MustParseAddr("fe80::a9fe:101")

// ChainedGatewayMAC is the MAC of ChainedGatewayIP and ChainedGatewayIP6 (GatewayMAC's
// convention, 0a:58:a9:fe:01:01): the source of what br-int delivers on a chained egress
// interface, of either family.
var ChainedGatewayMAC = GatewayMAC(ChainedGatewayIP)

// chainedPodFlows are the flows of one address ip (IPv4, or IPv6 on a node that runs IPv6) of a
// chained pod's egress interface (Pod.Chained; docs/egress.md#chained-mode). The address belongs
// to the main CNI, so it need not be inside this node's pod CIDRs. From the port: the spoof guard
// (the interface's MAC and ip) then the usual ZonePod tracking; the pod's egress flows
// (podEgressFlows: Pod.Egress for IPv4, Pod.Egress6 for IPv6) send its selected connections to
// the gateway; everything else it sends on this interface takes the host path (IntL3Forwarding's
// prioLow flow of its family: srcip-gw0, the host routes it). To the port: only the gateway's
// un-SNATed replies (SourceEgress, after IntEgressReplyCT) are delivered; anything else for ip
// that reaches br-int is dropped (the main CNI owns the address). No ARP and no ND flow: the pod
// reaches its next hop through a permanent neighbour entry, and its solicitations fall to the
// base's drops (DropNDNotOurs, nd-not-answered).
func chainedPodFlows(st *State, p Pod, ip netip.Addr) []of.Flow {
	proto, src, dst := of.ProtoIP, of.IPv4Src(ip), of.IPv4Dst(ip)
	if ip.Is6() {
		proto, src, dst = of.ProtoIPv6, of.IPv6Src(ip), of.IPv6Dst(ip)
	}
	fl := []of.Flow{
		flow(IntClassifier, prioHigh, proto, p.OFPort, []of.Match{of.EthSrc(p.MAC), src},
			SourcePod.Load(), CT{Zone: ZonePod, NAT: &NAT{}, Table: uint8(IntPodEgressCT), HasTable: true}),
		flow(IntL3Forwarding, prioMid, proto, 0, []of.Match{SourceEgress.Match(), dst},
			of.ModDLSrc{MAC: ChainedGatewayMAC}, of.ModDLDst{MAC: p.MAC},
			RegOutPort.Load(uint32(p.OFPort)), Goto(IntPodIngress)),
		flow(IntL3Forwarding, prioMid-1, proto, 0, []of.Match{dst}, DropFor(DropChainedNotEgress)),
	}
	return append(fl, podEgressFlows(st, p, ip)...)
}

func podKeys(st *State) []Key { return slices.Collect(maps.Keys(st.Pods)) }

func buildPodKey(st *State, k Key) (*FlowSet, error) {
	p, ok := st.Pods[k]
	if !ok {
		return nil, nil
	}
	return BuildPod(st, p)
}

func podRank(st *State, k Key) Rank { return st.Pods[k].Rank }
