package agent

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// AnnotationPrefix is the prefix of every annotation the agent reads (the informers keep no other).
const AnnotationPrefix = "ovs-srcip.io/"

// AnnotationPreserveSourceIP is the Service annotation that opts a Service in; its value must be
// "true".
const AnnotationPreserveSourceIP = AnnotationPrefix + "preserve-source-ip"

// LabelServiceProxyName is the Service label that hands a Service to another proxy than
// kube-proxy (kube-proxy skips Services that carry it); with PreserveAll such a Service is not
// eligible either.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// LabelHeadless (corev1.IsHeadlessService) is the label kube-proxy's Service informer also
// selects away: kube-proxy programs nothing for a Service carrying it, whatever its type, so
// with PreserveAll such a Service is not eligible either.
const LabelHeadless = corev1.IsHeadlessService

// PreserveMode says which Services the agent serves (the flag --preserve-source-ip).
type PreserveMode string

const (
	// PreserveAnnotated serves the Services annotated AnnotationPreserveSourceIP "true" that
	// qualify (OptIn), and no other. It is the default; the zero PreserveMode means it too.
	PreserveAnnotated PreserveMode = "annotated"
	// PreserveAll serves every Eligible Service as if it were annotated "true", unless it is
	// annotated "false" (an explicit opt-out). A Service that carries the annotation is judged
	// as in PreserveAnnotated; one that is not eligible is left to kube-proxy without a word.
	PreserveAll PreserveMode = "all"
)

// ParsePreserveMode parses a --preserve-source-ip value ("" is PreserveAnnotated).
func ParsePreserveMode(s string) (PreserveMode, error) {
	switch m := PreserveMode(strings.TrimSpace(s)); m {
	case "", PreserveAnnotated:
		return PreserveAnnotated, nil
	case PreserveAll:
		return PreserveAll, nil
	default:
		return "", fmt.Errorf("%q: want %s or %s", s, PreserveAnnotated, PreserveAll)
	}
}

// How a served Service came to be served (ServiceReport.Via).
const (
	// ViaAnnotation: the Service carries AnnotationPreserveSourceIP "true".
	ViaAnnotation = "annotation"
	// ViaAll: the Service carries no annotation and is Eligible under PreserveAll.
	ViaAll = "all mode"
)

// Selector decides which Services get flows: the mode and the externalIP allow-list
// (--external-ip-cidrs), which decides whether a ClusterIP Service's externalIPs make it
// eligible under PreserveAll. The zero Selector is PreserveAnnotated.
type Selector struct {
	Mode            PreserveMode
	ExternalIPCIDRs []netip.Prefix
	// Node and Zone are this node's name and its topology.kubernetes.io/zone label: the
	// EndpointSlices' hints are honoured for them as kube-proxy does (endpointsFor). Empty:
	// zone hints never match (kube-proxy's rule for a node without the label).
	Node, Zone string
	// SCTP says why this node's datapath does not serve SCTP Service ports (SCTPSupport); ""
	// is the generic reason. The pipeline serves no SCTP port: every one is declined.
	SCTP string
}

// Select reports whether svc gets flows and how (via: ViaAnnotation or ViaAll), or why not
// (reason). A Service that carries the annotation is judged by OptIn in both modes, except that
// under PreserveAll the value "false" reads as an opt-out. Without the annotation a Service is
// served under PreserveAll when it is Eligible; otherwise, and always under PreserveAnnotated,
// it is not served and reason is empty: it is simply not ours (kube-proxy's), nothing to report.
func (s Selector) Select(svc *corev1.Service) (ok bool, via, reason string) {
	if svc == nil {
		return false, "", ""
	}
	v, set := svc.Annotations[AnnotationPreserveSourceIP]
	switch {
	case set && v == "false" && s.Mode == PreserveAll:
		return false, "", fmt.Sprintf("annotation %s is \"false\": opted out (--preserve-source-ip=all serves the other eligible Services)", AnnotationPreserveSourceIP)
	case set:
		ok, reason = OptIn(svc)
		if ok {
			via = ViaAnnotation
		}
		return ok, via, reason
	case s.Mode == PreserveAll && Eligible(svc, s.ExternalIPCIDRs):
		return true, ViaAll, ""
	}
	return false, "", ""
}

// Eligible reports whether svc, without the annotation, is served under PreserveAll: its
// externalTrafficPolicy is Cluster (or unset); it has an external entry point: type NodePort or
// LoadBalancer, or an externalIP of one of its families (ServiceFamilies) inside externalCIDRs
// (--external-ip-cidrs, either family: a ClusterIP
// Service whose externalIPs the agent would refuse anyway stays kube-proxy's, with no Event);
// it is neither ExternalName nor headless; it is not handed to another proxy (label
// LabelServiceProxyName) nor labelled headless (LabelHeadless). sessionAffinity ClientIP is
// served (AffinitySeconds).
func Eligible(svc *corev1.Service, externalCIDRs []netip.Prefix) bool {
	if svc == nil {
		return false
	}
	sp := svc.Spec
	if p := sp.ExternalTrafficPolicy; p != "" && p != corev1.ServiceExternalTrafficPolicyCluster {
		return false
	}
	if sp.Type == corev1.ServiceTypeExternalName || sp.ClusterIP == corev1.ClusterIPNone {
		return false
	}
	if _, ok := svc.Labels[LabelServiceProxyName]; ok {
		return false
	}
	if _, ok := svc.Labels[LabelHeadless]; ok {
		return false
	}
	if sp.Type == corev1.ServiceTypeNodePort || sp.Type == corev1.ServiceTypeLoadBalancer {
		return true
	}
	fams := serviceFamilies(svc)
	return slices.ContainsFunc(sp.ExternalIPs, func(s string) bool {
		a, err := netip.ParseAddr(s)
		if err != nil || !fams.has(flows.FamilyOf(a.Unmap())) {
			return false
		}
		return slices.ContainsFunc(externalCIDRs, func(p netip.Prefix) bool { return p.Contains(a.Unmap()) })
	})
}

// OptIn reports whether an annotated svc gets flows: it carries AnnotationPreserveSourceIP
// "true", its externalTrafficPolicy is Cluster (or unset) and it is reachable from outside (type
// NodePort or LoadBalancer, or it has externalIPs). When the annotation is set but the Service
// does not qualify (a value other than "true" included), reason says why (for an Event and
// srcipctl status); without the annotation reason is empty. It is PreserveAnnotated's rule
// (Selector.Select).
func OptIn(svc *corev1.Service) (ok bool, reason string) {
	if svc == nil {
		return false, ""
	}
	v, set := svc.Annotations[AnnotationPreserveSourceIP]
	if !set {
		return false, ""
	}
	if v != "true" {
		return false, fmt.Sprintf("annotation %s is %q, not \"true\": the Service is not opted in (the value must be exactly \"true\")", AnnotationPreserveSourceIP, v)
	}
	if p := svc.Spec.ExternalTrafficPolicy; p != "" && p != corev1.ServiceExternalTrafficPolicyCluster {
		return false, fmt.Sprintf("annotation %s ignored: externalTrafficPolicy is %s, not Cluster (the client IP is already kept)", AnnotationPreserveSourceIP, p)
	}
	t := svc.Spec.Type
	if t != corev1.ServiceTypeNodePort && t != corev1.ServiceTypeLoadBalancer && len(svc.Spec.ExternalIPs) == 0 {
		return false, fmt.Sprintf("annotation %s ignored: type %s without externalIPs has no external entry point", AnnotationPreserveSourceIP, t)
	}
	return true, ""
}

// ServicePorts is Selector.ServicePorts of PreserveAnnotated.
func ServicePorts(svc *corev1.Service, eps []*discoveryv1.EndpointSlice) ([]flows.ServicePort, []string) {
	return Selector{}.ServicePorts(svc, eps)
}

// ServicePorts converts a served Service (Select) and its EndpointSlices (those labelled
// kubernetes.io/service-name=<svc.Name> in its namespace) into one flows.ServicePort per TCP or
// UDP spec.ports entry and IP family of the Service (ServiceFamilies: spec.ipFamilies), in
// spec.ports order and, for one port, IPv4 before IPv6. Each ServicePort holds only its
// family's LoadBalancer ingress IPs, externalIPs, loadBalancerSourceRanges and endpoints (the
// EndpointSlices of that addressType), so a dual-stack port is two ServicePorts with their own
// keys and groups, and adding a family leaves the other's ServicePort unchanged. An address of
// a family the Service does not have is reported and skipped. Services that are not served give
// no ports; the reason they are not is returned as a problem (an Event), except for the opt-out
// "false" and for Services that are simply not ours (no reason). Problems (bad addresses,
// missing ports) are returned as messages; the offending item is skipped and the rest
// converted. GroupIDs are left zero for the caller to assign.
func (s Selector) ServicePorts(svc *corev1.Service, eps []*discoveryv1.EndpointSlice) ([]flows.ServicePort, []string) {
	ok, _, reason := s.Select(svc)
	if !ok {
		// "false" is a clear opt-out: no Event (srcipctl status still says why).
		if reason != "" && svc.Annotations[AnnotationPreserveSourceIP] != "false" {
			return nil, []string{reason}
		}
		return nil, nil
	}
	if whole, _ := s.Declines(svc); whole != "" {
		return nil, nil // declined as a whole: Declines says why (a SourceIPDeclined Event)
	}
	topo := topology{node: s.Node, zone: s.Zone}
	var problems []string
	warn := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	fams := serviceFamilies(svc)
	// By family (flows.Family is the index): LoadBalancer ingress IPs and externalIPs.
	var lbIPs, extIPs [2][]netip.Addr
	add := func(field, s string, to *[2][]netip.Addr) {
		a, err := netip.ParseAddr(s)
		if err != nil {
			warn("%s %q skipped: %v", field, s, err)
			return
		}
		a = a.Unmap()
		f := flows.FamilyOf(a)
		if !fams.has(f) {
			warn("%s %q skipped: the Service has no %s family (%s)", field, s, f, familiesFrom(svc))
			return
		}
		to[f] = append(to[f], a)
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue // hostname-only ingress: nothing to match on
		}
		if proxiedIngress(ing) {
			warn("status.loadBalancer.ingress ip %q skipped: ipMode Proxy (the load balancer proxies to the nodes' nodePorts, so no packet reaches a node addressed to it; kube-proxy does not serve it either, KEP-1860)", ing.IP)
			continue
		}
		add("status.loadBalancer.ingress ip", ing.IP, &lbIPs)
	}
	for _, s := range svc.Spec.ExternalIPs {
		add("spec.externalIPs", s, &extIPs)
	}
	for f := range lbIPs {
		lbIPs[f], extIPs[f] = sortedUnique(lbIPs[f]), sortedUnique(extIPs[f])
	}
	filter, ranges, msgs := sourceRanges(svc, fams)
	problems = append(problems, msgs...)
	affinity := AffinitySeconds(svc)

	var out []flows.ServicePort
	for _, p := range svc.Spec.Ports {
		proto := flows.Protocol(p.Protocol)
		if proto == "" {
			proto = flows.TCP
		}
		if proto != flows.TCP && proto != flows.UDP {
			continue // SCTP: declined (Declines)
		}
		if p.Port <= 0 || p.Port > 65535 {
			warn("port %q: port %d out of range, skipped", p.Name, p.Port)
			continue
		}
		if p.NodePort < 0 || p.NodePort > 65535 {
			warn("port %q: nodePort %d out of range, skipped", p.Name, p.NodePort)
			continue
		}
		for _, f := range []flows.Family{flows.IPv4, flows.IPv6} {
			if !fams.has(f) {
				continue
			}
			sp := flows.ServicePort{
				Namespace: svc.Namespace, Name: svc.Name, PortName: p.Name,
				Protocol: proto, Family: f, Port: uint16(p.Port), NodePort: uint16(p.NodePort),
				LoadBalancerIPs: slices.Clone(lbIPs[f]), ExternalIPs: slices.Clone(extIPs[f]),
				FilterSources: filter, SourceRanges: slices.Clone(ranges[f]),
				AffinitySeconds: affinity,
				Rank:            flows.Rank{Created: svc.CreationTimestamp.Time},
			}
			var msgs []string
			sp.Endpoints, msgs = endpointsFor(p.Name, proto, f, eps, topo)
			problems = append(problems, msgs...)
			out = append(out, sp)
		}
	}
	return out, problems
}

// ServiceFamilies returns the IP families svc is served on, IPv4 before IPv6, and what they were
// read from (for messages): spec.ipFamilies when set (entries other than IPv4 and IPv6 are
// ignored), else the families of spec.clusterIPs (spec.clusterIP); a Service that shows neither
// (a manifest without them, a headless Service) is IPv4. The order of spec.ipFamilies (the
// primary family) does not matter: every family is served alike.
func ServiceFamilies(svc *corev1.Service) (fams []flows.Family, from string) {
	set := serviceFamilies(svc)
	for _, f := range []flows.Family{flows.IPv4, flows.IPv6} {
		if set.has(f) {
			fams = append(fams, f)
		}
	}
	return fams, familiesFrom(svc)
}

// famSet is a set of IP families (bit 1<<Family).
type famSet uint8

func (s famSet) has(f flows.Family) bool { return s&(1<<f) != 0 }

// serviceFamilies is ServiceFamilies as a set, without allocating (every Service of a full sync
// is converted).
func serviceFamilies(svc *corev1.Service) famSet {
	var set famSet
	if fs := svc.Spec.IPFamilies; len(fs) > 0 {
		for _, f := range fs {
			switch f {
			case corev1.IPv4Protocol:
				set |= 1 << flows.IPv4
			case corev1.IPv6Protocol:
				set |= 1 << flows.IPv6
			}
		}
	} else {
		ips := svc.Spec.ClusterIPs
		if len(ips) == 0 && svc.Spec.ClusterIP != "" {
			ips = []string{svc.Spec.ClusterIP}
		}
		for _, s := range ips {
			if a, err := netip.ParseAddr(s); err == nil {
				set |= 1 << flows.FamilyOf(a.Unmap())
			}
		}
	}
	if set == 0 {
		set = 1 << flows.IPv4
	}
	return set
}

// familiesFrom says what serviceFamilies read, for messages.
func familiesFrom(svc *corev1.Service) string {
	if fs := svc.Spec.IPFamilies; len(fs) > 0 {
		names := make([]string, 0, len(fs))
		for _, f := range fs {
			names = append(names, string(f))
		}
		return "spec.ipFamilies " + strings.Join(names, ",")
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if _, err := netip.ParseAddr(s); err == nil {
			return "spec.clusterIPs " + strings.Join(ips, ",")
		}
	}
	return "no spec.ipFamilies nor spec.clusterIPs: IPv4"
}

// AffinitySeconds returns the session affinity timeout of svc in seconds (flows.ServicePort
// AffinitySeconds): spec.sessionAffinityConfig.clientIP.timeoutSeconds when spec.sessionAffinity
// is ClientIP (corev1.DefaultClientIPServiceAffinitySeconds, 10800, when unset or not positive),
// 0 without affinity.
func AffinitySeconds(svc *corev1.Service) uint32 {
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		return 0
	}
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
		return uint32(*c.ClientIP.TimeoutSeconds)
	}
	return uint32(corev1.DefaultClientIPServiceAffinitySeconds)
}

// SourceRanges reads spec.loadBalancerSourceRanges (docs/field-cases.md#c32) for the families
// fams (ServiceFamilies). filter is true when the field has any entry: new connections to the
// Service's LoadBalancer IPs and externalIPs of a family are then let in only from that family's
// valid CIDRs, ranges[family] (sorted, masked, without duplicates). A malformed entry is
// reported and allows nobody: it never widens access, so a family of fams without a valid CIDR
// of its own lets nobody in to that family's LoadBalancer IPs and externalIPs (reported once per
// such family; unlike kube-proxy, which filters nothing on a family the list does not name).
// Surrounding spaces are trimmed. ranges is indexed by flows.Family.
func SourceRanges(svc *corev1.Service, fams []flows.Family) (filter bool, ranges [2][]netip.Prefix, problems []string) {
	var set famSet
	for _, f := range fams {
		set |= 1 << f
	}
	return sourceRanges(svc, set)
}

func sourceRanges(svc *corev1.Service, fams famSet) (filter bool, ranges [2][]netip.Prefix, problems []string) {
	if len(svc.Spec.LoadBalancerSourceRanges) == 0 {
		return false, ranges, nil
	}
	for _, s := range svc.Spec.LoadBalancerSourceRanges {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			problems = append(problems, fmt.Sprintf("spec.loadBalancerSourceRanges %q is not a CIDR: it lets nobody in (%v)", s, err))
			continue
		}
		p = unmapPrefix(p).Masked()
		f := flows.FamilyOf(p.Addr())
		ranges[f] = append(ranges[f], p)
	}
	for f := range ranges {
		slices.SortFunc(ranges[f], func(a, b netip.Prefix) int {
			if c := a.Addr().Compare(b.Addr()); c != 0 {
				return c
			}
			return cmp.Compare(a.Bits(), b.Bits())
		})
		ranges[f] = slices.Compact(ranges[f])
	}
	for _, f := range []flows.Family{flows.IPv4, flows.IPv6} {
		if !fams.has(f) || len(ranges[f]) > 0 {
			continue
		}
		if f == flows.IPv4 && fams == 1<<flows.IPv4 {
			// The message of an IPv4-only Service, as before families.
			problems = append(problems, "spec.loadBalancerSourceRanges has no valid IPv4 CIDR: new connections to the LoadBalancer IPs and externalIPs are refused from every client (NodePorts are not filtered)")
			continue
		}
		problems = append(problems, fmt.Sprintf("spec.loadBalancerSourceRanges has no valid %s CIDR: new connections to the %s LoadBalancer IPs and externalIPs are refused from every client (NodePorts are not filtered)", f, f))
	}
	for f := range ranges {
		if !fams.has(flows.Family(f)) {
			ranges[f] = nil // no ServicePort of that family
		}
	}
	return true, ranges, problems
}

// topology is where this node is, for the EndpointSlices' hints: its name (hints.forNodes) and
// its topology.kubernetes.io/zone label (hints.forZones).
type topology struct{ node, zone string }

// candidate is one endpoint of a Service port before the choice (endpointsFor).
type candidate struct {
	ep                 flows.Endpoint
	ready, terminating bool // terminating: serving and terminating, not ready
	forZones, forNodes []string
}

// candidatePool holds endpointsFor's scratch candidates (a full sync converts every Service
// port, on every core).
var candidatePool = sync.Pool{New: func() any { return new([]candidate) }}

// endpointsFor picks the endpoints of one Service port as kube-proxy does for
// externalTrafficPolicy Cluster (pkg/proxy/topology.go, CategorizeEndpoints): the ready ones
// (conditions.ready unset counts as ready) of the slices of family fam (addressType IPv4 or
// IPv6; FQDN slices are never used), narrowed by the hints; when none
// is ready, the serving terminating ones (KEP-1669), whatever their hints. The hints
// (EndpointSlice endpoints[].hints, written by the EndpointSlice controller for
// trafficDistribution PreferClose/PreferSameZone/PreferSameNode or the topology-mode
// annotation): when every ready endpoint has a node hint and one names this node, only those
// are used; otherwise, when every ready endpoint has a zone hint and one names this node's
// zone, only those; otherwise (an endpoint without a hint, no hint for this node's zone, or a
// node without the zone label) all ready endpoints. The port is matched by name and protocol.
// The hints and the fallback are applied per family (one call per family). The result is sorted
// and deduplicated.
func endpointsFor(portName string, proto flows.Protocol, fam flows.Family, eps []*discoveryv1.EndpointSlice, topo topology) ([]flows.Endpoint, []string) {
	pc := candidatePool.Get().(*[]candidate)
	cands := (*pc)[:0]
	defer func() {
		clear(cands) // no strings kept alive by the pool
		*pc = cands[:0]
		candidatePool.Put(pc)
	}()
	var problems []string
	for _, sl := range eps {
		if sl == nil || sl.AddressType != sliceAddressType[fam] {
			continue
		}
		var port uint16
		found := false
		for _, sp := range sl.Ports {
			name := ""
			if sp.Name != nil {
				name = *sp.Name
			}
			pr := flows.TCP
			if sp.Protocol != nil {
				pr = flows.Protocol(*sp.Protocol)
			}
			if name != portName || pr != proto {
				continue
			}
			if sp.Port == nil || *sp.Port <= 0 || *sp.Port > 65535 {
				problems = append(problems, fmt.Sprintf("EndpointSlice %s: port %q has no valid port number, skipped", sl.Name, portName))
				break
			}
			port, found = uint16(*sp.Port), true
			break
		}
		if !found {
			continue
		}
		cands = slices.Grow(cands, len(sl.Endpoints))
		for _, ep := range sl.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			a, err := parseFamily(ep.Addresses[0], fam)
			if err != nil {
				problems = append(problems, fmt.Sprintf("EndpointSlice %s: endpoint address %q skipped: %v", sl.Name, ep.Addresses[0], err))
				continue
			}
			c := candidate{ep: flows.Endpoint{IP: a, Port: port}}
			if ep.NodeName != nil {
				c.ep.NodeName = *ep.NodeName
			}
			cond := ep.Conditions
			c.ready = cond.Ready == nil || *cond.Ready
			serving := c.ready
			if cond.Serving != nil {
				serving = *cond.Serving
			}
			c.terminating = !c.ready && serving && cond.Terminating != nil && *cond.Terminating
			if h := ep.Hints; h != nil {
				for _, z := range h.ForZones {
					c.forZones = append(c.forZones, z.Name)
				}
				for _, n := range h.ForNodes {
					c.forNodes = append(c.forNodes, n.Name)
				}
			}
			cands = append(cands, c)
		}
	}
	use := topo.filter(cands)
	var terminating []flows.Endpoint
	// One allocation of the most it can hold (the Service ports keep it: a full sync holds
	// every one at once).
	ready := make([]flows.Endpoint, 0, len(cands))
	for _, c := range cands {
		switch {
		case c.ready && use(c):
			ready = append(ready, c.ep)
		case c.terminating:
			terminating = append(terminating, c.ep)
		}
	}
	if len(ready) == 0 {
		ready = terminating
	}
	return dedupeEndpoints(ready), problems
}

// sliceAddressType is the EndpointSlice addressType of each family.
var sliceAddressType = [2]discoveryv1.AddressType{flows.IPv4: discoveryv1.AddressTypeIPv4, flows.IPv6: discoveryv1.AddressTypeIPv6}

// filter returns which ready candidates the hints let this node use (endpointsFor's rule).
func (t topology) filter(cands []candidate) func(candidate) bool {
	anyReady, allNode, allZone, forNode, forZone := false, true, true, false, false
	for _, c := range cands {
		if !c.ready {
			continue
		}
		anyReady = true
		if len(c.forNodes) == 0 {
			allNode = false
		} else if t.node != "" && slices.Contains(c.forNodes, t.node) {
			forNode = true
		}
		if len(c.forZones) == 0 {
			allZone = false
		} else if t.zone != "" && slices.Contains(c.forZones, t.zone) {
			forZone = true
		}
	}
	switch {
	case !anyReady:
		return func(candidate) bool { return true }
	case allNode && forNode:
		return func(c candidate) bool { return slices.Contains(c.forNodes, t.node) }
	case allZone && forZone:
		return func(c candidate) bool { return slices.Contains(c.forZones, t.zone) }
	}
	return func(candidate) bool { return true }
}

func dedupeEndpoints(eps []flows.Endpoint) []flows.Endpoint {
	if len(eps) == 0 {
		return nil
	}
	slices.SortFunc(eps, func(a, b flows.Endpoint) int {
		if c := a.IP.Compare(b.IP); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Port, b.Port); c != 0 {
			return c
		}
		return cmp.Compare(a.NodeName, b.NodeName)
	})
	return slices.CompactFunc(eps, func(a, b flows.Endpoint) bool { return a.IP == b.IP && a.Port == b.Port })
}

// ConvertNode converts a Node: its underlay address (flows.Node.InternalIP, the outer address of
// the Geneve tunnels to it) is its first IPv4 InternalIP, else its first IPv6 one (an
// IPv6-only-underlay cluster); its first IPv6 InternalIP (Node.InternalIPv6: a host address, the
// source of its host's IPv6 connections from a socket bound to it); and its spec.podCIDRs of both
// families, masked, in their order (spec.podCIDR when podCIDRs is empty). A Node without an
// InternalIP is an error. Whether this node can tunnel to it (one underlay family at both ends)
// is the model's check (flows.State.TunnelRefusal). Its collision rank (flows.Rank)
// is its creationTimestamp, and one tier
// lower when it is not Ready (a stale Node object left after a re-install whose pod CIDR was
// given to another node loses to a Ready one). It is Down when its Ready condition is present
// and not True (False: the kubelet reports trouble; Unknown: the node stopped reporting).
func ConvertNode(n *corev1.Node) (flows.Node, error) {
	out := flows.Node{Name: n.Name, Rank: flows.Rank{Tier: 1, Created: n.CreationTimestamp.Time}}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			out.Rank.Tier = 0
		} else {
			out.Down = true
		}
	}
	var v6 netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		if ip = ip.Unmap(); ip.Is4() {
			if !out.InternalIP.IsValid() {
				out.InternalIP = ip
			}
			continue
		}
		if !out.InternalIPv6.IsValid() {
			out.InternalIPv6 = ip.WithZone("")
		}
		if !v6.IsValid() {
			v6 = ip.WithZone("")
		}
	}
	if !out.InternalIP.IsValid() {
		out.InternalIP = v6
	}
	if !out.InternalIP.IsValid() {
		return out, fmt.Errorf("node %s has no InternalIP (the Geneve underlay address), so the node is not programmed", n.Name)
	}
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return out, fmt.Errorf("node %s: podCIDR %q: %w", n.Name, c, err)
		}
		out.PodCIDRs = append(out.PodCIDRs, unmapPrefix(p).Masked())
	}
	return out, nil
}

// unmapPrefix returns an IPv4-mapped IPv6 prefix (::ffff:198.51.100.0/120) as the IPv4 prefix it
// maps (198.51.100.0/24), as Go's net package and kube-proxy read it; any other prefix as it is.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.Addr().Is4In6() || p.Bits() < 96 {
		return p
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
}

// NodePortAddresses returns the addresses of n on which NodePorts are served: its InternalIP
// and ExternalIP addresses of both families, restricted per family to the prefixes of allowed
// (the --nodeport-addresses flag) of that family when allowed has any (kube-proxy's rule: a
// family without a prefix in the flag keeps all its addresses). The result is sorted (IPv4
// first) and deduplicated.
func NodePortAddresses(n *corev1.Node, allowed []netip.Prefix) []netip.Addr {
	if n == nil {
		return nil
	}
	var restricted [2]bool
	for _, p := range allowed {
		restricted[flows.FamilyOf(p.Addr())] = true
	}
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		if restricted[flows.FamilyOf(ip)] && !slices.ContainsFunc(allowed, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			continue
		}
		out = append(out, ip)
	}
	return sortedUnique(out)
}

// LocalPod joins an OVSDB pod port with its Pod object (nil when unknown). The port's own IPs
// (both families) win; otherwise the Pod's status.podIPs (both families) are used. Which of them
// lie in this node's pod CIDRs of their family is BuildPod's check. ok is false when the pod has no usable IP yet.
// Its collision rank (flows.Rank): tier 0 when the Pod's status lists every IP of the port, 1 when
// the Pod exists but does not confirm them (yet: srcip-cni's ADD waits for the flows, the kubelet
// writes status.podIPs after it), 2 without a Pod object; Created is the Pod's creationTimestamp.
// The model programs no port without a Pod object (a stale port of a crashed CNI, a hostile
// OVSDB writer).
func LocalPod(pp PodPort, pod *corev1.Pod) (p flows.Pod, ok bool, problems []string) {
	p = flows.Pod{Namespace: pp.Namespace, Name: pp.Name, MAC: pp.MAC, OFPort: pp.OFPort, Chained: pp.Chained}
	defer func() {
		switch {
		case pod == nil:
			p.Rank = flows.Rank{Tier: 2}
		case podConfirms(pod, p):
			p.Rank = flows.Rank{Tier: 0, Created: pod.CreationTimestamp.Time}
		default:
			p.Rank = flows.Rank{Tier: 1, Created: pod.CreationTimestamp.Time}
		}
	}()
	for _, a := range pp.IPs {
		if a = a.Unmap(); a.IsValid() {
			p.IPs = append(p.IPs, a)
		}
	}
	if len(p.IPs) == 0 && pod != nil {
		ips := pod.Status.PodIPs
		if len(ips) == 0 && pod.Status.PodIP != "" {
			ips = []corev1.PodIP{{IP: pod.Status.PodIP}}
		}
		for _, s := range ips {
			a, err := netip.ParseAddr(s.IP)
			if err != nil {
				problems = append(problems, fmt.Sprintf("status.podIPs %q skipped: %v", s.IP, err))
				continue
			}
			p.IPs = append(p.IPs, a.Unmap())
		}
	}
	p.IPs = sortedUnique(p.IPs)
	return p, len(p.IPs) > 0 && p.OFPort > 0, problems
}

// ChoosePodPort picks the OVSDB port of a pod among the ports that carry its namespace and name
// (a pod recreated under the same name while its predecessor's port lingers, e.g. a late CNI DEL:
// docs/field-cases.md#c36). A port whose UID is set and differs from the Pod object's belongs to a
// predecessor and is never chosen; among the others a port with the Pod's UID wins over one
// without, then the highest ofport (the newest port). pod may be nil (unknown: UIDs cannot be
// compared). ok is false when no port qualifies; ignored describes each port left out when there
// were several.
func ChoosePodPort(ports []PodPort, pod *corev1.Pod) (pp PodPort, ok bool, ignored []string) {
	uid := ""
	if pod != nil {
		uid = string(pod.UID)
	}
	best := -1
	matches := func(p PodPort) bool { return uid != "" && p.UID == uid }
	for i, p := range ports {
		if uid != "" && p.UID != "" && p.UID != uid {
			ignored = append(ignored, fmt.Sprintf("port %s (ofport %d) belongs to a previous pod (UID %s, the Pod's is %s): ignored", p.Interface, p.OFPort, p.UID, uid))
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := ports[best]
		loser := p
		if (matches(p) && !matches(b)) || (matches(p) == matches(b) && p.OFPort > b.OFPort) {
			loser, best = b, i
		}
		ignored = append(ignored, fmt.Sprintf("port %s (ofport %d) also claims the pod: ignored for port %s", loser.Interface, loser.OFPort, ports[best].Interface))
	}
	if best < 0 {
		return PodPort{}, false, ignored
	}
	return ports[best], true, ignored
}

// podConfirms reports whether the Pod's status lists every IP of the pod port.
func podConfirms(pod *corev1.Pod, p flows.Pod) bool {
	ips := pod.Status.PodIPs
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: pod.Status.PodIP}}
	}
	for _, a := range p.IPs {
		if !slices.ContainsFunc(ips, func(x corev1.PodIP) bool {
			b, err := netip.ParseAddr(x.IP)
			return err == nil && b.Unmap() == a
		}) {
			return false
		}
	}
	return len(p.IPs) > 0
}

// parseFamily parses an address of family fam (an IPv4-mapped IPv6 address is its IPv4
// address).
func parseFamily(s string, fam flows.Family) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	a = a.Unmap()
	if !fam.Has(a) {
		return netip.Addr{}, fmt.Errorf("not an %s address", fam)
	}
	return a, nil
}

func sortedUnique(as []netip.Addr) []netip.Addr {
	if len(as) == 0 {
		return nil
	}
	slices.SortFunc(as, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(as)
}

// ParseCIDRs parses CIDR flag values (--nodeport-addresses, --external-ip-cidrs): blanks are
// skipped, every prefix is masked.
func ParseCIDRs(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// proxiedIngress reports whether a LoadBalancer ingress has ipMode Proxy (KEP-1860,
// corev1.LoadBalancerIPModeProxy): the load balancer terminates or proxies the connection and
// sends it to the nodes (their nodePorts or the pods), never addressed to the ingress IP. kube-proxy
// does not bind such an IP on the nodes, and ovs-srcip makes no entry point of it: its
// traffic is the load balancer's, with the load balancer's source, arriving at the nodePort.
// ipMode VIP or unset (the default) is an entry point.
func proxiedIngress(ing corev1.LoadBalancerIngress) bool {
	return ing.IPMode != nil && *ing.IPMode == corev1.LoadBalancerIPModeProxy
}
