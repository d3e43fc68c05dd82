package flows

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// KindServicePort: one opted-in Service port's entry points and select group (paths P1, P2).

// BuildServicePort returns an opted-in Service port's flows and select group (KindServicePort)
// on br-ex (paths P1, P2): every entry point goes through ct(zone=ZoneService,nat); a new
// connection (TCP: a SYN) goes to the select group, whose bucket per endpoint commits the DNAT
// and stores the client's MAC in ct_label, then to br-int, which routes it to the endpoint's node.
//
// An IPv6 ServicePort (sp.Family) has the same flows in its family: tcp6/udp6, ipv6_dst and
// ipv6_src, IPv6 endpoints, the NodePort on the IPv6 NodePort addresses only, every ct in
// ZoneService6 (Family.ServiceZone); docs/pipeline.md "IPv6 on br-ex".
//
// With sp.FilterSources (spec.loadBalancerSourceRanges, docs/field-cases.md#c32) the new
// connections to a LoadBalancer IP or externalIP go to the group only from sp.SourceRanges of
// sp.Family (one flow per range, nw_src or ipv6_src); the others are dropped by a flow just
// below (prioSourceDeny).
// Established connections are not filtered. NodePorts are not filtered.
//
// A port with an endpoint outside every node's pod CIDRs (a hostNetwork endpoint, which br-int
// cannot reach) is declined (docs/field-cases.md#c34): the flow set has no flow and no group,
// FlowSet.Declined says why, and the host (kube-proxy) serves the port, without source IP
// preservation. A group that misses a ready endpoint is never installed.
//
// A port without usable endpoints sends its new connections (those the group would take) to
// the host untouched and uncommitted: kube-proxy, which keeps its rules for every Service,
// rejects them there (ICMP port unreachable, from the address the client dialled).
//
// With sp.AffinitySeconds (sessionAffinity: ClientIP) the group hashes the client IP alone, with
// sp.AffinityPeriod as the hash basis, so every node picks the same endpoint for a client while
// the endpoint set and the period are the same; the new
// connection first looks up the client's learned choice (ExServiceCT loads RegAffinityPort,
// resubmits to ExServiceAffinity, goes to ExServiceAffinityOut). ExServiceAffinityOut has one
// flow per endpoint, which learns the choice (AffinityLearn, idle timeout AffinitySeconds) and
// commits the DNAT, and below them the group, whose bucket names its endpoint in the registers
// and resubmits there; a learned endpoint that is no longer one of the port's has no flow and
// the group picks again.
func BuildServicePort(st *State, sp *ServicePort) (*FlowSet, error) {
	fs := &FlowSet{Key: sp.Key(), Bridge: BrEx}
	proto, err := sp.Family.protocol(sp.Protocol)
	if err != nil {
		return nil, fmt.Errorf("service port %s: %w", sp.Key(), err)
	}
	clientIP := proto.IPSrcField() // ip_src or ipv6_src
	zone := sp.Family.ServiceZone()
	var fields []of.Field
	switch sp.Protocol {
	case TCP:
		fields = []of.Field{clientIP, of.FieldTCPSrc}
	case UDP:
		fields = []of.Field{clientIP, of.FieldUDPSrc}
	}
	affinity := sp.AffinitySeconds > 0
	if affinity {
		// The client IP alone: one client, one endpoint, the same on every node.
		fields = []of.Field{clientIP}
	}
	if !OwnedGroup(sp.GroupID) {
		return nil, fmt.Errorf("service port %s: group id %#x outside the agent's range", sp.Key(), sp.GroupID)
	}
	// outside: endpoints in no node's pod CIDRs; unprogrammed: endpoints on a node this node
	// holds no Node for (refused: no tunnel to it, State.TunnelRefusal; or invalid), whose pod
	// CIDRs are therefore unknown here. Both decline the port; the message says which.
	var outside, unprogrammed []string
	for _, ep := range sp.Endpoints {
		if sp.Family.Has(ep.IP) && ep.Port != 0 && !st.routableOn(ep.IP, ep.NodeName) {
			a := netip.AddrPortFrom(ep.IP, ep.Port).String()
			if _, known := st.Nodes[ep.NodeName]; ep.NodeName != "" && !known {
				unprogrammed = append(unprogrammed, a+" on node "+ep.NodeName)
			} else {
				outside = append(outside, a)
			}
		}
	}
	if sp.Family == IPv6 && !st.selfHasIPv6() {
		// br-int carries IPv6 only with an IPv6 pod CIDR of this node (BuildIntBase): DNATed here,
		// the packets would be dropped at br-int's door. A Node that got an IPv6 InternalIP when
		// its cluster went dual-stack keeps its IPv4-only spec.podCIDRs (immutable once set).
		fs.Declined = "this node has no IPv6 pod CIDR (spec.podCIDRs), so its br-int carries no IPv6"
		fs.Warnings = append(fs.Warnings, fmt.Sprintf("port %s/%s/IPv6 declined on this node: %s; the host (kube-proxy) serves its IPv6 entry points here, with SNAT", sp.PortName, sp.Protocol, fs.Declined))
		return fs, fs.Finish()
	}
	if len(unprogrammed) > 0 {
		fs.Declined = fmt.Sprintf("%d of %d endpoint(s) on a node this node does not program (no Geneve tunnel to it or an invalid Node: see that Node's Warning Event): %s", len(unprogrammed), len(sp.Endpoints), strings.Join(unprogrammed, ", "))
		fs.Warnings = append(fs.Warnings, fmt.Sprintf("port %s/%s declined: %s; this node programs no entry point for it and the host (kube-proxy) serves it, with SNAT", sp.PortName, sp.Protocol, fs.Declined))
		return fs, fs.Finish()
	}
	if len(outside) > 0 {
		fs.Declined = fmt.Sprintf("%d of %d endpoint(s) outside every node's pod CIDRs (hostNetwork?): %s", len(outside), len(sp.Endpoints), strings.Join(outside, ", "))
		fs.Warnings = append(fs.Warnings, fmt.Sprintf("port %s/%s declined: %s; source IP preservation needs pod endpoints, so this node programs no entry point for it and the host (kube-proxy) serves it, with SNAT", sp.PortName, sp.Protocol, fs.Declined))
		return fs, fs.Finish()
	}
	anyNew := []of.Match{ctState(of.CTTracked.Set(), of.CTNew.Set())}
	newConn := anyNew
	if sp.Protocol == TCP {
		// Only a SYN starts a connection on an address of this node: mid-stream packets of the
		// host's own connections that use a NodePort as local port are left to the host
		// (docs/field-cases.md#c16), and so are mid-stream packets of connections this node
		// holds no state for: the host answers them with a RST (no socket).
		newConn = append(slices.Clip(anyNew), of.TCPFlags(of.TCPSyn.Set(), of.TCPAck.Unset()))
	}
	ranges, filter := sourceRanges(sp)
	eps := usableEndpoints(sp)
	// What a new connection that may be served does: the group, the affinity lookup, or (no
	// usable endpoint) the host, which rejects it (kube-proxy).
	toEndpoint := []of.Action{Group(sp.GroupID)}
	switch {
	case len(eps) == 0:
		toEndpoint = []of.Action{outputLocal}
	case affinity:
		srcPort := of.Ref(of.FieldTCPSrc)
		if sp.Protocol == UDP {
			srcPort = of.Ref(of.FieldUDPSrc)
		}
		// RegAffinityClientPort: one datapath flow per connection, so that each new connection's
		// learn runs in its upcall, before the next one is chosen.
		toEndpoint = []of.Action{RegAffinityPort.Load(sp.GroupID), RegAffinityClientPort.MoveFrom(srcPort),
			of.Resubmit{Table: uint8(ExServiceAffinity)}, Goto(ExServiceAffinityOut)}
	}
	for _, e := range sp.EntryPoints(st.NodePortAddresses) {
		nc := newConn
		if sp.Protocol == TCP && !st.hostAddr(e.Addr.Addr()) {
			// A LoadBalancer IP or externalIP is no address of the host, which has no
			// connections of its own on it. A mid-stream packet that finds no ZoneService
			// connection (a route change moved the client's connection here from another
			// ingress node, or this node lost its conntrack) is picked up like a new one: the
			// select group hashes the client's ip and port over the same bucket ids on every
			// node, so it continues to the connection's endpoint; that node delivers it without
			// changing the connection's recorded ingress node (docs/security.md, "Entry points
			// and the host stack").
			nc = anyNew
		}
		if e.Protocol == UDP && e.Addr.Port() == st.Ports.tunnelUDPPort() && e.Addr.Addr() == st.self().InternalIP {
			fs.Warnings = append(fs.Warnings, fmt.Sprintf("entry point %s is this node's Geneve tunnel endpoint: not served", e))
			continue
		}
		fs.EntryPoints = append(fs.EntryPoints, e)
		lb := flow(ExServiceLB, prioEntry, proto, 0, entryMatch(e), CT{Zone: zone, NAT: &NAT{}, Table: uint8(ExServiceCT), HasTable: true})
		var ct []of.Flow
		if filter && sp.sourceFiltered(e) {
			for _, r := range ranges {
				m := append(append(slices.Clone(nc), of.IPSrcPrefix(r)), entryMatch(e)...)
				ct = append(ct, flow(ExServiceCT, prioEntry, proto, 0, m, toEndpoint...))
			}
			ct = append(ct, flow(ExServiceCT, prioSourceDeny, proto, 0, append(slices.Clone(nc), entryMatch(e)...), DropFor(DropSourceRange)))
		} else {
			ct = append(ct, flow(ExServiceCT, prioEntry, proto, 0, append(slices.Clone(nc), entryMatch(e)...), toEndpoint...))
		}
		fs.entryFlow(e, append([]of.Flow{lb}, ct...)...)
		fs.Flows = append(append(fs.Flows, lb), ct...)
	}
	g := OFGroup{ID: sp.GroupID, Type: of.GroupSelect, SelectionFields: fields}
	if affinity {
		g.SelectionParam = AffinityBasis(sp.AffinityPeriod)
	}
	// Bucket ids are a function of the endpoint (BucketIDs), and the buckets are ordered by id:
	// OVS's choice for a connection then depends only on the set of endpoints, never on their
	// order or on the positions of other endpoints.
	ids := bucketIDs(eps) // each endpoint once (eps is sorted in place; not used after)
	slices.SortFunc(ids, func(a, b bucketID) int { return cmp.Compare(a.id, b.id) })
	if len(ids) > MaxGroupBuckets {
		fs.Warnings = append(fs.Warnings, fmt.Sprintf("%d usable endpoints, more than the %d a select group can hold: the %d with the lowest bucket ids are used", len(ids), MaxGroupBuckets, MaxGroupBuckets))
		ids = ids[:MaxGroupBuckets]
	}
	idle := uint16(min(sp.AffinitySeconds, MaxAffinitySeconds))
	if affinity && sp.AffinitySeconds > MaxAffinitySeconds {
		fs.Warnings = append(fs.Warnings, fmt.Sprintf("sessionAffinity timeoutSeconds %d is more than the %d s idle timeout of an Open vSwitch flow: a client's learned endpoint is forgotten after %d s without a new connection (its next one still hashes to the same endpoint while the endpoints do not change)", sp.AffinitySeconds, MaxAffinitySeconds, MaxAffinitySeconds))
	}
	// A full sync holds every group at once: the buckets, their action lists and their NATs
	// are allocated once per group, and every bucket shares one exec list (never modified).
	g.Buckets = make([]Bucket, len(ids))
	acts := make([]of.Action, len(ids))
	nats := make([]NAT, len(ids))
	for i, b := range ids {
		ep := b.ep
		if sp.Protocol == UDP {
			fs.Endpoints = append(fs.Endpoints, ep)
		}
		nats[i] = NAT{Dst: ep}
		commit := CT{Commit: true, Zone: zone, Table: uint8(ExServiceOut), HasTable: true,
			NAT: &nats[i], Exec: clientMACExec}
		acts[i] = commit
		g.Buckets[i] = Bucket{ID: b.id, Weight: 100, Actions: acts[i : i+1 : i+1]}
		if affinity {
			// Open vSwitch runs a bucket's actions as an OpenFlow action set: only set-field
			// and move, then one of group, output, resubmit or ct; a learn would be left out.
			// The bucket names its endpoint in the registers and resubmits to
			// ExServiceAffinityOut, whose flow for that endpoint learns and commits, as it does
			// for a client whose learned flow named the endpoint.
			// RegAffinityEndpoint names the endpoint by its IPv4 address, an IPv6 one (128 bits
			// do not fit a register) by its bucket id, unique in the group and the same on
			// every node.
			epTag, epPort := b.id, uint32(ep.Port())
			if sp.Family == IPv4 {
				epTag = uint32(ipv4Value(ep.Addr()))
			}
			g.Buckets[i].Actions = []of.Action{RegAffinityEndpoint.Load(epTag), RegAffinityEndpointPort.Load(epPort), of.Resubmit{Table: uint8(ExServiceAffinityOut)}}
			c := AffinityCookie(sp.Key(), sp.AffinitySeconds, ep)
			fs.Learned = append(fs.Learned, c)
			m := []of.Match{RegAffinityPort.MatchValue(sp.GroupID), RegAffinityEndpoint.MatchValue(epTag), RegAffinityEndpointPort.MatchValue(epPort)}
			fs.Flows = append(fs.Flows, flow(ExServiceAffinityOut, prioEntry, proto, 0, m, affinityLearn(idle, c, ep, epTag), commit))
		}
	}
	if affinity && len(ids) > 0 {
		fs.Flows = append(fs.Flows, flow(ExServiceAffinityOut, prioAffinityMiss, proto, 0,
			[]of.Match{RegAffinityPort.MatchValue(sp.GroupID)}, Group(sp.GroupID)))
	}
	slices.Sort(fs.Learned)
	fs.Groups = []OFGroup{g}
	sortEntryPoints(fs.EntryPoints)
	slices.SortFunc(fs.Endpoints, func(a, b netip.AddrPort) int { return a.Compare(b) })
	fs.Endpoints = slices.Compact(fs.Endpoints)
	return fs, fs.Finish()
}

// usableEndpoints returns the endpoints of sp a bucket can DNAT to (of sp.Family, with a port),
// possibly with duplicates (BuildServicePort compacts them once sorted by bucket id).
func usableEndpoints(sp *ServicePort) []netip.AddrPort {
	eps := make([]netip.AddrPort, 0, len(sp.Endpoints))
	for _, ep := range sp.Endpoints {
		if sp.Family.Has(ep.IP) && ep.Port != 0 {
			eps = append(eps, netip.AddrPortFrom(ep.IP, ep.Port))
		}
	}
	return eps
}

// AffinityPeriodAt is ServicePort.AffinityPeriod for a port with AffinitySeconds seconds (> 0) at
// time t, and the time the next period starts: the periods are AffinitySeconds long and counted
// from the Unix epoch, so nodes with synchronized clocks agree on them.
func AffinityPeriodAt(t time.Time, seconds uint32) (period uint64, next time.Time) {
	s := max(t.Unix(), 0)
	period = uint64(s) / uint64(seconds)
	return period, time.Unix(int64(period+1)*int64(seconds), 0)
}

// AffinityBasis is the select group's hash basis (selection_method_param) in affinity period
// period: the period through the SplitMix64 finalizer, so that consecutive periods get unrelated
// bases (Open vSwitch 3.1 hashes the basis with hash_uint64, and consecutive small bases were
// seen to pick the same bucket several periods in a row); 0 for period 0 (no basis).
func AffinityBasis(period uint64) uint64 {
	if period == 0 {
		return 0
	}
	z := period + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// MaxAffinitySeconds is the longest idle timeout a learned affinity flow can have: an OpenFlow
// idle_timeout is 16 bits of seconds (Kubernetes allows timeoutSeconds up to 86400).
const MaxAffinitySeconds = 65535

// AffinityCookie is the cookie (KindLearnedAffinity) of the flows that Service port k's bucket
// for endpoint ep learns with timeout seconds: FNV-1a of the three, so that an endpoint that
// leaves, a changed timeout and affinity turned off each drop exactly the learned flows they
// invalidate (Plan.Replace, FullDiff).
func AffinityCookie(k Key, seconds uint32, ep netip.AddrPort) Cookie {
	h := newFNV64a()
	fmt.Fprintf(h, "%s|%d|%s", k, seconds, ep)
	return NewCookie(KindLearnedAffinity, h.Sum64())
}

// AffinityLearn is the learn action (ovs-actions(7) "The learn action") of a sessionAffinity
// Service port's ExServiceAffinityOut flow for IPv4 endpoint ep: it records the client's choice
// in ExServiceAffinity,
//
//	table=ExServiceAffinity, priority=prioEntry, idle_timeout=idle (seconds), cookie=cookie
//	ip, reg4=<RegAffinityPort of this packet>, nw_src=<this packet's nw_src>
//	actions: load ep's address -> RegAffinityEndpoint, ep's port -> RegAffinityEndpointPort
//
// replacing the client's earlier choice (same match and priority) or refreshing it. Only new
// connections run it, so its idle timer restarts at each new connection of the client, as
// kube-proxy's affinity timeout does. An IPv6 port's learn (BuildServicePort) matches ipv6 and
// ipv6_src and loads the endpoint's bucket id instead of its address.
func AffinityLearn(idle uint16, cookie Cookie, ep netip.AddrPort) of.Action {
	return affinityLearn(idle, cookie, ep, uint32(ipv4Value(ep.Addr())))
}

// affinityLearn is AffinityLearn for an endpoint of either family named by tag in
// RegAffinityEndpoint (its IPv4 address, or its bucket id for IPv6).
func affinityLearn(idle uint16, cookie Cookie, ep netip.AddrPort, tag uint32) of.Action {
	ethType, client := uint64(0x800), of.Ref(of.FieldIPv4Src)
	if ep.Addr().Is6() {
		ethType, client = 0x86dd, of.Ref(of.FieldIPv6Src)
	}
	return of.Learn{
		Table:       uint8(ExServiceAffinity),
		Priority:    prioEntry,
		IdleTimeout: idle,
		Cookie:      uint64(cookie),
		Specs: []of.LearnSpec{
			{Kind: of.LearnMatch, Dst: of.Ref(of.FieldEthType), Value: ethType},
			{Kind: of.LearnMatch, Dst: RegAffinityPort.ref(), Src: RegAffinityPort.ref(), FromField: true},
			{Kind: of.LearnMatch, Dst: client, Src: client, FromField: true},
			{Kind: of.LearnLoad, Dst: RegAffinityEndpoint.ref(), Value: uint64(tag)},
			{Kind: of.LearnLoad, Dst: RegAffinityEndpointPort.ref(), Value: uint64(ep.Port())},
		},
	}
}

// clientMACExec is the exec list of every Service bucket's ct: the client's MAC into
// CTLabelClientMAC. Shared by every bucket (its capacity is its length: an append copies).
var clientMACExec = []of.Action{CTLabelClientMAC.MoveFrom(nxmEthSrc)}[:1:1]

// hostAddr reports whether a is an address of this node's host stack: its InternalIP or a
// NodePort address (of either family: an address is compared with those of its own family only,
// as netip.Addr equality has it).
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

// sourceFiltered reports whether new connections to entry point e are subject to
// sp.SourceRanges: e is a LoadBalancer IP or externalIP with the Service port (an address that is
// also a NodePort address with the same port number is filtered: never wider than asked).
func (sp *ServicePort) sourceFiltered(e EntryPoint) bool {
	if !sp.FilterSources || e.Addr.Port() != sp.Port || e.Protocol != sp.Protocol {
		return false
	}
	a := e.Addr.Addr()
	return slices.Contains(sp.LoadBalancerIPs, a) || slices.Contains(sp.ExternalIPs, a)
}

// sourceRanges returns the source ranges that filter sp's LoadBalancer IPs and externalIPs:
// of sp.Family, masked, sorted, without a range contained in another; filter is false when sp
// does not filter, or when a range is 0.0.0.0/0 (::/0 for IPv6: everyone is let in, no filter
// flows).
func sourceRanges(sp *ServicePort) (ranges []netip.Prefix, filter bool) {
	if !sp.FilterSources {
		return nil, false
	}
	for _, r := range sp.SourceRanges {
		if !r.IsValid() || !sp.Family.Has(r.Addr()) {
			continue
		}
		if r.Bits() == 0 {
			return nil, false
		}
		ranges = append(ranges, r.Masked())
	}
	slices.SortFunc(ranges, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	out := ranges[:0]
	for _, r := range ranges {
		// Sorted by address then length: a range contained in an earlier one follows it.
		if len(out) > 0 && out[len(out)-1].Bits() <= r.Bits() && out[len(out)-1].Contains(r.Addr()) {
			continue
		}
		out = append(out, r)
	}
	return out, true
}

// entryMatch matches the packets addressed to entry point e (its protocol is the flow's).
func entryMatch(e EntryPoint) []of.Match {
	return []of.Match{nwDst(e.Addr.Addr()), of.TPDst(e.Addr.Port())}
}

// nwDst matches the destination address a: nw_dst for IPv4, ipv6_dst for IPv6.
func nwDst(a netip.Addr) of.Match { return of.IPDst(a) }

// ServiceZone returns the conntrack zone of family f's Service traffic on br-ex: ZoneService for
// IPv4, ZoneService6 for IPv6.
func (f Family) ServiceZone() uint16 {
	if f == IPv6 {
		return ZoneService6
	}
	return ZoneService
}

// protocol returns the OpenFlow protocol of a Service port's L4 protocol in family f: tcp, udp
// for IPv4; tcp6, udp6 for IPv6.
func (f Family) protocol(p Protocol) (of.Protocol, error) {
	var proto of.Protocol
	switch p {
	case TCP:
		proto = of.ProtoTCP
	case UDP:
		proto = of.ProtoUDP
	default:
		return of.ProtoNone, fmt.Errorf("protocol %q not supported", p)
	}
	if f == IPv6 {
		return proto.V6(), nil
	}
	return proto, nil
}

// Claims returns the entry points sp asks for, in the form that Services compete for: the NodePort
// as NodePortEntry (every NodePort address of a node; the same claim for both families of a
// dual-stack Service, which share the nodePort), then each LoadBalancer ingress IP and
// externalIP of sp.Family with the Service port, without duplicates.
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
			if sp.Family.Has(a) && sp.Port != 0 {
				add(EntryPoint{Protocol: sp.Protocol, Addr: netip.AddrPortFrom(a, sp.Port)})
			}
		}
	}
	return out
}

// EntryPoints returns the entry points sp is served on by a node whose NodePort addresses are
// nodePortAddrs: Claims with the NodePort expanded to each NodePort address of sp.Family,
// without duplicates (an LB IP equal to a node address with the NodePort's number is one entry
// point).
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
			if sp.Family.Has(a) {
				add(EntryPoint{Protocol: c.Protocol, Addr: netip.AddrPortFrom(a, c.Addr.Port())})
			}
		}
	}
	return out
}
