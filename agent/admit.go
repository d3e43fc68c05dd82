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
//   - an externalIP may not be a LoadBalancer ingress IP of another Service (opted in or not);
//   - an externalIP must lie inside the operator's allow-list (--external-ip-cidrs; empty: no
//     externalIP is served, as Kubernetes' DenyServiceExternalIPs advice recommends);
//   - a NodePort must lie in the cluster's NodePort range (--service-node-port-range, the
//     API server's flag of that name; default 30000-32767): the API server enforces it, but a
//     manifests directory does not, and a NodePort of 22 would capture the nodes' SSH.
//
// Refused addresses are left out of the Service's entry points (its other entry points are
// served) and reported with a ReasonRefused Event. It is owned by the model.
type admission struct {
	externalCIDRs []netip.Prefix
	nodePortRange [2]uint16             // inclusive; zero: DefaultNodePortRange
	nodeAddrs     map[netip.Addr]string // every address of every Node -> the Node's name
	lbOf          map[types.NamespacedName][]netip.Addr
	lbOwners      map[netip.Addr]map[types.NamespacedName]bool
	extUsers      map[types.NamespacedName]bool // Services with spec.externalIPs
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
		lbOf: map[types.NamespacedName][]netip.Addr{}, lbOwners: map[netip.Addr]map[types.NamespacedName]bool{},
		extUsers: map[types.NamespacedName]bool{}}
}

// setNodes recomputes the node addresses from the Node cache and reports whether they changed.
func (a *admission) setNodes(nodes map[string]*corev1.Node) bool {
	next := map[netip.Addr]string{}
	for name, n := range nodes {
		for _, ad := range n.Status.Addresses {
			if ad.Type != corev1.NodeInternalIP && ad.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(ad.Address); err == nil {
				next[ip.Unmap()] = name
			}
		}
	}
	if maps.Equal(next, a.nodeAddrs) {
		return false
	}
	a.nodeAddrs = next
	return true
}

// setService records the LoadBalancer ingress IPs and the use of externalIPs of Service name (nil:
// deleted) and reports whether its LoadBalancer IPs changed.
func (a *admission) setService(name types.NamespacedName, svc *corev1.Service) bool {
	var lbs []netip.Addr
	if svc != nil {
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ip, err := netip.ParseAddr(ing.IP); err == nil {
				lbs = append(lbs, ip.Unmap())
			}
		}
	}
	if svc != nil && len(svc.Spec.ExternalIPs) > 0 {
		a.extUsers[name] = true
	} else {
		delete(a.extUsers, name)
	}
	slices.SortFunc(lbs, func(x, y netip.Addr) int { return x.Compare(y) })
	lbs = slices.Compact(lbs)
	old := a.lbOf[name]
	if slices.Equal(old, lbs) {
		return false
	}
	for _, ip := range old {
		delete(a.lbOwners[ip], name)
		if len(a.lbOwners[ip]) == 0 {
			delete(a.lbOwners, ip)
		}
	}
	if len(lbs) == 0 {
		delete(a.lbOf, name)
	} else {
		a.lbOf[name] = lbs
	}
	for _, ip := range lbs {
		if a.lbOwners[ip] == nil {
			a.lbOwners[ip] = map[types.NamespacedName]bool{}
		}
		a.lbOwners[ip][name] = true
	}
	return true
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
		if n, ok := a.nodeAddrs[ip]; ok {
			return refuse(ip, "loadBalancer ingress IP %s is an address of Node %s: refused (only NodePorts are served on node addresses)", ip, n)
		}
		return false
	}
	refusedExt := func(ip netip.Addr) bool {
		if n, ok := a.nodeAddrs[ip]; ok {
			return refuse(ip, "externalIP %s is an address of Node %s: refused (only NodePorts are served on node addresses)", ip, n)
		}
		for o := range a.lbOwners[ip] {
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

// RefusedEntry is an entry point a Service asks for that the agent refuses (docs/security.md),
// with the reason (the SourceIPRefused Event's message).
type RefusedEntry struct {
	Entry  flows.EntryPoint
	Reason string
}
