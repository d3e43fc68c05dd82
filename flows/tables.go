package flows

import "fmt"

// Table is an OpenFlow table id of the pipeline. IDs are fixed; docs/pipeline.md mirrors them.
// Each table's comment says what it matches and where packets go next.
type Table int

// br-ex tables.
const (
	// ExClassifier (br-ex table 0) holds the hooks: IP (and IPv6 on a node that runs IPv6)
	// from the uplink to br-ex's MAC -> ExServiceLB; anything from the patch port -> ExFromInt; frames to br-ex's MAC -> LOCAL;
	// secondary uplinks <-> LOCAL by their subnets (secondaryUplinkFlows); everything else
	// NORMAL (the installer's default, for ports the agent does not own).
	ExClassifier Table = 0
	// ExServiceLB matches the entry points (NodePort on node addresses, LB ingress IPs,
	// externalIPs) of opted-in Service ports and sends them through ct(zone=ZoneService,nat) to
	// ExServiceCT. Anything else goes to the host (LOCAL), untouched (path P5).
	ExServiceLB Table = 40
	// ExServiceCT sees entry-point packets after conntrack: established/related/already-DNATed
	// ones go to br-int, and so do invalid ones of a DNATed connection (+inv+dnat, C31: never
	// the host; the endpoint's node judges them); new ones (TCP on a node address: SYN only; on
	// an LB IP or externalIP: any, so that a moved connection is picked up) go to the Service
	// port's select group, whose bucket commits the DNAT and records the client's L2 neighbour
	// MAC in ct_label; anything else (e.g. a host connection that happens to use a NodePort as
	// its local port) goes to LOCAL.
	ExServiceCT Table = 41
	// ExServiceOut receives the packet after the bucket's ct(commit,nat) and sends it to br-int.
	ExServiceOut Table = 42
	// ExServiceAffinity holds only learned flows (KindLearnedAffinity): per sessionAffinity
	// Service port (RegAffinityPort) and client IP, the endpoint the client's last new connection
	// went to (RegAffinityEndpoint, RegAffinityEndpointPort), with the Service's timeoutSeconds
	// as idle timeout. ExServiceCT resubmits a new connection of such a port here; a miss loads
	// nothing.
	ExServiceAffinity Table = 43
	// ExServiceAffinityOut sends a new connection of a sessionAffinity port to the endpoint in
	// RegAffinityEndpoint/RegAffinityEndpointPort while it is one of the port's: it learns the
	// choice into ExServiceAffinity and commits the DNAT (to ExServiceOut). Anything else (no
	// learned choice, or an endpoint that left: gone, not ready, terminating) goes to the port's
	// select group, whose bucket loads its endpoint into those registers and resubmits here.
	ExServiceAffinityOut Table = 44
	// ExFromInt takes packets coming from br-int (service replies) through ct(zone=ZoneService,nat)
	// (IPv6 ones through ct(zone=ZoneService6,nat)).
	ExFromInt Table = 45
	// ExServiceReply sends un-DNATed replies (+est+rpl in ZoneService, or +inv+snat: invalid
	// here but established on the endpoint's node) out of the uplink, to the MAC the request
	// came from (ct_label) and from br-ex's MAC. Anything else is dropped.
	ExServiceReply Table = 46
	// ExNDAdvert (the active gateway of an IPv6 egress IP) writes br-ex's MAC into the Target
	// Link-Layer Address option of the Neighbor Advertisement ExClassifier made of a
	// solicitation for the egress IP and sends it back out of the uplink it came from.
	ExNDAdvert Table = 47
)

// br-int tables.
const (
	// IntClassifier (br-int table 0) sets the packet-source register (RegSource) by in_port and
	// Geneve VNI, applies the pod spoof guard and sends pod IP traffic through
	// ct(zone=ZonePod) to IntPodEgressCT; pod ARP goes to IntARPResponder; service replies
	// arriving by tunnel (VNI VNIServiceReply) go straight to br-ex. With a gateway port, IP from
	// it goes through ct(zone=ZonePod) to IntGatewayCT and pod traffic from Geneve to
	// IntTunnelCT; ARP requests from it go to IntARPResponder.
	IntClassifier Table = 0
	// IntPodEgressCT sees pod packets after conntrack: replies of connections that came in by
	// tunnel go back over Geneve to the ingress node (tun_dst from ct_label); replies of
	// connections that came in from br-ex go to br-ex; replies of connections that came from the
	// gateway port go to IntGatewayOut; everything else goes to IntL3Forwarding.
	IntPodEgressCT Table = 50
	// IntTunnelCT sees pod traffic that arrived by Geneve (VNI VNIPod) after a ct(zone=ZonePod)
	// lookup, when the node has a gateway port: replies of connections that entered br-int from
	// the gateway port (OriginGateway; e.g. a pod's connection to a ClusterIP that the host
	// DNATed to a pod on another node) go to IntGatewayOut, so the host un-DNATs them; everything
	// else goes to IntL3Forwarding.
	IntTunnelCT Table = 51
	// IntGatewayCT sees what the host sent into br-int through the gateway port, after a
	// ct(zone=ZonePod) lookup: a new connection is committed with OriginGateway, established and
	// related packets pass, both to IntL3Forwarding; invalid ones are dropped.
	IntGatewayCT Table = 52
	// IntARPResponder answers ARP requests for addresses in this node's pod CIDRs (the pod gateway
	// address among them) with the gateway MAC; with a gateway port, the host's requests for
	// addresses in any node's pod CIDRs too.
	IntARPResponder Table = 55
	// IntNDResponder (a node with an IPv6 pod CIDR) answers the IPv6 Neighbor Solicitations
	// IntClassifier lets in (a pod's from its own address, the host's from the gateway port)
	// with this node's IPv6 gateway MAC, whatever the target (proxy neighbour discovery, as
	// IntARPResponder's proxy ARP): the solicitation is rewritten into the advertisement
	// (ndAnswer) and goes on to IntNDAdvert. Duplicate address detection (source ::) is dropped.
	IntNDResponder Table = 56
	// IntNDAdvert writes the answering MAC (the advertisement's Ethernet source) into its Target
	// Link-Layer Address option and sends it back to the port the solicitation came from.
	IntNDAdvert Table = 57
	// IntL3Forwarding routes by destination IP: local pods (rewrite MACs, RegOutPort) ->
	// IntPodIngress; other nodes' pod CIDRs -> Geneve (VNI by source). With a gateway port, a
	// local pod's packet for anything else (node addresses, ClusterIPs, the outside world) and a
	// remote pod's packet for this node's gateway address go to IntGatewayOut; other misses are
	// dropped.
	IntL3Forwarding Table = 60
	// IntPodIngress sends connections entering a local pod from br-ex or from the service tunnel
	// through ct(zone=ZonePod) to IntPodIngressCT; other packets (pod to pod) are output to
	// RegOutPort.
	IntPodIngress Table = 65
	// IntPodIngressCT commits a new connection from br-ex or the service tunnel in ZonePod with
	// its origin (ct_mark, and the ingress node in ct_label) and outputs it to RegOutPort; packets
	// of an existing connection are output without a commit while its recorded ingress node is
	// live (nothing a later packet carries can change the recorded origin); a connection whose
	// ingress node is down is re-pointed to the node its packets now come through; anything else
	// is dropped.
	IntPodIngressCT Table = 66
	// IntGatewayOut hands a packet to the host through the gateway port: a new connection (a pod
	// or a remote pod opening one to a node address, a ClusterIP, the outside world) is committed
	// in ZonePod first, so that the host's answers are +est; eth_dst := the gateway port's MAC.
	IntGatewayOut Table = 70
	// IntEgressOut sends a local pod's egress packet (RegEgressIP set by IntL3Forwarding) to the
	// active gateway of its egress IP: over Geneve (VNIEgress, inner eth_dst EgressMAC) or, on
	// the gateway itself, to IntEgressSNAT; an egress IP without a gateway, or unknown, drops
	// (fail closed, C29).
	IntEgressOut Table = 75
	// IntEgressSNAT (active gateway) commits the packet in ZoneEgress with nat(src=egress IP)
	// and the pod's node (tun_src; tun_ipv6_src in CTLabelEgressNode6 over an IPv6 underlay) in
	// CTLabelEgressNode, then IntEgressSend. Only egress IPs this
	// node is the active gateway of have a flow; anything else is dropped.
	IntEgressSNAT Table = 76
	// IntEgressSend (active gateway) hands the SNATed packet to br-ex (to its MAC; br-ex gives
	// it to the host, which routes it out).
	IntEgressSend Table = 77
	// IntEgressReply (active gateway) sees replies to an egress IP after ct(zone=ZoneEgress,nat)
	// un-SNATed them: +est+rpl / +rel go back over Geneve (VNIEgressReply) to CTLabelEgressNode
	// (CTLabelEgressNode6 over an IPv6 underlay), or to IntEgressReplyCT for a pod on this node; anything else is dropped.
	IntEgressReply Table = 78
	// IntEgressReplyCT (pod's node; numbered below IntL3Forwarding, which it goes to) sees an un-SNATed reply after ct(zone=ZonePod): only a reply
	// (+est+rpl, +rel) of a connection the pod opened on the egress path (EgressPath) goes on to
	// IntL3Forwarding; anything else (an outside host reaching a pod through the egress IP) is
	// dropped.
	IntEgressReplyCT Table = 53
)

// tableNames lists every table of each bridge with its name, in pipeline order: the one place
// names are declared (docs, goldens, OVSDB Flow_Table names, srcipctl).
var tableNames = map[Bridge][]struct {
	id   Table
	name string
}{
	BrEx: {{ExClassifier, "ExClassifier"}, {ExServiceLB, "ExServiceLB"}, {ExServiceCT, "ExServiceCT"},
		{ExServiceOut, "ExServiceOut"}, {ExServiceAffinity, "ExServiceAffinity"}, {ExServiceAffinityOut, "ExServiceAffinityOut"},
		{ExFromInt, "ExFromInt"}, {ExServiceReply, "ExServiceReply"}, {ExNDAdvert, "ExNDAdvert"}},
	BrInt: {{IntClassifier, "IntClassifier"}, {IntPodEgressCT, "IntPodEgressCT"}, {IntTunnelCT, "IntTunnelCT"},
		{IntGatewayCT, "IntGatewayCT"}, {IntEgressReplyCT, "IntEgressReplyCT"}, {IntARPResponder, "IntARPResponder"},
		{IntNDResponder, "IntNDResponder"}, {IntNDAdvert, "IntNDAdvert"},
		{IntL3Forwarding, "IntL3Forwarding"}, {IntPodIngress, "IntPodIngress"},
		{IntPodIngressCT, "IntPodIngressCT"}, {IntGatewayOut, "IntGatewayOut"},
		{IntEgressOut, "IntEgressOut"}, {IntEgressSNAT, "IntEgressSNAT"}, {IntEgressSend, "IntEgressSend"},
		{IntEgressReply, "IntEgressReply"}},
}

// Name returns the table's name as used in docs, goldens and srcipctl ("table<N>" when b has no
// such table).
func (t Table) Name(b Bridge) string {
	for _, e := range tableNames[b] {
		if e.id == t {
			return e.name
		}
	}
	return fmt.Sprintf("table%d", int(t))
}

// String returns the numeric id.
func (t Table) String() string { return fmt.Sprintf("%d", int(t)) }

// TableNames lists every table of a bridge with its name (for OVSDB Flow_Table names and docs).
func TableNames(b Bridge) map[Table]string {
	m := make(map[Table]string, len(tableNames[b]))
	for _, e := range tableNames[b] {
		m[e.id] = e.name
	}
	return m
}
