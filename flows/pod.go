package flows

import (
	"fmt"
	"maps"
	"slices"

	"github.com/digitalocean/go-openvswitch/ovs"
)

// KindPod: one local pod's spoof guard and delivery.

// BuildPod returns a local pod's flows (KindPod) on br-int: the spoof guard in IntClassifier
// (only the pod's MAC and IPs are accepted from its port), and its delivery in IntL3Forwarding.
func BuildPod(st *State, p Pod) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindPod, Namespace: p.Namespace, Name: p.Name}, Bridge: BrInt}
	if p.OFPort <= 0 || len(p.MAC) != 6 {
		return nil, fmt.Errorf("pod %s/%s: no ofport or MAC", p.Namespace, p.Name)
	}
	mac := ovs.DataLinkSource(p.MAC.String())
	for _, ip := range p.IPs {
		if !ip.Is4() {
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
			flow(IntClassifier, prioHigh, ovs.ProtocolIPv4, p.OFPort, []ovs.Match{mac, ovs.NetworkSource(ip.String())},
				SourcePod.Load(), CT{Zone: ZonePod, Table: tableRef(IntPodEgressCT)}),
			flow(IntClassifier, prioHigh, ovs.ProtocolARP, p.OFPort, []ovs.Match{mac, ovs.ARPSourceProtocolAddress(ip.String())},
				Goto(IntARPResponder)),
			flow(IntL3Forwarding, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{ovs.NetworkDestination(ip.String())},
				ovs.ModDataLinkSource(gwMAC), ovs.ModDataLinkDestination(p.MAC),
				RegOutPort.Load(uint32(p.OFPort)), Goto(IntPodIngress)),
		)
		// Its egress path is part of the pod's own flow set: the port is never programmed
		// without it, so a selected pod's first packet cannot leave with the node IP (C29).
		fs.Flows = append(fs.Flows, podEgressFlows(st, p, ip)...)
	}
	if len(fs.Flows) > 0 {
		// Spoof guard: anything else from the pod's port is dropped.
		fs.Flows = append(fs.Flows, flow(IntClassifier, prioMid, "", p.OFPort, nil, DropFor(DropSpoofGuard)))
	}
	return fs, fs.Finish()
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
