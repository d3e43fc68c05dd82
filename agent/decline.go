package agent

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// What a served Service asks for that this node's pipeline cannot serve is declined, never
// dropped in silence: a SourceIPDeclined Event and a note in srcipctl status (ServiceReport.
// Declined), and the entry points stay the host's (kube-proxy serves them, with SNAT).

// DeclinedPort is a Service port the agent leaves to the host, with the reason.
type DeclinedPort struct {
	// Port is "name port/PROTO" ("" name: the port's number only).
	Port   string
	Reason string
}

// Declines says what of a served Service (Select) the agent declines: the whole Service
// (service; nothing declines a whole Service now that both IP families are converted, each to
// ServicePorts of its own: ServiceFamilies) or some of its ports (ports: SCTP ports, which the
// pipeline does not serve; s.SCTP says why for this node's datapath). A Service not served
// gives nothing.
func (s Selector) Declines(svc *corev1.Service) (service string, ports []DeclinedPort) {
	if ok, _, _ := s.Select(svc); !ok {
		return "", nil
	}
	why := s.SCTP
	if why == "" {
		why = "the pipeline does not serve SCTP"
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol != corev1.ProtocolSCTP {
			continue
		}
		name := fmt.Sprintf("%d/SCTP", p.Port)
		if p.Name != "" {
			name = p.Name + " " + name
		}
		ports = append(ports, DeclinedPort{Port: name, Reason: fmt.Sprintf("port %s declined: %s; this node programs no entry point for it and the host (kube-proxy) serves it, with SNAT (the client IP is not kept)", name, why)})
	}
	return "", ports
}

// SCTPSupport says whether a datapath can conntrack and NAT SCTP with its ports, from br-ex's
// datapath_type and ovs-vswitchd's version ("3.1.0"; "" unknown), and returns the reason the
// agent declines SCTP Service ports on it (Selector.SCTP). The userspace datapath ("netdev")
// tracks SCTP by ports only from Open vSwitch 3.2 (before, SCTP has no port tracking in its
// conntrack, so a DNAT by port cannot be kept per association); the kernel datapath ("system"
// or "") can. The pipeline itself serves no SCTP port yet, so every SCTP port is declined; the
// reason names what the datapath could do.
func SCTPSupport(datapathType, version string) (capable bool, why string) {
	if m := ovsVersionRE.FindString(version); m != "" {
		version = m // "ovs-vswitchd (Open vSwitch) 3.1.0" -> "3.1.0"
	}
	switch datapathType {
	case "", "system":
		return true, fmt.Sprintf("the pipeline does not serve SCTP yet (this node's kernel datapath, Open vSwitch %s, could conntrack and NAT it)", orUnknown(version))
	case "netdev":
		maj, mnr, ok := parseOVSVersion(version)
		if ok && (maj > 3 || (maj == 3 && mnr >= 2)) {
			return true, fmt.Sprintf("the pipeline does not serve SCTP yet (this node's userspace datapath, Open vSwitch %s, could conntrack and NAT it)", version)
		}
		if !ok {
			return false, fmt.Sprintf("this node's userspace datapath (Open vSwitch %s) may not track SCTP ports (userspace conntrack tracks them from 3.2)", orUnknown(version))
		}
		return false, fmt.Sprintf("this node's userspace datapath (Open vSwitch %s) tracks SCTP without ports before 3.2, so it cannot NAT an SCTP association to an endpoint", version)
	}
	return false, fmt.Sprintf("this node's datapath (datapath_type %q, Open vSwitch %s) cannot conntrack SCTP", datapathType, orUnknown(version))
}

var ovsVersionRE = regexp.MustCompile(`(\d+)\.(\d+)(\.\d+)?`)

// parseOVSVersion reads major.minor from an Open vSwitch version ("3.1.0", "3.2.1-1",
// "ovs-vswitchd (Open vSwitch) 3.1.0").
func parseOVSVersion(v string) (major, minor int, ok bool) {
	m := ovsVersionRE.FindStringSubmatch(v)
	if m == nil {
		return 0, 0, false
	}
	major, _ = strconv.Atoi(m[1])
	minor, _ = strconv.Atoi(m[2])
	return major, minor, true
}

func orUnknown(s string) string {
	if s == "" {
		return "version unknown"
	}
	return s
}

// endpointNodes checks the nodeName of every endpoint of sps against the Node whose pod CIDR
// holds its address (ownerOf): routing always follows the pod CIDR (br-int's routes), so a
// disagreeing nodeName is reported and replaced by the owner, which srcipctl then shows.
func endpointNodes(sps []flows.ServicePort, ownerOf func(netip.Addr) string) []string {
	var warnings []string
	said := map[netip.AddrPort]bool{}
	for i := range sps {
		for j := range sps[i].Endpoints {
			e := &sps[i].Endpoints[j]
			owner := ownerOf(e.IP)
			if owner == "" || owner == e.NodeName {
				continue
			}
			ap := netip.AddrPortFrom(e.IP, e.Port)
			if e.NodeName != "" && !said[ap] {
				said[ap] = true
				warnings = append(warnings, fmt.Sprintf("endpoint %s says nodeName %s, but its address is inside the pod CIDR of Node %s: it is routed to %s (by pod CIDR); check the EndpointSlice", ap, e.NodeName, owner, owner))
			}
			e.NodeName = owner
		}
	}
	return warnings
}
