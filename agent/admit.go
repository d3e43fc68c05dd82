package agent

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// ReasonRefused is the Event reason of an entry point a Service may not claim (admission).
const ReasonRefused = "SourceIPRefused"

// admission decides which LoadBalancer ingress IPs and externalIPs a Service may claim. The
// agent's flows run before the host stack on every node, so an address that a Service claims
// wrongly captures traffic deterministically (the CVE-2020-8554 class: spec.externalIPs can be
// written by anyone who may edit a Service). The rules, for opted-in Services:
//
//   - no LoadBalancer ingress IP or externalIP may be the address (InternalIP or ExternalIP) of
//     any Node: on node addresses only NodePorts are served;
//   - none may lie inside a Node's spec.podCIDRs (a pod's own address, or the node's pod
//     gateway address, the CIDR's first address): the entry point would capture what pods and
//     the hosts send to that address;
//   - none may lie inside the Service CIDRs (the ServiceCIDR objects of networking.k8s.io/v1,
//     and --service-cidrs) nor be the ClusterIP of any Service the agent sees (without either
//     the agent only knows the ClusterIPs it sees);
//   - none may be a next hop of this node's routes (ReconcilerConfig.RouteNextHops: the
//     router, whose address carries the node's own traffic);
//   - an externalIP may not be a LoadBalancer ingress IP of another Service (opted in or not);
//   - an externalIP must lie inside the operator's allow-list (--external-ip-cidrs; empty: no
//     externalIP is served, as Kubernetes' DenyServiceExternalIPs advice recommends);
//   - a NodePort must lie in the cluster's NodePort range (--service-node-port-range, the
//     API server's flag of that name; default 30000-32767): the API server enforces it, but a
//     manifests directory does not, and a NodePort of 22 would capture the nodes' SSH;
//   - a NodePort that a Service the agent does not serve (kube-proxy's) also has (only a
//     manifests directory allows that) is never taken silently: the older Service keeps it (the
//     opted-in one loses it when the other is older) and the collision is reported.
//
// Refused addresses are left out of the Service's entry points (its other entry points are
// served) and reported with a ReasonRefused Event. It is owned by the model.
type admission struct {
	externalCIDRs []netip.Prefix
	// serviceCIDRs are the cluster's Service CIDRs: the union of flagCIDRs and apiCIDRs, each
	// with where it came from (serviceCIDRFrom).
	serviceCIDRs     []netip.Prefix
	serviceCIDRFrom  map[netip.Prefix]string
	flagServiceCIDRs []netip.Prefix
	// apiServiceCIDRs are the ServiceCIDR objects' spec.cidrs (networking.k8s.io/v1), by name.
	apiServiceCIDRs map[string][]netip.Prefix
	nodePortRange   [2]uint16             // inclusive; zero: DefaultNodePortRange
	nodeAddrs       map[netip.Addr]string // every address of every Node -> the Node's name
	// podCIDRs are every Node's spec.podCIDRs -> the Node's name; podCIDRBits their distinct
	// prefix lengths, longest first (podCIDROf).
	podCIDRs    map[netip.Prefix]string
	podCIDRBits []int
	// nextHops are the next hops of this node's routes (RouteNextHops).
	nextHops []netip.Addr
	lbOf     map[types.NamespacedName][]netip.Addr
	lbOwners map[netip.Addr][]types.NamespacedName
	extUsers map[types.NamespacedName]bool // Services with spec.externalIPs
	// clusterIPs are every Service's spec.clusterIPs -> the Services; clusterIPsOf by Service.
	clusterIPs   map[netip.Addr][]types.NamespacedName
	clusterIPsOf map[types.NamespacedName][]netip.Addr
	// wants are the LoadBalancer IPs and externalIPs each address is asked for by (to recheck
	// them when a ClusterIP comes or goes).
	wants   map[netip.Addr][]types.NamespacedName
	wantsOf map[types.NamespacedName][]netip.Addr
	// nodePorts are every Service's nodePorts (flows.NodePortEntry) -> the Services, with their
	// claim ranks; nodePortsOf by Service.
	nodePorts   map[flows.EntryPoint][]types.NamespacedName
	nodePortsOf map[types.NamespacedName][]flows.EntryPoint
	rank        map[types.NamespacedName]claimRank
	// served reports whether the agent serves a Service (Selector.Select); nil: none.
	served func(types.NamespacedName) bool
}

// DefaultNodePortRange is Kubernetes' default --service-node-port-range.
var DefaultNodePortRange = [2]uint16{30000, 32767}

// ParsePortRange parses a --service-node-port-range value "FIRST-LAST" (inclusive, 1..65535,
// FIRST <= LAST); "" (or blanks) is the zero range, DefaultNodePortRange to the Reconciler.
// Errors: no "-", a bound that is not a 16-bit number, FIRST 0 or above LAST.
func ParsePortRange(s string) ([2]uint16, error) {
	if strings.TrimSpace(s) == "" {
		return [2]uint16{}, nil
	}
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return [2]uint16{}, fmt.Errorf("%q: want FIRST-LAST", s)
	}
	lo, err1 := strconv.ParseUint(a, 10, 16)
	hi, err2 := strconv.ParseUint(b, 10, 16)
	if err := errors.Join(err1, err2); err != nil {
		return [2]uint16{}, fmt.Errorf("%q: %w", s, err)
	}
	if lo == 0 || lo > hi {
		return [2]uint16{}, fmt.Errorf("%q: want 1 <= FIRST <= LAST", s)
	}
	return [2]uint16{uint16(lo), uint16(hi)}, nil
}

// FormatPortRange renders r as ParsePortRange reads it: "FIRST-LAST".
func FormatPortRange(r [2]uint16) string {
	return fmt.Sprintf("%d-%d", r[0], r[1])
}

func newAdmission(externalCIDRs []netip.Prefix, nodePortRange [2]uint16) *admission {
	if nodePortRange == [2]uint16{} {
		nodePortRange = DefaultNodePortRange
	}
	return &admission{externalCIDRs: externalCIDRs, nodePortRange: nodePortRange, nodeAddrs: map[netip.Addr]string{},
		podCIDRs: map[netip.Prefix]string{},
		lbOf:     map[types.NamespacedName][]netip.Addr{}, lbOwners: map[netip.Addr][]types.NamespacedName{},
		extUsers:   map[types.NamespacedName]bool{},
		clusterIPs: map[netip.Addr][]types.NamespacedName{}, clusterIPsOf: map[types.NamespacedName][]netip.Addr{},
		wants: map[netip.Addr][]types.NamespacedName{}, wantsOf: map[types.NamespacedName][]netip.Addr{},
		nodePorts: map[flows.EntryPoint][]types.NamespacedName{}, nodePortsOf: map[types.NamespacedName][]flows.EntryPoint{},
		rank: map[types.NamespacedName]claimRank{}}
}

// setNodes recomputes the node addresses and pod CIDRs from the Node cache and reports whether
// they changed.
func (a *admission) setNodes(nodes map[string]*corev1.Node) bool {
	next := map[netip.Addr]string{}
	cidrs := map[netip.Prefix]string{}
	for name, n := range nodes {
		for _, ad := range n.Status.Addresses {
			if ad.Type != corev1.NodeInternalIP && ad.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(ad.Address); err == nil {
				next[ip.Unmap()] = name
			}
		}
		pcs := n.Spec.PodCIDRs
		if len(pcs) == 0 && n.Spec.PodCIDR != "" {
			pcs = []string{n.Spec.PodCIDR}
		}
		for _, c := range pcs {
			if p, err := netip.ParsePrefix(c); err == nil {
				cidrs[p.Masked()] = name
			}
		}
	}
	if maps.Equal(next, a.nodeAddrs) && maps.Equal(cidrs, a.podCIDRs) {
		return false
	}
	a.nodeAddrs, a.podCIDRs = next, cidrs
	a.podCIDRBits = a.podCIDRBits[:0]
	for p := range cidrs {
		if !slices.Contains(a.podCIDRBits, p.Bits()) {
			a.podCIDRBits = append(a.podCIDRBits, p.Bits())
		}
	}
	slices.SortFunc(a.podCIDRBits, func(x, y int) int { return y - x })
	return true
}

// setServiceCIDRs records the cluster's Service CIDRs: flag (--service-cidrs) and api (the
// spec.cidrs of every networking.k8s.io/v1 ServiceCIDR, by object name; the API server's
// --service-cluster-ip-range appears there as the ServiceCIDR "kubernetes"). No LoadBalancer
// IP or externalIP inside their union is admitted. It reports whether the union or the source
// named for a CIDR changed.
func (a *admission) setServiceCIDRs(flag []netip.Prefix, api map[string][]netip.Prefix) bool {
	from := map[netip.Prefix]string{}
	for _, p := range flag {
		from[p.Masked()] = "--service-cidrs"
	}
	names := make([]string, 0, len(api))
	for name := range api {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for _, p := range api[name] {
			if _, ok := from[p.Masked()]; !ok {
				from[p.Masked()] = "ServiceCIDR " + name
			}
		}
	}
	cidrs := make([]netip.Prefix, 0, len(from))
	for p := range from {
		cidrs = append(cidrs, p)
	}
	slices.SortFunc(cidrs, func(x, y netip.Prefix) int {
		if c := x.Addr().Compare(y.Addr()); c != 0 {
			return c
		}
		return x.Bits() - y.Bits()
	})
	a.flagServiceCIDRs, a.apiServiceCIDRs = flag, api
	if slices.Equal(cidrs, a.serviceCIDRs) && maps.Equal(from, a.serviceCIDRFrom) {
		return false
	}
	a.serviceCIDRs, a.serviceCIDRFrom = cidrs, from
	return true
}

// setNextHops records the next hops of this node's routes and reports whether they changed.
func (a *admission) setNextHops(hops []netip.Addr) bool {
	hops = sortedUnique(slices.Clone(hops))
	if slices.Equal(hops, a.nextHops) {
		return false
	}
	a.nextHops = hops
	return true
}

// index replaces name's entry in a many-to-many index (old: its previous keys) and returns the
// keys that were added or removed. The Services of a key are a set kept as a slice (each once,
// in the order they came): almost every key has one, and a map per key would cost ten times the
// memory at 10k Services.
func index[K comparable](idx map[K][]types.NamespacedName, of map[types.NamespacedName][]K, name types.NamespacedName, keys []K) []K {
	old := of[name]
	var changed []K
	for _, k := range old {
		if !slices.Contains(keys, k) {
			changed = append(changed, k)
		}
		removeName(idx, k, name)
	}
	for _, k := range keys {
		if !slices.Contains(old, k) {
			changed = append(changed, k)
		}
		addName(idx, k, name)
	}
	if len(keys) == 0 {
		delete(of, name)
	} else {
		of[name] = keys
	}
	return changed
}

// setService records the LoadBalancer ingress IPs, ClusterIPs, nodePorts and the use of
// externalIPs of Service name (nil: deleted). It reports whether its LoadBalancer IPs changed,
// and returns the other Services whose admission may change with it: those that ask for an
// address that became or stopped being a ClusterIP, and those that share a nodePort that came
// or went.
func (a *admission) setService(name types.NamespacedName, svc *corev1.Service) (lbChanged bool, affected []types.NamespacedName) {
	var lbs, cips, wants []netip.Addr
	var nps []flows.EntryPoint
	if svc != nil {
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ip, err := netip.ParseAddr(ing.IP); err == nil {
				lbs = append(lbs, ip.Unmap())
			}
		}
		ips := svc.Spec.ClusterIPs
		if len(ips) == 0 && svc.Spec.ClusterIP != "" {
			ips = []string{svc.Spec.ClusterIP}
		}
		for _, s := range ips {
			if ip, err := netip.ParseAddr(s); err == nil {
				cips = append(cips, ip.Unmap())
			}
		}
		// An ipMode Proxy ingress is the load balancer's own address, never an entry point
		// (proxiedIngress): it stays in lbs (an externalIP or egress IP equal to it is still
		// someone else's address) but is not asked for.
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ip, err := netip.ParseAddr(ing.IP); err == nil && !proxiedIngress(ing) {
				wants = append(wants, ip.Unmap())
			}
		}
		for _, s := range svc.Spec.ExternalIPs {
			if ip, err := netip.ParseAddr(s); err == nil {
				wants = append(wants, ip.Unmap())
			}
		}
		for _, p := range svc.Spec.Ports {
			if p.NodePort > 0 && p.NodePort <= 65535 {
				proto := flows.Protocol(p.Protocol)
				if proto == "" {
					proto = flows.TCP
				}
				nps = append(nps, flows.NodePortEntry(proto, uint16(p.NodePort)))
			}
		}
		a.rank[name] = claimRank{created: svc.CreationTimestamp.Time, name: name}
	} else {
		delete(a.rank, name)
	}
	if svc != nil && len(svc.Spec.ExternalIPs) > 0 {
		a.extUsers[name] = true
	} else {
		delete(a.extUsers, name)
	}
	cips, wants = sortedUnique(cips), sortedUnique(wants)
	slices.SortFunc(nps, func(x, y flows.EntryPoint) int { return strings.Compare(x.String(), y.String()) })
	nps = slices.Compact(nps)
	aff := map[types.NamespacedName]bool{}
	for _, ip := range index(a.clusterIPs, a.clusterIPsOf, name, cips) {
		for _, o := range a.wants[ip] {
			aff[o] = true
		}
	}
	index(a.wants, a.wantsOf, name, wants)
	for _, e := range index(a.nodePorts, a.nodePortsOf, name, nps) {
		for _, o := range a.nodePorts[e] {
			aff[o] = true
		}
	}
	// A Service that still shares a nodePort may have changed its rank or its being served.
	for _, e := range nps {
		for _, o := range a.nodePorts[e] {
			aff[o] = true
		}
	}
	delete(aff, name)
	for o := range aff {
		affected = append(affected, o)
	}

	lbs = sortedUnique(lbs)
	old := a.lbOf[name]
	if slices.Equal(old, lbs) {
		return false, affected
	}
	for _, ip := range old {
		removeName(a.lbOwners, ip, name)
	}
	if len(lbs) == 0 {
		delete(a.lbOf, name)
	} else {
		a.lbOf[name] = lbs
	}
	for _, ip := range lbs {
		addName(a.lbOwners, ip, name)
	}
	return true, affected
}

// addName adds name to the set of k in idx (a slice, each name once).
func addName[K comparable](idx map[K][]types.NamespacedName, k K, name types.NamespacedName) {
	if !slices.Contains(idx[k], name) {
		idx[k] = append(idx[k], name)
	}
}

// removeName removes name from the set of k in idx, and k when its set is empty.
func removeName[K comparable](idx map[K][]types.NamespacedName, k K, name types.NamespacedName) {
	if rest := slices.DeleteFunc(idx[k], func(o types.NamespacedName) bool { return o == name }); len(rest) > 0 {
		idx[k] = rest
	} else {
		delete(idx, k)
	}
}

// podCIDROf returns the longest pod CIDR of any Node that holds ip (invalid: none; overlapping
// CIDRs are a conflict of their own). Of each prefix length at most one prefix holds ip (ip
// masked to that length), so there is no tie; it looks up
// the masked address for each length of podCIDRBits, longest first: one map lookup per length
// instead of a walk over every Node's CIDRs (every endpoint of every Service is checked).
func (a *admission) podCIDROf(ip netip.Addr) netip.Prefix {
	for _, bits := range a.podCIDRBits {
		if p, err := ip.Prefix(bits); err == nil {
			if _, ok := a.podCIDRs[p]; ok {
				return p
			}
		}
	}
	return netip.Prefix{}
}

// podCIDROwner returns the Node whose pod CIDR holds ip ("" : none).
func (a *admission) podCIDROwner(ip netip.Addr) string {
	if p := a.podCIDROf(ip); p.IsValid() {
		return a.podCIDRs[p]
	}
	return ""
}

// clusterAddress says why ip may not be a LoadBalancer IP or externalIP of any Service: it is a
// node address, inside a pod CIDR (or a node's pod gateway address), inside the Service CIDRs, a
// ClusterIP or a next hop of this node's routes, or no global unicast address at all (loopback,
// link-local, multicast, unspecified, or an IPv4-mapped IPv6 address: such an entry point would
// capture the host's own link traffic, e.g. BGP or SSH to br-ex's link-local IPv6 address, which
// no Node status lists). what names the field ("loadBalancer ingress IP", "externalIP"); "" when
// ip is none of these.
func (a *admission) clusterAddress(what string, ip netip.Addr) string {
	switch {
	case ip.Is4In6():
		return fmt.Sprintf("%s %s is an IPv4-mapped IPv6 address: refused (write the IPv4 address %s)", what, ip, ip.Unmap())
	case !ip.IsGlobalUnicast():
		return fmt.Sprintf("%s %s is not a global unicast address (loopback, link-local, multicast or unspecified): refused (it would capture the node's own link traffic; use an address the router forwards to the nodes)", what, ip)
	}
	if n, ok := a.nodeAddrs[ip]; ok {
		return fmt.Sprintf("%s %s is an address of Node %s: refused (only NodePorts are served on node addresses)", what, ip, n)
	}
	if best := a.podCIDROf(ip); best.IsValid() {
		if ip == flows.GatewayIP(best) {
			return fmt.Sprintf("%s %s is the pod gateway address of Node %s (the first address of its pod CIDR %s): refused (it would capture what pods send to their gateway; use an address outside the cluster's pod and Service networks)", what, ip, a.podCIDRs[best], best)
		}
		return fmt.Sprintf("%s %s is inside the pod CIDR %s of Node %s: refused (it would capture the traffic of the pod with that address; use an address outside the cluster's pod and Service networks)", what, ip, best, a.podCIDRs[best])
	}
	for _, p := range a.serviceCIDRs {
		if p.Contains(ip) {
			return fmt.Sprintf("%s %s is inside the Service CIDR %s (%s): refused (ClusterIPs are kube-proxy's; use an address outside the cluster's pod and Service networks)", what, ip, p, a.serviceCIDRFrom[p])
		}
	}
	if owners := a.clusterIPs[ip]; len(owners) > 0 {
		names := make([]string, 0, len(owners))
		for _, o := range owners {
			names = append(names, o.String())
		}
		slices.Sort(names)
		return fmt.Sprintf("%s %s is the ClusterIP of Service %s: refused (ClusterIPs are kube-proxy's; use an address outside the cluster's pod and Service networks)", what, ip, strings.Join(names, ", "))
	}
	if slices.Contains(a.nextHops, ip) {
		return fmt.Sprintf("%s %s is a next hop of this node's routes: refused (it would capture the node's own traffic to its router; use an address the router forwards to the nodes)", what, ip)
	}
	return ""
}

// admit removes from sps (the converted ports of Service name) the addresses the Service may not
// claim and says why, once per address.
func (a *admission) admit(name types.NamespacedName, sps []flows.ServicePort) ([]flows.ServicePort, []string, []RefusedEntry) {
	var problems []string
	var refused []RefusedEntry
	said := map[netip.Addr]string{}
	refuse := func(ip netip.Addr, format string, args ...any) bool {
		if _, ok := said[ip]; !ok {
			said[ip] = fmt.Sprintf(format, args...)
			problems = append(problems, said[ip])
		}
		return true
	}
	refusedLB := func(ip netip.Addr) bool {
		if why := a.clusterAddress("loadBalancer ingress IP", ip); why != "" {
			return refuse(ip, "%s", why)
		}
		return false
	}
	refusedExt := func(ip netip.Addr) bool {
		if why := a.clusterAddress("externalIP", ip); why != "" {
			return refuse(ip, "%s", why)
		}
		for _, o := range a.lbOwners[ip] {
			if o != name {
				return refuse(ip, "externalIP %s is the LoadBalancer ingress IP of Service %s: refused", ip, o)
			}
		}
		if !slices.ContainsFunc(a.externalCIDRs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			allowed := "none"
			if len(a.externalCIDRs) > 0 {
				var s []string
				for _, p := range a.externalCIDRs {
					s = append(s, p.String())
				}
				allowed = strings.Join(s, ",")
			}
			return refuse(ip, "externalIP %s is outside the allowed externalIP ranges (--external-ip-cidrs: %s): refused", ip, allowed)
		}
		return false
	}
	out := make([]flows.ServicePort, 0, len(sps))
	for _, sp := range sps {
		if np := sp.NodePort; np != 0 && (np < a.nodePortRange[0] || np > a.nodePortRange[1]) {
			msg := fmt.Sprintf("nodePort %d of port %q is outside the NodePort range %d-%d (--service-node-port-range): refused", np, sp.PortName, a.nodePortRange[0], a.nodePortRange[1])
			problems = append(problems, msg)
			refused = append(refused, RefusedEntry{Entry: flows.NodePortEntry(sp.Protocol, np), Reason: msg})
			sp.NodePort = 0
		}
		if np := sp.NodePort; np != 0 {
			if msg, lost := a.nodePortCollision(name, flows.NodePortEntry(sp.Protocol, np)); msg != "" {
				problems = append(problems, msg)
				if lost {
					refused = append(refused, RefusedEntry{Entry: flows.NodePortEntry(sp.Protocol, np), Reason: msg})
					sp.NodePort = 0
				}
			}
		}
		sp.LoadBalancerIPs = slices.DeleteFunc(slices.Clone(sp.LoadBalancerIPs), refusedLB)
		sp.ExternalIPs = slices.DeleteFunc(slices.Clone(sp.ExternalIPs), refusedExt)
		out = append(out, sp)
	}
	for _, sp := range sps {
		for _, ips := range [][]netip.Addr{sp.LoadBalancerIPs, sp.ExternalIPs} {
			for _, ip := range ips {
				if msg, ok := said[ip]; ok && sp.Port != 0 {
					refused = append(refused, RefusedEntry{Entry: flows.EntryPoint{Protocol: sp.Protocol, Addr: netip.AddrPortFrom(ip, sp.Port)}, Reason: msg})
				}
			}
		}
	}
	return out, problems, refused
}

// nodePortCollision reports a nodePort e of the served Service name that a Service the agent
// does not serve also has (collisions between served Services are the claims' business). The
// older Service keeps it (claimRank): lost says that name loses it.
func (a *admission) nodePortCollision(name types.NamespacedName, e flows.EntryPoint) (msg string, lost bool) {
	var others []types.NamespacedName
	for _, o := range a.nodePorts[e] {
		if o != name && (a.served == nil || !a.served(o)) {
			others = append(others, o)
		}
	}
	if len(others) == 0 {
		return "", false
	}
	slices.SortFunc(others, func(x, y types.NamespacedName) int { return strings.Compare(x.String(), y.String()) })
	mine := a.rank[name]
	for _, o := range others {
		if a.rank[o].less(mine) {
			return fmt.Sprintf("%s is also the nodePort of Service %s, which ovs-srcip does not serve and which is older: refused, so that its traffic keeps reaching %s (give one of the two Services another nodePort)", e, o, o), true
		}
	}
	return fmt.Sprintf("%s is also the nodePort of Service %s, which ovs-srcip does not serve: this Service is older and keeps it, so the NodePort traffic of %s reaches this Service's endpoints (give one of the two Services another nodePort)", e, others[0], others[0]), false
}

// RefusedEntry is an entry point a Service asks for that the agent refuses (docs/security.md),
// with the reason (the SourceIPRefused Event's message).
type RefusedEntry struct {
	Entry  flows.EntryPoint
	Reason string
}
