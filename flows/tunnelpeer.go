package flows

import (
	"fmt"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// KindTunnelPeer: Geneve from one other node's underlay address is let into this node.

// BuildTunnelPeer returns the br-ex flow that hands Geneve packets (UDP to the tunnel port of this
// node's InternalIP, RFC 8926) from node n's InternalIP to the host, where the datapath
// decapsulates them into br-int (KindTunnelPeer). Geneve from any other source is dropped by
// BuildExBase's tunnel flow below it (and counted by that flow's n_packets): only the cluster's
// nodes may tunnel. br-int checks the tunnel source again, per VNI (BuildNode).
func BuildTunnelPeer(st *State, n Node) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindTunnelPeer, Name: n.Name}, Bridge: BrEx}
	if !n.InternalIP.Is4() {
		fs.Warnings = append(fs.Warnings, fmt.Sprintf("node %s has no IPv4 InternalIP: its Geneve packets are not accepted", n.Name))
		return fs, fs.Finish()
	}
	m := append([]of.Match{of.IPv4Src(n.InternalIP)}, st.tunnelMatch()...)
	fs.Flows = []of.Flow{flow(ExClassifier, prioTunnelPeer, of.ProtoUDP, st.Ports.ExUplink, m, outputLocal)}
	return fs, fs.Finish()
}
