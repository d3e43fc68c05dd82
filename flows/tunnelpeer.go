package flows

import (
	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// KindTunnelPeer: Geneve from one other node's underlay address is let into this node.

// BuildTunnelPeer returns the br-ex flow that hands Geneve packets (UDP to the tunnel port of this
// node's InternalIP, RFC 8926; udp6 on an IPv6 underlay) from node n's InternalIP to the host, where the datapath
// decapsulates them into br-int (KindTunnelPeer). Geneve from any other source is dropped by
// BuildExBase's tunnel flow below it (and counted by that flow's n_packets): only the cluster's
// nodes may tunnel. br-int checks the tunnel source again, per VNI (BuildNode). A node this node
// cannot tunnel to (State.TunnelRefusal: no InternalIP, or the other underlay family) gets no flow
// and a warning.
func BuildTunnelPeer(st *State, n Node) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindTunnelPeer, Name: n.Name}, Bridge: BrEx}
	if why := st.TunnelRefusal(n); why != "" {
		fs.Warnings = append(fs.Warnings, why+": its Geneve packets are not accepted")
		return fs, fs.Finish()
	}
	m := append([]of.Match{of.IPSrc(n.InternalIP)}, st.tunnelMatch()...)
	fs.Flows = []of.Flow{flow(ExClassifier, prioTunnelPeer, st.tunnelProto(), st.Ports.ExUplink, m, outputLocal)}
	return fs, fs.Finish()
}
