package flows

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/digitalocean/go-openvswitch/ovs"
)

// KindServicePort: one opted-in Service port's entry points and select group (paths P1, P2).

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
	anyNew := []ovs.Match{ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateNew))}
	newConn := anyNew
	if sp.Protocol == TCP {
		// Only a SYN starts a connection on an address of this node: mid-stream packets of the
		// host's own connections that use a NodePort as local port are left to the host
		// (docs/field-cases.md#c16), and so are mid-stream packets of connections this node
		// holds no state for: the host answers them with a RST (no socket).
		newConn = append(slices.Clip(anyNew), ovs.TCPFlags("+syn", "-ack"))
	}
	for _, e := range sp.EntryPoints(st.NodePortAddresses) {
		nc := newConn
		if sp.Protocol == TCP && !st.hostAddr(e.Addr.Addr()) {
			// A LoadBalancer IP or externalIP is no address of the host, which has no
			// connections of its own on it. A mid-stream packet that finds no ZoneService
			// connection (a route change moved the client's connection here from another
			// ingress node, or this node lost its conntrack) is picked up like a new one: the
			// select group hashes the client's ip and port over the same sorted endpoints on
			// every node, so it continues to the connection's endpoint, whose node re-points
			// the replies to this node (docs/security.md, "Entry points and the host stack").
			nc = anyNew
		}
		if e.Protocol == UDP && e.Addr.Port() == st.Ports.tunnelUDPPort() && e.Addr.Addr() == st.self().InternalIP {
			fs.Warnings = append(fs.Warnings, fmt.Sprintf("entry point %s is this node's Geneve tunnel endpoint: not served", e))
			continue
		}
		fs.EntryPoints = append(fs.EntryPoints, e)
		lb := flow(ExServiceLB, prioEntry, proto, 0, entryMatch(e), CT{Zone: ZoneService, NAT: &NAT{}, Table: tableRef(ExServiceCT)})
		fs.entryFlow(e, mustMatchKey(BrEx, &lb))
		fs.Flows = append(fs.Flows, lb,
			flow(ExServiceCT, prioEntry, proto, 0, append(append([]ovs.Match{}, nc...), entryMatch(e)...), Group(sp.GroupID)),
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
				Exec: []ovs.Action{CTLabelClientMAC.MoveFrom(nxmEthSrc)}},
		}})
	}
	fs.Groups = []OFGroup{g}
	sortEntryPoints(fs.EntryPoints)
	slices.SortFunc(fs.Endpoints, func(a, b netip.AddrPort) int { return a.Compare(b) })
	fs.Endpoints = slices.Compact(fs.Endpoints)
	return fs, fs.Finish()
}

// hostAddr reports whether a is an address of this node's host stack: its InternalIP or a
// NodePort address.
func (st *State) hostAddr(a netip.Addr) bool {
	return a == st.self().InternalIP || slices.Contains(st.NodePortAddresses, a)
}

func sortEntryPoints(es []EntryPoint) {
	slices.SortFunc(es, func(a, b EntryPoint) int {
		if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
			return c
		}
		return a.Addr.Compare(b.Addr)
	})
}

func servicePortKeys(st *State) []Key { return slices.Collect(maps.Keys(st.Services)) }

func buildServicePortKey(st *State, k Key) (*FlowSet, error) {
	sp, ok := st.Services[k]
	if !ok {
		return nil, nil
	}
	return BuildServicePort(st, &sp)
}

func servicePortRank(st *State, k Key) Rank { return st.Services[k].Rank }

// entryMatch matches the packets addressed to entry point e (its protocol is the flow's).
func entryMatch(e EntryPoint) []ovs.Match {
	return []ovs.Match{ovs.NetworkDestination(e.Addr.Addr().String()), ovs.TransportDestinationPort(e.Addr.Port())}
}

// Claims returns the entry points sp asks for, in the form that Services compete for: the NodePort
// as NodePortEntry (every NodePort address of a node), then each LoadBalancer ingress IP and
// externalIP with the Service port; IPv4 only, without duplicates.
func (sp *ServicePort) Claims() []EntryPoint {
	var out []EntryPoint
	add := func(e EntryPoint) {
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	if sp.NodePort != 0 {
		add(NodePortEntry(sp.Protocol, sp.NodePort))
	}
	for _, as := range [][]netip.Addr{sp.LoadBalancerIPs, sp.ExternalIPs} {
		for _, a := range as {
			if a.Is4() && sp.Port != 0 {
				add(EntryPoint{Protocol: sp.Protocol, Addr: netip.AddrPortFrom(a, sp.Port)})
			}
		}
	}
	return out
}

// EntryPoints returns the entry points sp is served on by a node whose NodePort addresses are
// nodePortAddrs: Claims with the NodePort expanded to each IPv4 NodePort address, without
// duplicates (an LB IP equal to a node address with the NodePort's number is one entry point).
func (sp *ServicePort) EntryPoints(nodePortAddrs []netip.Addr) []EntryPoint {
	var out []EntryPoint
	seen := map[EntryPoint]bool{}
	add := func(e EntryPoint) {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	for _, c := range sp.Claims() {
		if !c.IsNodePort() {
			add(c)
			continue
		}
		for _, a := range nodePortAddrs {
			if a.Is4() {
				add(EntryPoint{Protocol: c.Protocol, Addr: netip.AddrPortFrom(a, c.Addr.Port())})
			}
		}
	}
	return out
}
