package flows

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"
)

// Protocol is the L4 protocol of a Service port, as in core/v1 ServicePort.protocol.
type Protocol string

// Protocols the pipeline programs. SCTP Service ports are ignored by the builder.
const (
	TCP Protocol = "TCP"
	UDP Protocol = "UDP"
)

// State is everything the pipeline of ONE node depends on. It is built by the agent from its
// state source (Kubernetes or a manifests directory) and from OVSDB; the builders read it only.
// The object maps are the agent's model itself, updated in place between syncs (no copy per
// sync); NewState builds one from lists. All addresses are netip values; a zero value means
// "absent".
type State struct {
	// Node is the name of the node this state is for (the agent's own node).
	Node string
	// Ports holds the OpenFlow port numbers and MAC addresses discovered through OVSDB.
	Ports Ports
	// NodePortAddresses are the addresses of this node on which NodePorts are served, of both
	// families, sorted (IPv4 first) (default: the Node's InternalIP and ExternalIP addresses;
	// see the agent's --nodeport-addresses flag). A ServicePort's NodePort is served on those of
	// its Family.
	NodePortAddresses []netip.Addr
	// Nodes holds every node of the cluster, this one included, by name.
	Nodes map[string]Node
	// Pods holds the pods attached to this node's br-int, by Pod.Key.
	Pods map[Key]Pod
	// Services holds the opted-in Service ports (annotation ovs-srcip.io/preserve-source-ip
	// "true" and externalTrafficPolicy Cluster) by ServicePort.Key, with the entry points other
	// Services own already removed. Services that did not opt in never appear here. Write it
	// with SetService and DeleteService only (they keep udpServices).
	Services map[Key]ServicePort
	// udpServices are the keys of Services' UDP ports: every sync reads their entry points
	// (KindUDPFragments), which must not cost a walk over every Service port.
	udpServices map[Key]struct{}
	// Drains are the entry points of Service ports that went away while ZoneService still holds
	// connections to them (decided by the agent; see KindServiceDrain).
	Drains map[EntryPoint]bool
	// Egress holds the usable egress IPs of EgressGateway policies (conflicting ones already
	// refused by the agent), by address: one KindEgress and one KindEgressAnnounce flow set
	// each. Nil: no egress.
	Egress map[netip.Addr]EgressIP
	// EgressClusterCIDRs are the cluster's Service and node networks (the agent's
	// --egress-cluster-cidrs): never sent to an egress gateway, like every node's pod CIDRs and
	// InternalIP.
	EgressClusterCIDRs []netip.Prefix
	// NonMasqueradeCIDRs are the destinations pods reach with their own IP and the sources that
	// reach pods by their IP through any node (routed pods, routed.go; NonMasqueradeSet of the
	// agent's --non-masquerade-cidrs and --masquerade-link-local). Nil: routed pods are off.
	NonMasqueradeCIDRs []netip.Prefix
}

// EgressIP is one egress IP of an EgressGateway and its active gateway.
type EgressIP struct {
	// IP is the egress IP, IPv4 or IPv6 (KindEgress builds the path of its family).
	IP netip.Addr
	// Policy is the EgressGateway's name (logs, Events).
	Policy string
	// Gateway is the name of the node that is the active gateway (the Lease holder); empty
	// when there is none: the pods' egress traffic is dropped.
	Gateway string
	// ReplyBlocks are, on the active gateway only (empty elsewhere), the egress IP's port
	// blocks (the EgressGateway's status.portBlocks, released ones left out) with the node of
	// each block's pod (status.nodes[].pods): the gateway's stateless reply path. A TCP or UDP
	// packet to the egress IP that its ZoneEgress has no connection for (a server's answer that
	// crosses a failover or a rolling upgrade before the pod's next packet re-commits the
	// session here) is sent to the node whose pod owns the destination port's block, which maps
	// it back with its ZonePod entry or drops it (BuildEgress, docs/egress.md "Takeover").
	ReplyBlocks []EgressReplyBlock
}

// EgressReplyBlock is one port block of an egress IP and the node of its pod.
type EgressReplyBlock struct {
	// First..First+Size-1 are the block's ports: Size a power of two, First aligned to it
	// (egressv1.PortBlock). Other blocks are left out of the reply path.
	First, Size uint16
	// Node is the name of the pod's node (a key of State.Nodes, or State.Node).
	Node string
}

// PodEgress is how one local pod's traffic leaves through an egress gateway.
type PodEgress struct {
	// IP is the egress IP the pod uses (a key of State.Egress).
	IP netip.Addr
	// Destinations are the networks sent through the gateway (empty: 0.0.0.0/0).
	Destinations []netip.Prefix
	// Excluded are networks that keep the host path (the policy's excludedDestinations).
	Excluded []netip.Prefix
	// Policy is the EgressGateway's name.
	Policy string
	// PortFirst..PortLast is the pod's source-port block for this egress IP (the
	// EgressGateway's status.portBlocks): the pod's node maps the source port of every TCP and
	// UDP connection to the destinations into it (ct nat in ZonePod), so that the egress IP's
	// gateways see ports no other pod uses. Zero: no block (yet): see PortsExhausted.
	PortFirst, PortLast uint16
	// PortsExhausted: the pod has no block because the pool of its egress IP is exhausted (the
	// allocation left it waiting): its new TCP and UDP connections to the destinations are
	// dropped (DropEgressNoPortBlock, fail closed). Without a block and without it (the
	// allocation is pending: the status writer has not written the pod's block yet, or it is an
	// agent that allocates none, during an upgrade) they go through the gateway as before port
	// blocks, with the pod's own source port (docs/egress.md "Port blocks").
	PortsExhausted bool
}

// HasPorts reports whether e carries a port block.
func (e *PodEgress) HasPorts() bool { return e.PortFirst != 0 && e.PortFirst <= e.PortLast }

// NewState returns the State of node with the given objects (for tests and tools; the agent fills
// the maps incrementally).
func NewState(node string, ports Ports, nodePortAddrs []netip.Addr, nodes []Node, pods []Pod, svcs []ServicePort) *State {
	st := &State{Node: node, Ports: ports, NodePortAddresses: nodePortAddrs,
		Nodes: map[string]Node{}, Pods: map[Key]Pod{}, Services: map[Key]ServicePort{}, Drains: map[EntryPoint]bool{}}
	for _, n := range nodes {
		st.Nodes[n.Name] = n
	}
	for _, p := range pods {
		st.Pods[p.Key()] = p
	}
	for _, sp := range svcs {
		st.SetService(sp)
	}
	return st
}

// ReserveServices makes room for n Service ports when State holds none (a first full sync).
func (st *State) ReserveServices(n int) {
	if len(st.Services) == 0 {
		st.Services = make(map[Key]ServicePort, n)
	}
}

// SetService puts sp into Services under its key.
func (st *State) SetService(sp ServicePort) {
	k := sp.Key()
	if st.Services == nil {
		st.Services = map[Key]ServicePort{}
	}
	st.Services[k] = sp
	if k.Protocol == UDP {
		if st.udpServices == nil {
			st.udpServices = map[Key]struct{}{}
		}
		st.udpServices[k] = struct{}{}
	}
}

// DeleteService removes the Service port k from Services.
func (st *State) DeleteService(k Key) {
	delete(st.Services, k)
	delete(st.udpServices, k)
}

// Ports are the OpenFlow port numbers (ofport, see ovs-vswitchd.conf.db(5) Interface.ofport)
// and MAC addresses the pipeline outputs to. All are required; Validate reports zero values.
type Ports struct {
	// ExUplink is the physical uplink's ofport on br-ex.
	ExUplink int
	// ExPatch is the ofport on br-ex of the patch port that leads to br-int.
	ExPatch int
	// IntPatch is the ofport on br-int of the patch port that leads to br-ex.
	IntPatch int
	// IntTunnel is the ofport on br-int of the flow-based Geneve port (RFC 8926;
	// options:remote_ip=flow, options:key=flow).
	IntTunnel int
	// ExMAC is br-ex's own MAC address: the source MAC of every reply leaving the uplink.
	ExMAC net.HardwareAddr
	// TunnelUDPPort is the Geneve port's UDP destination port (options:dst_port), 6081 when 0.
	// Tunnel packets addressed to this node are handed to the host before any Service entry point
	// is looked at, so no Service can capture them.
	TunnelUDPPort int
	// IntGateway is the ofport on br-int of the gateway port (an internal port, srcip-gw0, that
	// holds the pod gateway address on the host: docs/pipeline.md, "Host connectivity"); 0 when
	// the node has none: the pipeline then has no host connectivity flows.
	IntGateway int
	// GatewayMAC is the gateway port's MAC address (Interface.mac_in_use): the Ethernet
	// destination of every packet br-int hands to the host.
	GatewayMAC net.HardwareAddr
	// Secondary are br-ex's secondary uplinks (node-setup --egress-interface, docs/egress.md
	// "Secondary NICs"), sorted by OFPort: NICs of other segments that carry only the traffic of
	// their own subnets (host traffic sourced there and egress IPs inside them). Empty on most
	// nodes.
	Secondary []SecondaryUplink
}

// SecondaryUplink is one secondary uplink of br-ex: its ofport and the IPv4 subnets of its
// segment (the NIC's addresses, recorded by node-setup in Interface.external_ids).
type SecondaryUplink struct {
	// Name is the NIC's name (e.g. "eth1"), for messages.
	Name string
	// OFPort is its ofport on br-ex.
	OFPort int
	// Subnets are its segment's IPv4 networks (e.g. 203.0.113.0/24).
	Subnets []netip.Prefix
	// Subnets6 are its segment's IPv6 networks (e.g. 2001:db8:0:113::/64; node-setup records the
	// NIC's global IPv6 addresses' networks). They get no flow: node-setup has no IPv6 source
	// routing for the NIC, so an IPv6 egress IP inside one is declined on this node
	// (SecondarySubnet6For), never served on the primary uplink.
	Subnets6 []netip.Prefix
	// Subnets6Unreadable is why the NIC's recorded IPv6 subnets could not be read ("" when they
	// could): a hand-edited ovs-srcip.io/egress-subnets6. The NIC keeps its IPv4 Subnets, and every
	// IPv6 egress IP is declined on this node (SecondarySubnet6For), since none can be told apart
	// from one on that NIC's segment.
	Subnets6Unreadable string
}

// SecondarySubnet6For returns the secondary uplink and the IPv6 subnet of it (Subnets6) that
// contains IPv6 address ip, ok false when none does. An IPv6 egress IP there must leave through
// that NIC, which this node cannot do yet (docs/egress.md "Secondary NICs"): BuildEgress and
// BuildEgressAnnounce decline it, and the agent neither campaigns for it nor lets it be served
// here silently. where is the phrase for messages: "inside IPv6 subnet S of secondary NIC N",
// or, when a NIC's IPv6 subnets are unreadable (Subnets6Unreadable; ok for every IPv6 ip, subnet
// then the zero Prefix), "not checkable against the IPv6 subnets of secondary NIC N (...)".
func (st *State) SecondarySubnet6For(ip netip.Addr) (uplink string, subnet netip.Prefix, where string, ok bool) {
	if !ip.Is6() || ip.Is4In6() {
		return "", netip.Prefix{}, "", false
	}
	for _, s := range st.Ports.Secondary {
		for _, n := range s.Subnets6 {
			if n.Bits() > 0 && n.Contains(ip) {
				return s.Name, n, "inside IPv6 subnet " + n.String() + " of secondary NIC " + s.Name, true
			}
		}
	}
	for _, s := range st.Ports.Secondary {
		if s.Subnets6Unreadable != "" {
			return s.Name, netip.Prefix{}, "not checkable against the IPv6 subnets of secondary NIC " + s.Name +
				" (its Interface.external_ids ovs-srcip.io/egress-subnets6 is unreadable: " + s.Subnets6Unreadable +
				"; re-run node-setup or fix the key)", true
		}
	}
	return "", netip.Prefix{}, "", false
}

// UplinkFor returns the br-ex port on which ip is announced and reached: the secondary uplink
// (SecondaryUplinks: only its usable subnets) whose subnet contains ip (the first by OFPort when
// several do), else Ports.ExUplink.
func (st *State) UplinkFor(ip netip.Addr) int {
	sec, _ := st.SecondaryUplinks()
	for _, s := range sec {
		for _, n := range s.Subnets {
			if n.Contains(ip) {
				return s.OFPort
			}
		}
	}
	return st.Ports.ExUplink
}

// SecondaryUplinks returns Ports.Secondary without the subnets the pipeline must not route to a
// secondary NIC, and a problem per subnet left out: a non-IPv4 or zero-length prefix, and one that
// contains this node's InternalIP or a NodePort address (the host's own traffic on the primary
// segment would leave through that NIC). node-setup never records such a subnet; a hand edit of
// Interface.external_ids can. An uplink left without subnets keeps its in_port flow only.
func (st *State) SecondaryUplinks() ([]SecondaryUplink, []string) {
	var out []SecondaryUplink
	var problems []string
	own := slices.Clone(st.NodePortAddresses)
	if n, ok := st.Nodes[st.Node]; ok && n.InternalIP.IsValid() {
		own = append(own, n.InternalIP)
	}
	for _, s := range st.Ports.Secondary {
		u := SecondaryUplink{Name: s.Name, OFPort: s.OFPort, Subnets6: s.Subnets6, Subnets6Unreadable: s.Subnets6Unreadable}
		for _, n := range s.Subnets {
			bad := ""
			switch {
			case !n.Addr().Is4():
				bad = "not IPv4"
			case n.Bits() == 0:
				bad = "every address"
			default:
				for _, a := range own {
					if n.Contains(a) {
						bad = "contains this node's address " + a.String()
						break
					}
				}
			}
			if bad != "" {
				problems = append(problems, fmt.Sprintf("secondary uplink %s: subnet %s ignored (%s)", s.Name, n, bad))
				continue
			}
			u.Subnets = append(u.Subnets, n)
		}
		out = append(out, u)
	}
	return out, problems
}

// HasGateway reports whether the node's gateway port is known (ofport and MAC).
func (p Ports) HasGateway() bool { return p.IntGateway > 0 && len(p.GatewayMAC) == 6 }

// DefaultTunnelUDPPort is the IANA Geneve port (RFC 8926).
const DefaultTunnelUDPPort = 6081

func (p Ports) tunnelUDPPort() uint16 {
	if p.TunnelUDPPort <= 0 || p.TunnelUDPPort > 65535 {
		return DefaultTunnelUDPPort
	}
	return uint16(p.TunnelUDPPort)
}

// Node is one cluster node as the pipeline sees it (from a core/v1 Node).
type Node struct {
	// Name is metadata.name.
	Name string
	// InternalIP is the node's InternalIP from status.addresses; it is the Geneve underlay
	// address (outer IPv4 source/destination) of that node.
	InternalIP netip.Addr
	// PodCIDRs is spec.podCIDRs: the pod subnets routed to that node, of both families, masked,
	// in spec order (the agent's ConvertNode).
	PodCIDRs []netip.Prefix
	// InternalIPv6 is the node's first IPv6 InternalIP (the zero Addr: none). It is an address
	// of that node's host, not the underlay: the source of the host's IPv6 connections to pods
	// from a socket bound to it, which a dual-stack node with a gateway port commits with
	// OriginNode like IPv4's from InternalIP (BuildNode, node6Flows).
	InternalIPv6 netip.Addr
	// Rank orders this node's flow set against others that render the same flow (a Node that is
	// not Ready, e.g. a stale object whose pod CIDR was given to another node, loses).
	Rank Rank
	// Down is true when the Node's Ready condition is present and not True (the node or its
	// kubelet is gone or unreachable): connections recorded as entering through it may be taken
	// over by the ingress node their packets now come from (BuildIntBase, BuildNode). A Node
	// without a Ready condition (a manifest) is not down.
	Down bool
}

// Pod is a pod attached to this node's br-int, found through OVSDB Interface.external_ids.
type Pod struct {
	Namespace, Name string
	// IPs are status.podIPs (or the interface's ip_addresses external id).
	IPs []netip.Addr
	// MAC is external_ids:attached-mac: the pod interface's MAC address.
	MAC net.HardwareAddr
	// OFPort is the pod interface's ofport on br-int.
	OFPort int
	// Rank orders this pod's flow set against others that render the same flow: a pod port whose
	// IPs its Pod object confirms wins over one the API does not vouch for (a stale port of a
	// crashed CNI, a hostile OVSDB writer).
	Rank Rank
	// Egress, when set, sends the pod's new connections to its destinations through an egress
	// gateway (BuildPod, docs/egress.md).
	Egress *PodEgress
	// Egress6, when set, does the same for the pod's IPv6 connections with an IPv6 egress IP
	// (its own policy: each family follows the oldest policy that selects the pod and has a
	// usable egress IP of that family). Egress governs IPv4 only, Egress6 IPv6 only.
	Egress6 *PodEgress
	// Chained is true for the egress interface srcip-cni adds in chained mode beside another
	// main CNI (external_ids srcip-cni-mode=chained; docs/egress.md#chained-mode): IPs are the
	// main CNI's addresses, which need not be inside this node's pod CIDRs; only the pod's egress
	// traffic and its replies use the port (BuildPod).
	Chained bool
}

// Key identifies the pod's flow set.
func (p *Pod) Key() Key { return Key{Kind: KindPod, Namespace: p.Namespace, Name: p.Name} }

// ServicePort is one port of an opted-in Service (core/v1 Service spec.ports[i]) together with
// the entry points it is reachable on and its usable endpoints.
type ServicePort struct {
	// Namespace, Name identify the Service; PortName is spec.ports[i].name (may be empty).
	Namespace, Name, PortName string
	// Protocol is spec.ports[i].protocol.
	Protocol Protocol
	// Family is the IP family this ServicePort serves: every address below (LoadBalancerIPs,
	// ExternalIPs, SourceRanges, Endpoints) is of this family, and its NodePort is served on the
	// NodePort addresses of this family. A dual-stack Service port is two ServicePorts, one per
	// family (spec.ipFamilies; EndpointSlices by addressType).
	Family Family
	// Port is spec.ports[i].port: the port on LoadBalancer ingress IPs and externalIPs.
	Port uint16
	// NodePort is spec.ports[i].nodePort, 0 when the Service has none.
	NodePort uint16
	// LoadBalancerIPs are status.loadBalancer.ingress[].ip.
	LoadBalancerIPs []netip.Addr
	// ExternalIPs are spec.externalIPs.
	ExternalIPs []netip.Addr
	// FilterSources is true when the Service sets spec.loadBalancerSourceRanges: new connections
	// to its LoadBalancer IPs and externalIPs are then let in only from SourceRanges (an empty
	// list lets nobody in: every range was malformed or IPv6). NodePorts are never filtered.
	FilterSources bool
	// SourceRanges are the valid IPv4 CIDRs of spec.loadBalancerSourceRanges (docs/field-cases.md#c32).
	SourceRanges []netip.Prefix
	// Endpoints are the endpoints new connections may be sent to, on any node: the ready ones
	// of the Service's EndpointSlices, or when none is ready the serving terminating ones
	// (KEP-1669). An empty list drops new connections (the select group has no buckets). When
	// one of them is outside every node's pod CIDRs (a hostNetwork endpoint), the port is
	// declined: no flows at all, the host serves it (docs/field-cases.md#c34).
	Endpoints []Endpoint
	// AffinitySeconds is spec.sessionAffinityConfig.clientIP.timeoutSeconds (default 10800) when
	// spec.sessionAffinity is ClientIP, 0 without affinity: a client's new connections go to the
	// endpoint its previous one went to while it opens one at least every AffinitySeconds
	// (capped at MaxAffinitySeconds on a node; docs/pipeline.md "Session affinity").
	AffinitySeconds uint32
	// AffinityPeriod numbers the AffinitySeconds-long period of wall-clock time this port's flows
	// were built in: floor(unix seconds / AffinitySeconds), computed alike on every node
	// (AffinityPeriodAt). It gives the select group's hash basis (selection_method_param,
	// AffinityBasis), so a
	// client whose learned choice idled out is hashed afresh in a later period, as kube-proxy
	// chooses afresh after timeoutSeconds, while every node agrees within one. 0 without affinity.
	AffinityPeriod uint64
	// GroupID is the OpenFlow select group of this Service port on br-ex, from a GroupIDs
	// allocator; it must be in the range that GroupIDs hands out.
	GroupID uint32
	// Rank orders this port's flow set against others that render the same flow (the older
	// Service wins).
	Rank Rank
}

// Key identifies the Service port (namespace/name:portName/protocol, then /IPv6 for the IPv6
// family).
func (s *ServicePort) Key() Key {
	return Key{Kind: KindServicePort, Namespace: s.Namespace, Name: s.Name, Port: s.PortName, Protocol: s.Protocol, Family: s.Family}
}

// Endpoint is one backend of a Service port (discovery.k8s.io/v1 Endpoint plus the port).
type Endpoint struct {
	// IP is the endpoint address (a pod IP inside some node's PodCIDRs).
	IP netip.Addr
	// Port is the target port number from the EndpointSlice's ports.
	Port uint16
	// NodeName is the endpoint's nodeName (informational; routing uses the pod CIDRs).
	NodeName string
}

// Rank orders flow sets that render the same flow (bridge, table, priority and match): the lower
// Tier wins, then the older Created (zero: unknown, last), then kind and key. It depends only on
// the cluster state, so every sync, node and restart picks the same winner. A kind's base rank
// comes from the registry (KindSpec.Tier); objects add what the API says of them.
type Rank struct {
	// Tier is added to the kind's tier: 0 for an object the API vouches for (a Ready Node, a Pod
	// whose status lists the port's IPs), 1 for one it knows but does not vouch for, 2 for one it
	// does not know.
	Tier int
	// Created is the object's metadata.creationTimestamp.
	Created time.Time
}
