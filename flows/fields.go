package flows

// Conntrack zones (ovs-actions(7) "ct"), declared once. IPv6 will take 0xfb10 and 0xfb11
// (docs/pipeline.md).
const (
	// ZoneService holds the DNAT of external Service traffic on the ingress node (br-ex). Only the
	// select group buckets commit into it, so every entry in it is ours.
	ZoneService uint16 = 0xfb00
	// ZonePod tracks traffic to and from local pods on br-int. Connections that enter a pod from
	// br-ex or from the service tunnel are committed here with their origin (CTMarkOrigin*).
	ZonePod uint16 = 0xfb01
)

// ct_mark bits (ovs-fields(7) "ct_mark"), in ZonePod.
const (
	// CTMarkOriginMask covers bits 0..3 of ct_mark: where a pod connection came from.
	CTMarkOriginMask uint32 = 0xf
	// CTMarkOriginBrEx: the connection entered the pod from br-ex (local endpoint, path P2); its
	// replies go back to br-ex.
	CTMarkOriginBrEx uint32 = 0x1
	// CTMarkOriginTunnel: the connection entered the pod over Geneve from an ingress node (path P1);
	// its replies go back over Geneve to the address in ct_label[0..31].
	CTMarkOriginTunnel uint32 = 0x2
)

// ct_label bits (ovs-fields(7) "ct_label").
const (
	// CTLabelClientMAC (ZoneService, ingress node): ct_label[0..47] is the Ethernet source of the
	// connection's first packet - the client's (or its router's) MAC, where replies are sent.
	CTLabelClientMAC = "NXM_NX_CT_LABEL[0..47]"
	// CTLabelIngressNode (ZonePod, backend node): ct_label[0..31] is the Geneve outer source
	// (tun_src) of the connection's first packet - the ingress node's InternalIP.
	CTLabelIngressNode = "NXM_NX_CT_LABEL[0..31]"
)

// Registers (ovs-fields(7) "reg0".."reg15"), per packet, on br-int.
const (
	// RegSource is reg0[0..3]: where the packet entered br-int (RegSource* values).
	RegSource = "NXM_NX_REG0[0..3]"
	// RegOutPort is reg1: the ofport IntPodIngress outputs to.
	RegOutPort = "NXM_NX_REG1[]"
	// RegScratch is reg2: scratch space of the ARP responder.
	RegScratch = "NXM_NX_REG2[]"
)

// RegSource values.
const (
	SourcePod       uint32 = 1 // from a local pod port
	SourceBrEx      uint32 = 2 // from the patch port (DNATed external traffic)
	SourceTunnelPod uint32 = 3 // from Geneve, VNI VNIPod (pod to pod)
	SourceTunnelSvc uint32 = 4 // from Geneve, VNI VNIService (external traffic from an ingress node)
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
)

// Priorities used across tables.
const (
	prioTunnel  = 600
	prioHook    = 500
	prioHigh    = 300
	prioMid     = 200
	prioEntry   = 100
	prioDrain   = 90 // below prioEntry: a live entry point wins over a draining one
	prioLow     = 10
	prioDefault = 0
)
