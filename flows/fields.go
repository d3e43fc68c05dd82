package flows

import (
	"fmt"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// Pipeline fields, declared once: conntrack zones, register fields and their values (marks),
// ct_mark and ct_label bit ranges, Geneve VNIs and priorities. Loads and matches are derived from
// the declarations (RegMark.Load, RegMark.Match, CTMark.Load, CTMark.Match), so a value can only
// be loaded into, or matched on, the field it was declared for: a ct_mark value cannot be loaded
// into a register. docs/pipeline.md's field reference is generated from Fields() (see
// TestPipelineDoc; regenerate with `go test ./flows -update`).
//
// Sources: ovs-fields(7) ("reg0".."reg15", "ct_mark", "ct_label", "tun_id"), ovs-actions(7)
// ("load", "move", "ct"), RFC 8926 (Geneve).

// Conntrack zones (ovs-actions(7) "ct"). IPv6 Service traffic has its own zone, ZoneService6
// (0xfb10), so that zone limits and conntrack dumps are per family; 0xfb11 is kept for IPv6 pods
// (docs/pipeline.md).
const (
	// ZoneService holds the DNAT of external Service traffic on the ingress node (br-ex). Only the
	// select group buckets commit into it, so every entry in it is ours.
	ZoneService uint16 = 0xfb00
	// ZoneService6 is ZoneService for IPv6: the DNAT of an IPv6 ServicePort's external traffic
	// on the ingress node (Family.ServiceZone).
	ZoneService6 uint16 = 0xfb10
	// ZonePod tracks traffic to and from local pods on br-int. Connections that enter a pod from
	// br-ex or from the service tunnel are committed here with their origin (CTMark values).
	ZonePod uint16 = 0xfb01
	// ZoneEgress holds the SNAT of egress traffic to an egress IP on its active gateway node
	// (br-int, KindEgress); only the egress flow sets commit into it.
	ZoneEgress uint16 = 0xfb02
	// ZoneEgress6 is ZoneEgress for IPv6: the SNAT of IPv6 egress traffic to an IPv6 egress IP
	// on its active gateway node (br-int, KindEgress), so that zone limits and conntrack dumps
	// are per family.
	ZoneEgress6 uint16 = 0xfb12
)

// RegField is a bit range [Start..End] of one 32-bit NXM register (ovs-fields(7) "reg0".."reg15").
// Declare it once with NewRegField; values are declared as RegMarks of the field.
type RegField struct {
	bitRange
	name string
	reg  int
}

// bitRange is bits start..end (inclusive) of a field.
type bitRange struct{ start, end uint8 }

// mask is the range's bits in place.
func (r bitRange) mask() uint32 { return uint32((uint64(1)<<(r.end-r.start+1) - 1) << r.start) }

// fits reports whether value v (unshifted) fits the range.
func (r bitRange) fits(v uint32) bool { return uint64(v)<<r.start&^uint64(r.mask()) == 0 }

// NewRegField declares bits start..end (inclusive, 0..31) of register reg (0..15).
func NewRegField(name string, reg int, start, end uint8) *RegField {
	if reg < 0 || reg > 15 || start > end || end > 31 {
		panic(fmt.Sprintf("flows: bad register field %s reg%d[%d..%d]", name, reg, start, end))
	}
	return &RegField{bitRange: bitRange{start, end}, name: name, reg: reg}
}

// Name is the field's Go name (as in docs/pipeline.md).
func (f *RegField) Name() string { return f.name }

// whole reports whether the field is the whole register.
func (f *RegField) whole() bool { return f.start == 0 && f.end == 31 }

// ref is the field as load, move and output reference it.
func (f *RegField) ref() of.FieldRef {
	if f.whole() {
		return of.Ref(of.Reg(f.reg))
	}
	return of.Bits(of.Reg(f.reg), uint16(f.start), uint16(f.end))
}

// NXM renders the field for load and move actions: NXM_NX_REG0[0..3], or NXM_NX_REG1[] for a
// whole register (ovs-actions(7) "The load action").
func (f *RegField) NXM() string { return f.ref().String() }

// Ref renders the field as ovs-fields(7) writes it: reg0[0..3], or reg1 for a whole register.
func (f *RegField) Ref() string {
	if f.whole() {
		return fmt.Sprintf("reg%d", f.reg)
	}
	return fmt.Sprintf("reg%d[%d..%d]", f.reg, f.start, f.end)
}

// Load loads a runtime value (an ofport, for instance) into the field. Named values are RegMarks.
func (f *RegField) Load(v uint32) of.Action { return of.Load{Value: uint64(v), Dst: f.ref()} }

// Output outputs to the port number held in the field (ovs-actions(7) "output:field").
func (f *RegField) Output() of.Action { return of.OutputField{Src: f.ref()} }

// MatchValue matches packets whose field holds v: reg3=0xc0000232 for a whole register, masked
// otherwise.
func (f *RegField) MatchValue(v uint32) of.Match {
	if f.whole() {
		return of.RegExact(of.Reg(f.reg), v)
	}
	return of.RegMatch(of.Reg(f.reg), v<<f.start, f.mask())
}

// RegMark is a named value of a RegField.
type RegMark struct {
	field *RegField
	value uint32
	doc   string
}

// NewRegMark declares value v of f; doc says what it means (docs/pipeline.md).
func NewRegMark(f *RegField, v uint32, doc string) *RegMark {
	if !f.fits(v) {
		panic(fmt.Sprintf("flows: value %#x does not fit %s", v, f.Ref()))
	}
	return &RegMark{field: f, value: v, doc: doc}
}

// Field returns the field the mark is a value of.
func (m *RegMark) Field() *RegField { return m.field }

// Value returns the mark's value (unshifted).
func (m *RegMark) Value() uint32 { return m.value }

// Load sets the field to the mark.
func (m *RegMark) Load() of.Action { return m.field.Load(m.value) }

// Match matches packets whose field holds the mark: reg0=0x1/0xf.
func (m *RegMark) Match() of.Match {
	return of.RegMatch(of.Reg(m.field.reg), m.value<<m.field.start, m.field.mask())
}

// CTMarkField is a bit range of ct_mark (ovs-fields(7) "ct_mark"), the 32-bit per-connection mark.
type CTMarkField struct {
	bitRange
	name string
}

// NewCTMarkField declares bits start..end (inclusive) of ct_mark.
func NewCTMarkField(name string, start, end uint8) *CTMarkField {
	if start > end || end > 31 {
		panic(fmt.Sprintf("flows: bad ct_mark field %s [%d..%d]", name, start, end))
	}
	return &CTMarkField{bitRange: bitRange{start, end}, name: name}
}

// Name is the field's Go name.
func (f *CTMarkField) Name() string { return f.name }

// NXM renders the field for load actions: NXM_NX_CT_MARK[0..3].
func (f *CTMarkField) NXM() string { return f.ref().String() }

func (f *CTMarkField) ref() of.FieldRef {
	return of.Bits(of.FieldCTMark, uint16(f.start), uint16(f.end))
}

// Ref renders the field as in docs: ct_mark[0..3].
func (f *CTMarkField) Ref() string { return fmt.Sprintf("ct_mark[%d..%d]", f.start, f.end) }

// CTMark is a named value of a CTMarkField.
type CTMark struct {
	field *CTMarkField
	value uint32
	doc   string
}

// NewCTMark declares value v of f; doc says what it means.
func NewCTMark(f *CTMarkField, v uint32, doc string) *CTMark {
	if !f.fits(v) {
		panic(fmt.Sprintf("flows: value %#x does not fit %s", v, f.Ref()))
	}
	return &CTMark{field: f, value: v, doc: doc}
}

// Load sets the mark on the connection; valid only in the exec of a committing CT action.
func (m *CTMark) Load() of.Action {
	return of.Load{Value: uint64(m.value), Dst: m.field.ref()}
}

// CTMarkValue returns the mark as the whole ct_mark holds it (the value shifted into its field),
// e.g. for seeding a traced flow (srcipctl trace).
func (m *CTMark) CTMarkValue() uint32 { return m.value << m.field.start }

// Match matches packets of connections carrying the mark: ct_mark=0x2/0xf.
func (m *CTMark) Match() of.Match {
	return of.CTMark(m.value<<m.field.start, m.field.mask())
}

// CTLabelField is a bit range of the 128-bit ct_label (ovs-fields(7) "ct_label"), written with
// move actions in the exec of a committing CT action and read back with move.
type CTLabelField struct {
	name       string
	start, end uint8
	zone       uint16
	doc        string
}

// NewCTLabelField declares bits start..end of ct_label, used in conntrack zone zone.
func NewCTLabelField(name string, start, end uint8, zone uint16, doc string) *CTLabelField {
	if start > end || end > 127 {
		panic(fmt.Sprintf("flows: bad ct_label field %s [%d..%d]", name, start, end))
	}
	return &CTLabelField{name: name, start: start, end: end, zone: zone, doc: doc}
}

// NXM renders the field for move actions: NXM_NX_CT_LABEL[0..47].
func (f *CTLabelField) NXM() string { return f.ref().String() }

func (f *CTLabelField) ref() of.FieldRef {
	return of.Bits(of.FieldCTLabel, uint16(f.start), uint16(f.end))
}

// Ref renders the field as in docs: ct_label[0..47].
func (f *CTLabelField) Ref() string { return fmt.Sprintf("ct_label[%d..%d]", f.start, f.end) }

// Header fields that moves read or write (ovs-fields(7); rendered as NXM_OF_ETH_SRC[] ...).
var (
	nxmEthSrc  = of.Ref(of.FieldEthSrc)
	nxmEthDst  = of.Ref(of.FieldEthDst)
	nxmTunIPv4 = of.Ref(of.FieldTunDst)
	nxmTunSrc  = of.Ref(of.FieldTunSrc)
	nxmARPOp   = of.Ref(of.FieldARPOp)
	nxmARPSHA  = of.Ref(of.FieldARPSHA)
	nxmARPTHA  = of.Ref(of.FieldARPTHA)
	nxmARPSPA  = of.Ref(of.FieldARPSPA)
	nxmARPTPA  = of.Ref(of.FieldARPTPA)
)

// ARP opcodes (RFC 826).
const (
	arpOpRequest = 1
	arpOpReply   = 2
)

// ICMP error types (RFC 792) that carry the header of the packet they are about; conntrack finds
// them +rel to that packet's connection.
const (
	icmpDestUnreachable = 3 // code 3 port unreachable, code 4 fragmentation needed (RFC 1191)
	icmpTimeExceeded    = 11
	icmpParamProblem    = 12
)

// ipFragment matches every fragment of an IPv4 datagram, the first one included (ovs-fields(7)
// "nw_frag"): later fragments carry no transport header.
var ipFragment = of.IPFrag(of.FragYes)

// Registers (per packet, on br-int).
var (
	// RegSource is reg0[0..3]: where the packet entered br-int (the Source* marks).
	RegSource = NewRegField("RegSource", 0, 0, 3)
	// RegOutPort is reg1: the ofport IntPodIngress outputs to, chosen by IntL3Forwarding.
	RegOutPort = NewRegField("RegOutPort", 1, 0, 31)
	// RegScratch is reg2: scratch space of the ARP responder (address swap).
	RegScratch = NewRegField("RegScratch", 2, 0, 31)
	// RegEgressIP is reg3: the egress IP a local pod's packet leaves with (EgressID: an IPv4
	// address, host byte order as ovs-ofctl loads it; an IPv6 one's last 32 bits), set in
	// IntL3Forwarding, read by IntEgressOut.
	RegEgressIP = NewRegField("RegEgressIP", 3, 0, 31)
)

// Registers (per packet, on br-ex): session affinity (ExServiceCT -> ExServiceAffinity ->
// ExServiceAffinityOut).
var (
	// RegAffinityPort is reg4 on br-ex: the select group id of the sessionAffinity Service port
	// a new connection is for, set by ExServiceCT; learned flows match it.
	RegAffinityPort = NewRegField("RegAffinityPort", 4, 0, 31)
	// RegAffinityEndpoint is reg5 on br-ex: the endpoint a learned flow recorded for the client
	// (0: none): its IPv4 address, or for an IPv6 Service port its bucket id (unique in the
	// group, the same on every node; an address does not fit 32 bits). Matched with
	// RegAffinityEndpointPort, never 0 for an endpoint.
	RegAffinityEndpoint = NewRegField("RegAffinityEndpoint", 5, 0, 31)
	// RegAffinityEndpointPort is reg6[0..15] on br-ex: that endpoint's port.
	RegAffinityEndpointPort = NewRegField("RegAffinityEndpointPort", 6, 0, 15)
	// RegAffinityClientPort is reg7[0..15] on br-ex: the client's source port, copied by
	// ExServiceCT only so that the datapath flow of a new connection of a sessionAffinity port
	// matches it: every new connection is then translated in the slow path (an upcall), where
	// the learn of its choice takes effect at once; a datapath flow shared by the client's
	// connections would run it only when its statistics are pushed, and a flow table change in
	// between could pick again.
	RegAffinityClientPort = NewRegField("RegAffinityClientPort", 7, 0, 15)
)

// RegSource values.
var (
	SourcePod       = NewRegMark(RegSource, 1, "from a local pod port")
	SourceBrEx      = NewRegMark(RegSource, 2, "from the patch port (DNATed external traffic)")
	SourceTunnelPod = NewRegMark(RegSource, 3, "from Geneve, VNI VNIPod (pod to pod)")
	SourceTunnelSvc = NewRegMark(RegSource, 4, "from Geneve, VNI VNIService (external traffic from an ingress node)")
	SourceGateway   = NewRegMark(RegSource, 5, "from the gateway port (the node's host stack)")
	SourceEgress    = NewRegMark(RegSource, 6, "an egress gateway's reply to a local pod (from Geneve, VNI VNIEgressReply or VNIEgressReplyPorts, or from this node's own gateway)")
)

// ct_mark egress bit (ZonePod).
var (
	// CTMarkEgressField is ct_mark[4] in ZonePod: the connection a local pod opened takes the
	// egress path (set once, when its first packet is committed; C37).
	CTMarkEgressField = NewCTMarkField("CTMarkEgress", 4, 4)
	// EgressPath marks a pod's connection that leaves through an egress gateway.
	EgressPath = NewCTMark(CTMarkEgressField, 1, "a local pod's connection pinned to the egress path at its first packet: its packets go to IntEgressOut, its replies are accepted only from an egress gateway")
)

// ct_mark fields and values (ZonePod).
var (
	// CTMarkOrigin is ct_mark[0..3] in ZonePod: where a pod connection came from; it decides
	// where replies go.
	CTMarkOrigin = NewCTMarkField("CTMarkOrigin", 0, 3)
	// OriginBrEx: the connection entered the pod from br-ex (local endpoint, path P2); its replies
	// go back to br-ex.
	OriginBrEx = NewCTMark(CTMarkOrigin, 1, "came from br-ex (local endpoint, P2): replies go to br-ex")
	// OriginTunnel: the connection entered the pod over Geneve from an ingress node (path P1); its
	// replies go back over Geneve to the address in CTLabelIngressNode.
	OriginTunnel = NewCTMark(CTMarkOrigin, 2, "came by tunnel (P1): replies go back over Geneve to CTLabelIngressNode")
	// OriginGateway: the connection entered br-int from the gateway port (the host: kubelet
	// probes, kube-proxy's DNAT of a ClusterIP or NodePort, host processes). It is committed on
	// the node where it entered; its replies, from a local pod or back over Geneve from another
	// node, go out the gateway port, so the host sees both directions and undoes its DNAT.
	OriginGateway = NewCTMark(CTMarkOrigin, 4, "came from the gateway port (the host, e.g. after kube-proxy's DNAT): replies, also those tunnelled back from another node, go out the gateway port")
	// OriginNode: another node's host opened the connection to a local pod over Geneve (VNIPod)
	// from that node's InternalIP (its route into the gateway port has the node IP as source);
	// its replies go back over Geneve (VNIPod) to that node (CTLabelIngressNode), whose gateway
	// port gets them (BuildNode, BuildGateway), not through this node's host, which never saw the
	// connection.
	OriginNode = NewCTMark(CTMarkOrigin, 8, "came by tunnel (VNI 1) from another node's host, from its InternalIP: replies go back over Geneve (VNI 1) to that node")
)

// ct_label fields.
var (
	// CTLabelClientMAC (ZoneService, ingress node): ct_label[0..47] is the Ethernet source of the
	// connection's first packet - the client's (or its router's) MAC, where replies are sent.
	CTLabelClientMAC = NewCTLabelField("CTLabelClientMAC", 0, 47, ZoneService,
		"Ethernet source of the connection's first packet (client or its router): replies go there")
	// CTLabelIngressNode (ZonePod, backend node): ct_label[0..31] is the Geneve outer source
	// (tun_src) of the connection's first packet - the ingress node's InternalIP.
	CTLabelIngressNode = NewCTLabelField("CTLabelIngressNode", 0, 31, ZonePod,
		"Geneve tun_src of the first packet: the ingress node, where replies are tunnelled")
	// CTLabelIngressNode6 (ZonePod, backend node, IPv6 underlay): ct_label[0..127] is the
	// Geneve outer IPv6 source (tun_ipv6_src) of the connection's first packet - the ingress
	// node's IPv6 InternalIP. It overlaps CTLabelEgressIP, which only connections a local pod
	// opened carry (EgressPath), never one that came by tunnel.
	CTLabelIngressNode6 = NewCTLabelField("CTLabelIngressNode6", 0, 127, ZonePod,
		"IPv6 underlay: Geneve tun_ipv6_src of the first packet: the ingress node, where replies are tunnelled")
	// CTLabelEgressIP (ZonePod, pod's node): ct_label[32..63] is the egress IP a connection
	// with EgressPath was pinned to (EgressID: IPv4 itself, an IPv6 one's last 32 bits).
	CTLabelEgressIP = NewCTLabelField("CTLabelEgressIP", 32, 63, ZonePod,
		"the egress IP an EgressPath connection leaves with (pinned at its first packet)")
	// CTLabelEgressNode (ZoneEgress, gateway node): ct_label[0..31] is the Geneve tun_src of
	// the connection's first packet - the pod's node, where the un-SNATed replies go; 0 for a
	// pod on the gateway node itself.
	CTLabelEgressNode = NewCTLabelField("CTLabelEgressNode", 0, 31, ZoneEgress,
		"Geneve tun_src of the first packet: the pod's node, where un-SNATed replies are tunnelled (0: a local pod)")
	// CTLabelEgressNode6 (ZoneEgress, ZoneEgress6, gateway node, IPv6 underlay): ct_label[0..127]
	// is the Geneve outer IPv6 source (tun_ipv6_src) of the connection's first packet - the pod's
	// node's IPv6 InternalIP; :: for a pod on the gateway node itself. Nothing else is in the
	// label of those zones.
	CTLabelEgressNode6 = NewCTLabelField("CTLabelEgressNode6", 0, 127, ZoneEgress,
		"IPv6 underlay: Geneve tun_ipv6_src of the first packet: the pod's node, where un-SNATed replies are tunnelled (all zero: a local pod)")
)

// Geneve VNIs (RFC 8926 "Virtual Network Identifier", tun_id in OVS). The VNI tells the
// receiving node what a tunnelled packet is.
const (
	// VNIPod carries pod-to-pod traffic (path P3).
	VNIPod uint64 = 1
	// VNIService carries DNATed external traffic from the ingress node to the backend's node (P1).
	VNIService uint64 = 2
	// VNIServiceReply carries a backend's replies back to the ingress node (P1).
	VNIServiceReply uint64 = 3
	// VNIEgress carries a selected pod's packet from its node to the egress IP's active gateway
	// (P4); the inner eth_dst is EgressMAC(egress IP).
	VNIEgress uint64 = 4
	// VNIEgressReply carries the un-SNATed replies from the gateway back to the pod's node (P4).
	VNIEgressReply uint64 = 5
	// VNIEgressReplyPorts carries, from the gateway to the pod's node, a reply the gateway had
	// no connection for, still addressed to the egress IP: the pod's node maps it back by the
	// port block of the destination port (IntEgressReplyCT) and its ZonePod entry, or drops it.
	VNIEgressReplyPorts uint64 = 6
)

// Priorities used across tables.
const (
	prioTunnelPeer = 610 // above prioTunnel: Geneve from a known node

	// resetLearnTimeout is the hard timeout, in seconds, of the flow ResetLearn learns: the
	// pod's RST follows the SYN within microseconds.
	resetLearnTimeout = 2
	prioTunnel        = 600
	prioEgressHook    = 510 // above prioHook: the egress IP on the uplink and the patch port
	prioHook          = 500
	prioPortZero      = 400 // above the pods' spoof guard (prioHigh), below tunnel and patch input
	prioCollisionOK   = 320 // a SYN retransmitted through the recorded ingress node
	prioCollision     = 310 // a SYN for an established 4-tuple from elsewhere: refused
	prioHigh          = 300
	prioRepoint       = 250 // below a live ingress node's keep flow (prioHigh), above plain +est (prioMid)
	prioMid           = 200
	prioEntry         = 100
	prioSourceDeny    = 95 // below prioEntry: new connections from outside loadBalancerSourceRanges
	prioAffinityMiss  = 90 // below prioEntry: no learned endpoint (or one that left): the group
	prioDrain         = 90 // below prioEntry: a live entry point wins over a draining one
	prioEgressExcl    = 22 // above prioEgressPorts: excluded destinations keep the host path
	prioEgressPorts   = 21 // above prioEgress: a selected pod's TCP and UDP, mapped into its port block
	prioEgress        = 20 // above prioLow (the host path), below pod and node routes
	prioLow           = 10
	prioDefault       = 0
)

// FieldDoc is one row of the pipeline's field reference (docs/pipeline.md).
type FieldDoc struct {
	What, Value, Meaning string
}

// Fields returns the field reference, in the order docs/pipeline.md lists it: zones, ct_mark,
// ct_label, registers, VNIs.
func Fields() []FieldDoc {
	marks := func(ms ...*RegMark) string {
		var s string
		for i, m := range ms {
			if i > 0 {
				s += ", "
			}
			s += fmt.Sprintf("%d %s", m.value, m.doc)
		}
		return s
	}
	return []FieldDoc{
		{"conntrack zone `ZoneService`", fmt.Sprintf("%d (%#x)", ZoneService, ZoneService), "br-ex, ingress node: the DNAT of external Service traffic. Only group buckets commit into it."},
		{"conntrack zone `ZoneService6`", fmt.Sprintf("%d (%#x)", ZoneService6, ZoneService6), "br-ex, ingress node: ZoneService for IPv6 (the DNAT of an IPv6 Service port's external traffic)."},
		{"conntrack zone `ZonePod`", fmt.Sprintf("%d (%#x)", ZonePod, ZonePod), "br-int: connections to and from local pods."},
		{"conntrack zone `ZoneEgress`", fmt.Sprintf("%d (%#x)", ZoneEgress, ZoneEgress), "br-int, egress gateway: the SNAT of selected pods' traffic to the egress IP."},
		{"conntrack zone `ZoneEgress6`", fmt.Sprintf("%d (%#x)", ZoneEgress6, ZoneEgress6), "br-int, egress gateway: ZoneEgress for IPv6 (the SNAT to an IPv6 egress IP; the same ct_label layout)."},
		{fmt.Sprintf("`%s` `%s` (ZonePod)", CTMarkOrigin.name, CTMarkOrigin.Ref()),
			fmt.Sprintf("%d `OriginBrEx`, %d `OriginTunnel`, %d `OriginGateway`, %d `OriginNode`", OriginBrEx.value, OriginTunnel.value, OriginGateway.value, OriginNode.value),
			"where a connection entered br-int: " + OriginBrEx.doc + "; " + OriginTunnel.doc + "; " + OriginGateway.doc + "; " + OriginNode.doc + ". 0: a connection a pod opened towards the gateway port (committed on its way out, so the host's answers are tracked)"},
		{fmt.Sprintf("`%s` `%s` (ZonePod)", CTMarkEgressField.name, CTMarkEgressField.Ref()), "1 `EgressPath`", EgressPath.doc},
		{fmt.Sprintf("`%s` `%s` (ZoneService, ZoneService6)", CTLabelClientMAC.name, CTLabelClientMAC.Ref()), "MAC", CTLabelClientMAC.doc},
		{fmt.Sprintf("`%s` `%s` (ZonePod)", CTLabelIngressNode.name, CTLabelIngressNode.Ref()), "IPv4", CTLabelIngressNode.doc},
		{fmt.Sprintf("`%s` `%s` (ZonePod)", CTLabelIngressNode6.name, CTLabelIngressNode6.Ref()), "IPv6", CTLabelIngressNode6.doc},
		{fmt.Sprintf("`%s` `%s` (ZonePod)", CTLabelEgressIP.name, CTLabelEgressIP.Ref()), "IPv4 or IPv6 id (EgressID)", CTLabelEgressIP.doc},
		{fmt.Sprintf("`%s` `%s` (ZoneEgress, ZoneEgress6)", CTLabelEgressNode.name, CTLabelEgressNode.Ref()), "IPv4", CTLabelEgressNode.doc},
		{fmt.Sprintf("`%s` `%s` (ZoneEgress, ZoneEgress6)", CTLabelEgressNode6.name, CTLabelEgressNode6.Ref()), "IPv6", CTLabelEgressNode6.doc},
		{fmt.Sprintf("`%s` `%s` (br-int)", RegSource.name, RegSource.Ref()),
			marks(SourcePod, SourceBrEx, SourceTunnelPod, SourceTunnelSvc, SourceGateway, SourceEgress), "where the packet entered br-int"},
		{fmt.Sprintf("`%s` `%s` (br-int)", RegOutPort.name, RegOutPort.Ref()), "ofport", "output port chosen by IntL3Forwarding"},
		{fmt.Sprintf("`%s` `%s` (br-int)", RegScratch.name, RegScratch.Ref()), "scratch", "ARP responder address swap"},
		{fmt.Sprintf("`%s` `%s` (br-int)", RegEgressIP.name, RegEgressIP.Ref()), "IPv4 or IPv6 id (EgressID)", "the egress IP of a local pod's egress packet (IntL3Forwarding -> IntEgressOut): an IPv4 address, an IPv6 one's last 32 bits"},
		{fmt.Sprintf("`%s` `%s` (br-ex)", RegAffinityPort.name, RegAffinityPort.Ref()), "group id", "the sessionAffinity Service port of a new connection (ExServiceCT -> ExServiceAffinity, ExServiceAffinityOut)"},
		{fmt.Sprintf("`%s` `%s` (br-ex)", RegAffinityEndpoint.name, RegAffinityEndpoint.Ref()), "IPv4 or bucket id", "the endpoint a learned affinity flow recorded for the client (0: none): its IPv4 address, an IPv6 endpoint's bucket id"},
		{fmt.Sprintf("`%s` `%s` (br-ex)", RegAffinityEndpointPort.name, RegAffinityEndpointPort.Ref()), "port", "that endpoint's port"},
		{fmt.Sprintf("`%s` `%s` (br-ex)", RegAffinityClientPort.name, RegAffinityClientPort.Ref()), "port", "the client's source port, copied so that each new connection of a sessionAffinity port is an upcall (its learn takes effect at once)"},
		{"Geneve VNI `VNIPod`", fmt.Sprint(VNIPod), "pod to pod (P3)"},
		{"Geneve VNI `VNIService`", fmt.Sprint(VNIService), "DNATed external traffic, ingress node -> backend node (P1)"},
		{"Geneve VNI `VNIServiceReply`", fmt.Sprint(VNIServiceReply), "backend node -> ingress node (P1)"},
		{"Geneve VNI `VNIEgress`", fmt.Sprint(VNIEgress), "selected pod's node -> the egress IP's active gateway (P4); inner eth_dst = EgressMAC(egress IP): 0a:5e:<IPv4>, 0a:5f:<IPv6's last 32 bits>"},
		{"Geneve VNI `VNIEgressReply`", fmt.Sprint(VNIEgressReply), "egress gateway -> the pod's node: un-SNATed replies (P4)"},
		{"Geneve VNI `VNIEgressReplyPorts`", fmt.Sprint(VNIEgressReplyPorts), "egress gateway -> the pod's node: a reply without a connection on the gateway, still to the egress IP, steered by the port block of its destination port (P4)"},
	}
}

// MoveFrom copies header field src (an NXM name, e.g. NXM_OF_ETH_SRC[]) into the label field;
// valid only in the exec of a committing CT action.
func (f *CTLabelField) MoveFrom(src of.FieldRef) of.Action { return of.Move{Src: src, Dst: f.ref()} }

// Match matches connections whose label field holds v (ovs-fields(7) "ct_label", masked; needs a
// preceding ct() in the pipeline).
func (f *CTLabelField) Match(v uint64) of.Match {
	width := uint(f.end-f.start) + 1
	mask := uint64(1)<<width - 1
	if width == 64 {
		mask = ^uint64(0)
	}
	return of.CTLabel(shl128(v&mask, uint(f.start)), shl128(mask, uint(f.start)))
}

// Load loads v into the label field; valid only in the exec of a committing CT action.
func (f *CTLabelField) Load(v uint64) of.Action { return of.Load{Value: v, Dst: f.ref()} }

// shl128 is v shifted left by n bits (n < 128) as a 128-bit value.
func shl128(v uint64, n uint) of.U128 {
	switch {
	case n == 0:
		return of.U128{Lo: v}
	case n < 64:
		return of.U128{Hi: v >> (64 - n), Lo: v << n}
	}
	return of.U128{Hi: v << (n - 64)}
}

// MoveTo copies the label field into header field dst.
func (f *CTLabelField) MoveTo(dst of.FieldRef) of.Action { return of.Move{Src: f.ref(), Dst: dst} }

// MoveFrom copies header field src into the register field.
func (f *RegField) MoveFrom(src of.FieldRef) of.Action { return of.Move{Src: src, Dst: f.ref()} }

// MoveTo copies the register field into header field dst.
func (f *RegField) MoveTo(dst of.FieldRef) of.Action { return of.Move{Src: f.ref(), Dst: dst} }
