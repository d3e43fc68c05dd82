package flows

import (
	"net"
	"net/netip"
	"slices"
)

// PodPort is a pod's interface on the integration bridge as OVSDB shows it (ovs-vswitchd.conf.db(5),
// Interface table): what srcip-cni, OVN-Kubernetes or Antrea wrote into Interface.external_ids
// plus the ofport ovs-vswitchd assigned. ofctl.DB.PodPorts reads it; the agent joins it with the
// Pod object into a Pod (agent.LocalPod). One type for both sides: ofctl returns it, the agent
// consumes it through its Dataplane interface.
type PodPort struct {
	// Namespace and Name identify the pod: from external_ids pod-namespace and pod-name (srcip-cni,
	// Antrea) or iface-id=<namespace>_<pod> (OVN-Kubernetes; split at the first '_', which neither
	// a namespace nor a pod name may contain).
	Namespace, Name string
	// Interface is the OVSDB Interface name (Interface.name, the host end of the pod's veth).
	Interface string
	// MAC is external_ids:attached-mac, the pod's own MAC address.
	MAC net.HardwareAddr
	// OFPort is the interface's OpenFlow port number on the bridge (Interface.ofport, > 0).
	OFPort int
	// IPs are the pod addresses from external_ids:ip_addresses (comma-separated, plain or CIDR)
	// or external_ids:ip; empty when neither is set (the Pod object's status.podIPs is used).
	IPs []netip.Addr
	// UID is the pod's metadata.uid from external_ids:pod-uid (srcip-cni) or iface-id-ver
	// (OVN-Kubernetes); empty when neither is set. It tells a pod's port from the lingering port
	// of a predecessor with the same namespace and name.
	UID string
	// Chained: the port is srcip-cni's chained-mode egress interface (external_ids
	// srcip-cni-mode=chained); IPs are the main CNI's addresses (Pod.Chained).
	Chained bool
	// Acked is external_ids:srcip-agent-flows, the cookie of the pod flow set the agent last
	// acknowledged on this port for srcip-cni's ADD (0: none yet; ofctl.ExtIDAgentFlows).
	Acked Cookie
}

// Equal reports whether p and o hold the same values.
func (p *PodPort) Equal(o *PodPort) bool {
	return p.Namespace == o.Namespace && p.Name == o.Name && p.Interface == o.Interface &&
		slices.Equal(p.MAC, o.MAC) && p.OFPort == o.OFPort && slices.Equal(p.IPs, o.IPs) &&
		p.UID == o.UID && p.Chained == o.Chained && p.Acked == o.Acked
}
