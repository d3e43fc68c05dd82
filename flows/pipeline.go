package flows

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/digitalocean/go-openvswitch/ovs"
)

// GatewayIP returns the pod gateway address of a pod CIDR: its first host address
// (10.244.1.0/24 -> 10.244.1.1). Pods use it as their default route; br-int answers ARP for it.
func GatewayIP(cidr netip.Prefix) netip.Addr { return cidr.Masked().Addr().Next() }

// GatewayMAC returns the MAC br-int answers with for a pod gateway address: 0a:58 followed by the
// four IPv4 bytes (the convention OVN-Kubernetes uses for its router ports).
func GatewayMAC(gw netip.Addr) net.HardwareAddr {
	b := gw.As4()
	return net.HardwareAddr{0x0a, 0x58, b[0], b[1], b[2], b[3]}
}

func flow(t Table, prio int, proto ovs.Protocol, inPort int, m []ovs.Match, a ...ovs.Action) ovs.Flow {
	return ovs.Flow{Table: int(t), Priority: prio, Protocol: proto, InPort: inPort, Matches: m, Actions: a}
}

func ctState(s ...string) ovs.Match { return ovs.ConnectionTrackingState(s...) }

func output(port int) ovs.Action { return ovs.Output(port) }

// BuildExBase returns the static br-ex pipeline (KindExBase): the classifier hooks, the
// uplink<->host plumbing and the fixed parts of the service tables. See docs/pipeline.md.
func BuildExBase(st *State) (*FlowSet, error) {
	p := st.Ports
	if err := p.validate(); err != nil {
		return nil, err
	}
	fs := &FlowSet{Key: Key{Kind: KindExBase}, Bridge: BrEx}
	est := ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateEstablished))
	rel := ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateRelated))
	// A retransmitted SYN of a committed, unanswered connection comes back from ct(nat) as
	// +new+dnat, already translated (LAB-FACTS pitfall 4).
	newDNAT := ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateNew), "+dnat")
	rpl := ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateEstablished), ovs.SetState(ovs.CTStateReply))
	fs.Flows = []ovs.Flow{
		// ExClassifier: Geneve to this node first (no Service entry point may capture the
		// tunnels), then the hooks into our tables, then the installer's plumbing.
		flow(ExClassifier, prioTunnel, ovs.ProtocolUDPv4, p.ExUplink, st.tunnelMatch(), outputLocal),
		flow(ExClassifier, prioHook, ovs.ProtocolIPv4, p.ExUplink, nil, Goto(ExServiceLB)),
		flow(ExClassifier, prioHook, "", p.ExPatch, nil, Goto(ExFromInt)),
		flow(ExClassifier, prioLow, "", p.ExUplink, nil, outputLocal),
		flow(ExClassifier, prioLow, "", ovs.PortLOCAL, nil, output(p.ExUplink)),
		flow(ExClassifier, prioDefault, "", 0, nil, ovs.Drop()),
		// ExServiceLB: not an entry point of an opted-in Service -> the host (P5).
		flow(ExServiceLB, prioDefault, "", 0, nil, outputLocal),
		// ExServiceCT: known connections continue to br-int; other packets to the host.
		flow(ExServiceCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{est}, output(p.ExPatch)),
		flow(ExServiceCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{rel}, output(p.ExPatch)),
		flow(ExServiceCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{newDNAT}, output(p.ExPatch)),
		flow(ExServiceCT, prioDefault, "", 0, nil, outputLocal),
		// ExServiceOut: after the bucket's ct(commit,nat(dst=...)).
		flow(ExServiceOut, prioLow, ovs.ProtocolIPv4, 0, nil, output(p.ExPatch)),
		// ExFromInt / ExServiceReply: un-DNAT replies and send them to the client's MAC.
		flow(ExFromInt, prioLow, ovs.ProtocolIPv4, 0, nil, CT{Zone: ZoneService, NAT: &NAT{}, Table: tableRef(ExServiceReply)}),
		flow(ExFromInt, prioDefault, "", 0, nil, ovs.Drop()),
		flow(ExServiceReply, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{rpl},
			ovs.Move(CTLabelClientMAC, "NXM_OF_ETH_DST[]"),
			ovs.ModDataLinkSource(p.ExMAC),
			output(p.ExUplink)),
		flow(ExServiceReply, prioDefault, "", 0, nil, ovs.Drop()),
	}
	return fs, fs.Finish()
}

// BuildIntBase returns the static br-int pipeline (KindIntBase): tunnel and patch classification,
// the pod reply steering, the ARP responder for this node's pod CIDRs and the pod ingress commit.
func BuildIntBase(st *State) (*FlowSet, error) {
	p := st.Ports
	if err := p.validate(); err != nil {
		return nil, err
	}
	fs := &FlowSet{Key: Key{Kind: KindIntBase}, Bridge: BrInt}
	rplTunnel := []ovs.Match{ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateEstablished), ovs.SetState(ovs.CTStateReply)), matchCTMark(CTMarkOriginTunnel)}
	rplBrEx := []ovs.Match{ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateEstablished), ovs.SetState(ovs.CTStateReply)), matchCTMark(CTMarkOriginBrEx)}
	fs.Flows = []ovs.Flow{
		flow(IntClassifier, prioHook, "", p.IntTunnel, []ovs.Match{ovs.TunnelID(VNIPod)}, loadReg(SourceTunnelPod, RegSource), Goto(IntL3Forwarding)),
		flow(IntClassifier, prioHook, "", p.IntTunnel, []ovs.Match{ovs.TunnelID(VNIService)}, loadReg(SourceTunnelSvc, RegSource), Goto(IntL3Forwarding)),
		flow(IntClassifier, prioHook, "", p.IntTunnel, []ovs.Match{ovs.TunnelID(VNIServiceReply)}, output(p.IntPatch)),
		flow(IntClassifier, prioHook, ovs.ProtocolIPv4, p.IntPatch, nil, loadReg(SourceBrEx, RegSource), Goto(IntL3Forwarding)),
		flow(IntClassifier, prioDefault, "", 0, nil, ovs.Drop()),

		flow(IntPodEgressCT, prioMid, ovs.ProtocolIPv4, 0, rplTunnel,
			ovs.Move(CTLabelIngressNode, "NXM_NX_TUN_IPV4_DST[]"),
			ovs.SetTunnel(VNIServiceReply),
			output(p.IntTunnel)),
		flow(IntPodEgressCT, prioMid, ovs.ProtocolIPv4, 0, rplBrEx, output(p.IntPatch)),
		flow(IntPodEgressCT, prioDefault, "", 0, nil, Goto(IntL3Forwarding)),

		flow(IntARPResponder, prioDefault, "", 0, nil, ovs.Drop()),
		flow(IntL3Forwarding, prioDefault, "", 0, nil, ovs.Drop()),

		flow(IntPodIngress, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{matchRegSource(SourceTunnelSvc)},
			CT{Commit: true, Zone: ZonePod, Exec: []ovs.Action{
				loadReg(CTMarkOriginTunnel, "NXM_NX_CT_MARK[0..3]"),
				ovs.Move("NXM_NX_TUN_IPV4_SRC[]", CTLabelIngressNode),
			}},
			ovs.OutputField(RegOutPort)),
		flow(IntPodIngress, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{matchRegSource(SourceBrEx)},
			CT{Commit: true, Zone: ZonePod, Exec: []ovs.Action{loadReg(CTMarkOriginBrEx, "NXM_NX_CT_MARK[0..3]")}},
			ovs.OutputField(RegOutPort)),
		flow(IntPodIngress, prioDefault, "", 0, nil, ovs.OutputField(RegOutPort)),
	}
	for _, n := range st.Nodes {
		if n.Name != st.Node {
			continue
		}
		for _, c := range n.PodCIDRs {
			if !c.Addr().Is4() {
				continue
			}
			gwMAC := GatewayMAC(GatewayIP(c))
			// Proxy ARP for the whole pod CIDR: pods on this node reach each other and their
			// gateway through br-int's L3 forwarding.
			fs.Flows = append(fs.Flows, flow(IntARPResponder, prioEntry, ovs.ProtocolARP, 0,
				[]ovs.Match{ovs.ARPOperation(1), ovs.ARPTargetProtocolAddress(c.Masked().String())},
				ovs.Move("NXM_OF_ETH_SRC[]", "NXM_OF_ETH_DST[]"),
				ovs.ModDataLinkSource(gwMAC),
				ovs.Load("0x2", "NXM_OF_ARP_OP[]"),
				ovs.Move("NXM_NX_ARP_SHA[]", "NXM_NX_ARP_THA[]"),
				ovs.Load(macHex(gwMAC), "NXM_NX_ARP_SHA[]"),
				ovs.Move("NXM_OF_ARP_TPA[]", RegScratch),
				ovs.Move("NXM_OF_ARP_SPA[]", "NXM_OF_ARP_TPA[]"),
				ovs.Move(RegScratch, "NXM_OF_ARP_SPA[]"),
				outputInPort))
		}
	}
	return fs, fs.Finish()
}

func macHex(m net.HardwareAddr) string {
	var v uint64
	for _, b := range m {
		v = v<<8 | uint64(b)
	}
	return fmt.Sprintf("%#x", v)
}

// BuildNode returns the Geneve route to another node's pod CIDRs (KindNode) on br-int: pod
// traffic goes with VNIPod, DNATed external traffic from br-ex with VNIService; tun_dst is that
// node's InternalIP.
func BuildNode(st *State, n Node) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindNode, Name: n.Name}, Bridge: BrInt}
	if !n.InternalIP.Is4() {
		fs.Warnings = append(fs.Warnings, fmt.Sprintf("node %s has no IPv4 InternalIP: no route to its pods", n.Name))
		return fs, fs.Finish()
	}
	for _, c := range n.PodCIDRs {
		if !c.Addr().Is4() {
			continue
		}
		dst := ovs.NetworkDestination(c.Masked().String())
		tunDst := ovs.SetField(n.InternalIP.String(), "tun_dst")
		fs.Flows = append(fs.Flows,
			flow(IntL3Forwarding, prioEntry, ovs.ProtocolIPv4, 0, []ovs.Match{matchRegSource(SourcePod), dst},
				tunDst, ovs.SetTunnel(VNIPod), output(st.Ports.IntTunnel)),
			flow(IntL3Forwarding, prioEntry, ovs.ProtocolIPv4, 0, []ovs.Match{matchRegSource(SourceBrEx), dst},
				tunDst, ovs.SetTunnel(VNIService), output(st.Ports.IntTunnel)),
		)
	}
	return fs, fs.Finish()
}

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
		gwMAC := GatewayMAC(GatewayIP(cidr))
		fs.Flows = append(fs.Flows,
			flow(IntClassifier, prioHigh, ovs.ProtocolIPv4, p.OFPort, []ovs.Match{mac, ovs.NetworkSource(ip.String())},
				loadReg(SourcePod, RegSource), CT{Zone: ZonePod, Table: tableRef(IntPodEgressCT)}),
			flow(IntClassifier, prioHigh, ovs.ProtocolARP, p.OFPort, []ovs.Match{mac, ovs.ARPSourceProtocolAddress(ip.String())},
				Goto(IntARPResponder)),
			flow(IntL3Forwarding, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{ovs.NetworkDestination(ip.String())},
				ovs.ModDataLinkSource(gwMAC), ovs.ModDataLinkDestination(p.MAC),
				loadReg(uint32(p.OFPort), RegOutPort), Goto(IntPodIngress)),
		)
	}
	if len(fs.Flows) > 0 {
		// Spoof guard: anything else from the pod's port is dropped.
		fs.Flows = append(fs.Flows, flow(IntClassifier, prioMid, "", p.OFPort, nil, ovs.Drop()))
	}
	return fs, fs.Finish()
}

// BuildServicePort returns an opted-in Service port's flows and select group (KindServicePort)
// on br-ex (paths P1, P2): every entry point goes through ct(zone=ZoneService,nat); a new
// connection (TCP: a SYN) goes to the select group, whose bucket per endpoint commits the DNAT
// and stores the client's MAC in ct_label, then to br-int, which routes it to the endpoint's node.
func BuildServicePort(st *State, sp *ServicePort) (*FlowSet, error) {
	fs := &FlowSet{Key: sp.Key(), Bridge: BrEx}
	var proto ovs.Protocol
	var fields []string
	switch sp.Protocol {
	case TCP:
		proto, fields = ovs.ProtocolTCPv4, []string{"ip_src", "tcp_src"}
	case UDP:
		proto, fields = ovs.ProtocolUDPv4, []string{"ip_src", "udp_src"}
	default:
		return nil, fmt.Errorf("service port %s: protocol %q not supported", sp.Key(), sp.Protocol)
	}
	if !OwnedGroup(sp.GroupID) {
		return nil, fmt.Errorf("service port %s: group id %#x outside the agent's range", sp.Key(), sp.GroupID)
	}
	type entry struct {
		addr netip.Addr
		port uint16
	}
	var entries []entry
	seen := map[entry]bool{}
	addEntry := func(a netip.Addr, port uint16) {
		e := entry{a, port}
		if !a.Is4() || port == 0 || seen[e] {
			return
		}
		seen[e] = true
		entries = append(entries, e)
	}
	if sp.NodePort != 0 {
		for _, a := range st.NodePortAddresses {
			addEntry(a, sp.NodePort)
		}
	}
	for _, a := range sp.LoadBalancerIPs {
		addEntry(a, sp.Port)
	}
	for _, a := range sp.ExternalIPs {
		addEntry(a, sp.Port)
	}
	newConn := []ovs.Match{ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateNew))}
	if sp.Protocol == TCP {
		// Only a SYN starts a connection: mid-stream packets of the host's own connections that
		// use a NodePort as local port are left to the host (CASES C16).
		newConn = append(newConn, ovs.TCPFlags("+syn", "-ack"))
	}
	for _, e := range entries {
		if sp.Protocol == UDP && e.port == st.Ports.tunnelUDPPort() && e.addr == st.self().InternalIP {
			fs.Warnings = append(fs.Warnings, fmt.Sprintf("entry point %s:%d/UDP is this node's Geneve tunnel endpoint: not served", e.addr, e.port))
			continue
		}
		fs.EntryPoints = append(fs.EntryPoints, EntryPoint{Protocol: sp.Protocol, Addr: netip.AddrPortFrom(e.addr, e.port)})
		match := []ovs.Match{ovs.NetworkDestination(e.addr.String()), ovs.TransportDestinationPort(e.port)}
		fs.Flows = append(fs.Flows,
			flow(ExServiceLB, prioEntry, proto, 0, match, CT{Zone: ZoneService, NAT: &NAT{}, Table: tableRef(ExServiceCT)}),
			flow(ExServiceCT, prioEntry, proto, 0, append(append([]ovs.Match{}, newConn...), match...), Group(sp.GroupID)),
		)
	}
	g := OFGroup{ID: sp.GroupID, Type: "select", SelectionFields: fields}
	for _, ep := range sp.Endpoints {
		if !ep.IP.Is4() || ep.Port == 0 {
			continue
		}
		if !st.routable(ep.IP) {
			fs.Warnings = append(fs.Warnings, fmt.Sprintf("endpoint %s is outside every node's pod CIDRs: skipped", ep.IP))
			continue
		}
		if sp.Protocol == UDP {
			fs.Endpoints = append(fs.Endpoints, netip.AddrPortFrom(ep.IP, ep.Port))
		}
		g.Buckets = append(g.Buckets, Bucket{ID: uint32(len(g.Buckets)), Weight: 100, Actions: []ovs.Action{
			CT{Commit: true, Zone: ZoneService, Table: tableRef(ExServiceOut),
				NAT:  &NAT{Dst: netip.AddrPortFrom(ep.IP, ep.Port)},
				Exec: []ovs.Action{ovs.Move("NXM_OF_ETH_SRC[]", CTLabelClientMAC)}},
		}})
	}
	fs.Groups = []OFGroup{g}
	sortEntryPoints(fs.EntryPoints)
	slices.SortFunc(fs.Endpoints, func(a, b netip.AddrPort) int { return a.Compare(b) })
	fs.Endpoints = slices.Compact(fs.Endpoints)
	return fs, fs.Finish()
}

func sortEntryPoints(es []EntryPoint) {
	slices.SortFunc(es, func(a, b EntryPoint) int {
		if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
			return c
		}
		return a.Addr.Compare(b.Addr)
	})
}

// BuildServiceDrain returns the drain flow set (KindServiceDrain) of one entry point of a Service
// port that went away: one ExServiceLB flow, below the live entry priority, that sends the entry
// point through ct(zone=ZoneService,nat) to ExServiceCT. There the generic +est/+rel/+new+dnat
// flows keep the established connections flowing to br-int; a new connection matches no entry
// flow of ExServiceCT and goes to the host (LOCAL). A live Service port on the same entry point
// wins by priority.
func BuildServiceDrain(e EntryPoint) (*FlowSet, error) {
	fs := &FlowSet{Key: DrainKey(e), Bridge: BrEx, EntryPoints: []EntryPoint{e}}
	var proto ovs.Protocol
	switch e.Protocol {
	case TCP:
		proto = ovs.ProtocolTCPv4
	case UDP:
		proto = ovs.ProtocolUDPv4
	default:
		return nil, fmt.Errorf("drain %s: protocol %q not supported", e, e.Protocol)
	}
	if !e.Addr.Addr().Is4() || e.Addr.Port() == 0 {
		return nil, fmt.Errorf("drain %s: not an IPv4 entry point", e)
	}
	match := []ovs.Match{ovs.NetworkDestination(e.Addr.Addr().String()), ovs.TransportDestinationPort(e.Addr.Port())}
	fs.Flows = []ovs.Flow{flow(ExServiceLB, prioDrain, proto, 0, match, CT{Zone: ZoneService, NAT: &NAT{}, Table: tableRef(ExServiceCT)})}
	return fs, fs.Finish()
}

func (p Ports) validate() error {
	if p.ExUplink <= 0 || p.ExPatch <= 0 || p.IntPatch <= 0 || p.IntTunnel <= 0 || len(p.ExMAC) != 6 {
		return fmt.Errorf("incomplete ports %+v: need uplink, both patch ports, the Geneve port and br-ex's MAC", p)
	}
	return nil
}

// self returns this node (zero Node if it is not in st.Nodes).
func (st *State) self() Node {
	for _, n := range st.Nodes {
		if n.Name == st.Node {
			return n
		}
	}
	return Node{}
}

// tunnelMatch matches Geneve packets addressed to this node (any address when its InternalIP is
// unknown).
func (st *State) tunnelMatch() []ovs.Match {
	m := []ovs.Match{ovs.TransportDestinationPort(st.Ports.tunnelUDPPort())}
	if ip := st.self().InternalIP; ip.Is4() {
		m = append([]ovs.Match{ovs.NetworkDestination(ip.String())}, m...)
	}
	return m
}

// localCIDR returns this node's pod CIDR that holds ip.
func (st *State) localCIDR(ip netip.Addr) (netip.Prefix, bool) {
	for _, n := range st.Nodes {
		if n.Name != st.Node {
			continue
		}
		for _, c := range n.PodCIDRs {
			if c.Contains(ip) {
				return c, true
			}
		}
	}
	return netip.Prefix{}, false
}

// routable reports whether ip is inside some node's pod CIDRs (br-int can reach it).
func (st *State) routable(ip netip.Addr) bool {
	for _, n := range st.Nodes {
		for _, c := range n.PodCIDRs {
			if c.Contains(ip) {
				return true
			}
		}
	}
	return false
}
