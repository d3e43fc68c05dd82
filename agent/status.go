package agent

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/version"
)

// Report is what one agent knows of its node, for srcipctl (status, get services, names in
// cookie/flows/trace). The agent serves it as JSON at /status of its HTTP server and of its
// status socket. Times are RFC 3339 in JSON; addresses are strings.
type Report struct {
	// Node is the agent's node.
	Node string `json:"node"`
	// Version is the agent's release (package version: v0.1.0, "devel" when not stamped); empty
	// from an agent older than this field.
	Version string `json:"version,omitempty"`
	// Time is when the report was made.
	Time time.Time `json:"time"`
	// FullSyncDone: the first full sync succeeded.
	FullSyncDone bool `json:"fullSyncDone"`
	// LastSync is the time of the last successful sync; LastFullSync of the last successful full
	// sync (zero: none yet).
	LastSync     time.Time `json:"lastSync"`
	LastFullSync time.Time `json:"lastFullSync"`
	// FailingSince is the first failure after the last success (zero: not failing); LastError the
	// last sync error; DataplaneError the last OVSDB read error.
	FailingSince   time.Time `json:"failingSince"`
	LastError      string    `json:"lastError,omitempty"`
	DataplaneError string    `json:"dataplaneError,omitempty"`
	// Nodes are the cluster's nodes as the agent uses them (Node objects it could convert).
	Nodes []NodeReport `json:"nodes"`
	// Pods are the pods the agent programs on this node's br-int.
	Pods []PodReport `json:"pods"`
	// PreserveSourceIP is the agent's --preserve-source-ip mode (annotated or all).
	PreserveSourceIP string `json:"preserveSourceIP"`
	// SCTP says why this node declines SCTP Service ports (the datapath detected at start:
	// SCTPSupport); empty when unknown.
	SCTP string `json:"sctp,omitempty"`
	// Services are the Services that carry the annotation (any value), opted in or not, and,
	// under --preserve-source-ip=all, every Service served without it (Via "all mode").
	Services []ServiceReport `json:"services"`
	// FlowSets are the flow sets applied now, by bridge and key.
	FlowSets []FlowSetReport `json:"flowSets"`
	// Drains are the draining entry points (ip:port/PROTO).
	Drains []string `json:"drains,omitempty"`
	// Zones are the conntrack zones with their entries and limits at the last full sync.
	Zones []ZoneReport `json:"zones"`
	// Ports are the node's OpenFlow ports and MACs as read from OVSDB (srcipctl trace builds
	// its packets with them).
	Ports PortsReport `json:"ports"`
	// Egress are the EgressGateways as the last sync converted them, oldest first.
	Egress []EgressReport `json:"egress"`
	// Flags are the agent's flags that decide which flows it writes (srcipctl diff renders the
	// desired flows with them); nil from an agent older than this field.
	Flags *FlagsReport `json:"flags,omitempty"`
}

// FlagsReport are the srcip-agent flags that change the flows it writes, as it runs with them
// (CIDRs masked, the port range FIRST-LAST).
type FlagsReport struct {
	// Manifests is --manifests ("" : the agent reads the Kubernetes API).
	Manifests string `json:"manifests,omitempty"`
	// NodePortAddresses, ExternalIPCIDRs and EgressClusterCIDRs are --nodeport-addresses,
	// --external-ip-cidrs and --egress-cluster-cidrs (empty: not set).
	NodePortAddresses  []string `json:"nodePortAddresses"`
	ExternalIPCIDRs    []string `json:"externalIPCIDRs"`
	EgressClusterCIDRs []string `json:"egressClusterCIDRs"`
	// NonMasqueradeCIDRs are the routed pods' CIDRs, link-local added unless
	// --masquerade-link-local (empty: routed pods off).
	NonMasqueradeCIDRs []string `json:"nonMasqueradeCIDRs,omitempty"`
	// PreserveSourceIP is --preserve-source-ip (annotated or all).
	PreserveSourceIP string `json:"preserveSourceIP"`
	// ServiceNodePortRange is --service-node-port-range, FIRST-LAST.
	ServiceNodePortRange string `json:"serviceNodePortRange"`
}

// EgressReport is one EgressGateway as this node's agent sees it (srcipctl get egress).
type EgressReport struct {
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	// Invalid says why the spec cannot be used ("" : valid).
	Invalid string `json:"invalid,omitempty"`
	// Gateway: this node is the active gateway of at least one of the policy's egress IPs.
	Gateway bool `json:"gateway"`
	// IPs are the policy's egress IPs with their active gateways.
	IPs []EgressIPReport `json:"ips"`
	// Pods are this node's pods the policy selects, with the egress IP each one uses.
	Pods []EgressPodReport `json:"pods"`
	// FlowSets are the applied flow sets of the policy on this node: egress and egress-announce
	// of its IPs, and the pod flow sets of its selected pods (which hold their egress flows).
	FlowSets []FlowSetReport `json:"flowSets"`
	// Conditions are Ready and Conflict as this agent computes them (agent.PolicyStatus).
	Conditions []metav1.Condition `json:"conditions"`
}

// EgressIPReport is one egress IP of a policy.
type EgressIPReport struct {
	IP string `json:"ip"`
	// Gateway is the active gateway node ("" : none, the selected pods' traffic is dropped).
	Gateway string `json:"gateway,omitempty"`
	// Eligible are the Ready nodes matching gatewayNodeSelector; ThisNode is the role of this
	// node for the IP: "gateway", "eligible" (a candidate, not active) or "none".
	Eligible []string `json:"eligible"`
	ThisNode string   `json:"thisNode"`
	// Refused is the Conflict reason when the IP is not programmed, Message its detail.
	Refused string `json:"refused,omitempty"`
	Message string `json:"message,omitempty"`
}

// EgressPodReport is one local pod selected by a policy.
type EgressPodReport struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	IPs       []string `json:"ips"`
	// EgressIP is the egress IP of the pod's IPv4 traffic under this policy ("" when another
	// policy, or none, governs it); EgressIPv6 that of its IPv6 traffic.
	EgressIP   string `json:"egressIP"`
	EgressIPv6 string `json:"egressIPv6,omitempty"`
}

// PortsReport is flows.Ports for JSON: ofports and MACs ("" when unknown).
type PortsReport struct {
	ExUplink      int    `json:"exUplink"`
	ExPatch       int    `json:"exPatch"`
	IntPatch      int    `json:"intPatch"`
	IntTunnel     int    `json:"intTunnel"`
	IntGateway    int    `json:"intGateway,omitempty"`
	ExMAC         string `json:"exMAC"`
	GatewayMAC    string `json:"gatewayMAC,omitempty"`
	TunnelUDPPort int    `json:"tunnelUDPPort"`
	// Secondary are br-ex's secondary uplinks (flows.Ports.Secondary; docs/egress.md
	// "Secondary NICs").
	Secondary []SecondaryUplinkReport `json:"secondary,omitempty"`
}

// SecondaryUplinkReport is flows.SecondaryUplink for JSON.
type SecondaryUplinkReport struct {
	Name    string   `json:"name"`
	OFPort  int      `json:"ofport"`
	Subnets []string `json:"subnets"`
}

// NodeReport is one Node as the agent uses it.
type NodeReport struct {
	Name       string   `json:"name"`
	InternalIP string   `json:"internalIP"`
	PodCIDRs   []string `json:"podCIDRs"`
	Down       bool     `json:"down,omitempty"`
}

// PodReport is one local pod the agent programs.
type PodReport struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	IPs       []string `json:"ips"`
	MAC       string   `json:"mac"`
	OFPort    int      `json:"ofport"`
}

// ServiceReport is one annotated Service, or one served under --preserve-source-ip=all.
type ServiceReport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Annotation is the value of ovs-srcip.io/preserve-source-ip ("" also when it is not set:
	// see Annotated).
	Annotation string `json:"annotation"`
	// Annotated: the annotation is set (any value, "" included).
	Annotated bool `json:"annotated"`
	// OptedIn: the Service is served (Selector.Select); Via says how (ViaAnnotation, ViaAll);
	// Reason says why not otherwise.
	OptedIn bool   `json:"optedIn"`
	Via     string `json:"via,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Type and ExternalTrafficPolicy are the Service's.
	Type                  string `json:"type"`
	ExternalTrafficPolicy string `json:"externalTrafficPolicy"`
	// Requested are the entry points the Service asks for ("nodePort N/PROTO", ip:port/PROTO of
	// its LoadBalancer ingress IPs and externalIPs), opted in or not.
	Requested []string `json:"requested,omitempty"`
	// Refused are the entry points the agent refuses, with the reason.
	Refused []RefusedReport `json:"refused,omitempty"`
	// Problems are conversion problems (bad addresses, missing ports); Conflicts the entry points
	// another Service owns.
	Problems  []string `json:"problems,omitempty"`
	Conflicts []string `json:"conflicts,omitempty"`
	// Declined says what of the Service the agent leaves to the host, each with the reason (the
	// SourceIPDeclined Events): its SCTP ports.
	Declined []string `json:"declined,omitempty"`
	// Warnings are the endpoints whose nodeName disagrees with the Node owning their pod CIDR.
	Warnings []string `json:"warnings,omitempty"`
	// Ports are the Service's programmed ports.
	Ports []ServicePortReport `json:"ports,omitempty"`
}

// RefusedReport is one refused entry point (ip:port/PROTO or "nodePort N/PROTO").
type RefusedReport struct {
	Entry  string `json:"entry"`
	Reason string `json:"reason"`
}

// ServicePortReport is one port of an opted-in Service as this node programs it.
type ServicePortReport struct {
	// Key is the flow set's key (service-port/ns/name:port/PROTO, then /IPv6 for the IPv6
	// family).
	Key      string `json:"key"`
	PortName string `json:"portName"`
	Protocol string `json:"protocol"`
	// Family is the IP family of the port's flow set, "IPv4" or "IPv6" (flows.Family): a
	// dual-stack Service port has one of each.
	Family   string `json:"family"`
	Port     int    `json:"port"`
	NodePort int    `json:"nodePort,omitempty"`
	// EntryPoints are the entry points programmed on this node (ip:port/PROTO).
	EntryPoints []string `json:"entryPoints"`
	// Group is the select group id; Cookie the flow set's cookie applied now ("" : not
	// applied); Flows its flow count; Buckets the buckets of its group.
	Group   uint32 `json:"group"`
	Cookie  string `json:"cookie,omitempty"`
	Flows   int    `json:"flows"`
	Buckets int    `json:"buckets"`
	// Declined says why the port is left to the host (C34); Warnings are the flow set's.
	Declined string   `json:"declined,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Rejected: Open vSwitch rejected the flow set's current version.
	Rejected bool `json:"rejected,omitempty"`
	// Endpoints are the endpoints of the group, with their bucket ids.
	Endpoints []EndpointReport `json:"endpoints"`
}

// EndpointReport is one endpoint of a Service port.
type EndpointReport struct {
	// Addr is ip:port.
	Addr string `json:"addr"`
	// Bucket is its bucket id in the select group (flows.BucketIDs).
	Bucket uint32 `json:"bucket"`
	// Pod is namespace/name of the EndpointSlice's targetRef (empty: none); Node its nodeName.
	Pod  string `json:"pod,omitempty"`
	Node string `json:"node,omitempty"`
}

// FlowSetReport is one applied flow set.
type FlowSetReport struct {
	Bridge string `json:"bridge"`
	Kind   string `json:"kind"`
	// Key is flows.Key.String(); Object names the object (ns/name[ port/PROTO], a node's name,
	// an entry point), empty for the base pipelines.
	Key    string   `json:"key"`
	Object string   `json:"object,omitempty"`
	Cookie string   `json:"cookie"`
	Flows  int      `json:"flows"`
	Groups []uint32 `json:"groups,omitempty"`
}

// ZoneReport is one conntrack zone of the pipeline.
type ZoneReport struct {
	Name    string `json:"name"`
	Zone    uint16 `json:"zone"`
	Entries int    `json:"entries"`
	Limit   int    `json:"limit"`
}

// ObjectName renders the object a flow-set key serves, for people: "demo/web http/TCP" for a
// Service port ("demo/web http/TCP/IPv6" for its IPv6 flow set), "demo/echo-a" for a pod, "node2" for a node, the entry point of a drain, the
// address of udp-fragments; "" for the base pipelines.
func ObjectName(k flows.Key) string {
	switch k.Kind {
	case flows.KindServicePort:
		if k.Family == flows.IPv6 {
			return k.Namespace + "/" + k.Name + " " + k.Port + "/" + string(k.Protocol) + "/IPv6"
		}
		return k.Namespace + "/" + k.Name + " " + k.Port + "/" + string(k.Protocol)
	case flows.KindServiceDrain:
		return k.Name + "/" + string(k.Protocol)
	}
	if k.Namespace != "" {
		return k.Namespace + "/" + k.Name
	}
	return k.Name
}

// Report returns the agent's report of its node. It waits for a sync in progress.
func (r *Reconciler) Report() Report {
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	st := r.Status()
	rep := Report{Node: r.cfg.NodeName, Version: version.String(), Time: time.Now(), FullSyncDone: st.FullSyncDone,
		LastSync: st.LastSuccess, LastFullSync: st.LastFullSuccess, FailingSince: st.FailingSince,
		Nodes: []NodeReport{}, Pods: []PodReport{}, Services: []ServiceReport{}, FlowSets: []FlowSetReport{}, Zones: []ZoneReport{}}
	if st.LastError != nil {
		rep.LastError = st.LastError.Error()
	}
	if st.DataplaneError != nil {
		rep.DataplaneError = st.DataplaneError.Error()
	}
	m, s := r.model, r.syncer
	p := m.st.Ports
	rep.Ports = PortsReport{ExUplink: p.ExUplink, ExPatch: p.ExPatch, IntPatch: p.IntPatch, IntTunnel: p.IntTunnel,
		IntGateway: p.IntGateway, TunnelUDPPort: p.TunnelUDPPort}
	if rep.Ports.TunnelUDPPort == 0 {
		rep.Ports.TunnelUDPPort = flows.DefaultTunnelUDPPort
	}
	if len(p.ExMAC) == 6 {
		rep.Ports.ExMAC = p.ExMAC.String()
	}
	if len(p.GatewayMAC) == 6 {
		rep.Ports.GatewayMAC = p.GatewayMAC.String()
	}
	for _, u := range p.Secondary {
		sr := SecondaryUplinkReport{Name: u.Name, OFPort: u.OFPort}
		for _, n := range u.Subnets {
			sr.Subnets = append(sr.Subnets, n.String())
		}
		rep.Ports.Secondary = append(rep.Ports.Secondary, sr)
	}
	for _, n := range m.st.Nodes {
		nr := NodeReport{Name: n.Name, InternalIP: addrString(n.InternalIP), Down: n.Down}
		for _, c := range n.PodCIDRs {
			nr.PodCIDRs = append(nr.PodCIDRs, c.String())
		}
		rep.Nodes = append(rep.Nodes, nr)
	}
	slices.SortFunc(rep.Nodes, func(a, b NodeReport) int { return cmp.Compare(a.Name, b.Name) })
	for _, p := range m.st.Pods {
		pr := PodReport{Namespace: p.Namespace, Name: p.Name, MAC: p.MAC.String(), OFPort: p.OFPort}
		for _, ip := range p.IPs {
			pr.IPs = append(pr.IPs, ip.String())
		}
		rep.Pods = append(rep.Pods, pr)
	}
	slices.SortFunc(rep.Pods, func(a, b PodReport) int { return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })

	for _, b := range applyOrder {
		for k, a := range s.applied[b] {
			rep.FlowSets = append(rep.FlowSets, FlowSetReport{Bridge: b.String(), Kind: k.Kind.String(), Key: k.String(),
				Object: ObjectName(k), Cookie: a.Cookie.String(), Flows: s.appliedSize[b][k], Groups: a.Groups})
		}
	}
	slices.SortFunc(rep.FlowSets, func(a, b FlowSetReport) int {
		return cmp.Or(cmp.Compare(a.Bridge, b.Bridge), cmp.Compare(a.Key, b.Key))
	})
	for e := range s.drains {
		rep.Drains = append(rep.Drains, e.String())
	}
	slices.Sort(rep.Drains)
	for _, z := range flows.Zones() {
		if zl, ok := s.zones[z.Zone]; ok {
			rep.Zones = append(rep.Zones, ZoneReport{Name: z.Name, Zone: z.Zone, Entries: zl.Count, Limit: zl.Limit})
		}
	}

	rep.Egress = r.egressReports(rep.Time)
	rep.SCTP = m.sel.SCTP
	rep.PreserveSourceIP = string(m.sel.Mode)
	if rep.PreserveSourceIP == "" {
		rep.PreserveSourceIP = string(PreserveAnnotated)
	}
	rep.Flags = r.flagsReport(rep.PreserveSourceIP)
	for name, svc := range m.services {
		_, set := svc.Annotations[AnnotationPreserveSourceIP]
		if !set && (m.sel.Mode != PreserveAll || !Eligible(svc, m.sel.ExternalIPCIDRs)) {
			continue // not ours: kube-proxy's
		}
		rep.Services = append(rep.Services, r.serviceReport(name, svc))
	}
	slices.SortFunc(rep.Services, func(a, b ServiceReport) int {
		return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return rep
}

// flagsReport renders the flags of r's configuration that change the flows it writes.
func (r *Reconciler) flagsReport(mode string) *FlagsReport {
	npr := r.cfg.NodePortRange
	if npr == [2]uint16{} {
		npr = DefaultNodePortRange
	}
	rep := &FlagsReport{Manifests: r.cfg.Manifests, NodePortAddresses: prefixStrings(r.cfg.NodePortCIDRs),
		ExternalIPCIDRs: prefixStrings(r.cfg.ExternalIPCIDRs), EgressClusterCIDRs: prefixStrings(r.cfg.EgressClusterCIDRs),
		PreserveSourceIP: mode, ServiceNodePortRange: FormatPortRange(npr)}
	if len(r.cfg.NonMasqueradeCIDRs) > 0 {
		rep.NonMasqueradeCIDRs = prefixStrings(r.cfg.NonMasqueradeCIDRs)
	}
	return rep
}

func prefixStrings(ps []netip.Prefix) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func (r *Reconciler) serviceReport(name types.NamespacedName, svc *corev1.Service) ServiceReport {
	m, s := r.model, r.syncer
	ok, via, why := m.sel.Select(svc)
	annotation, annotated := svc.Annotations[AnnotationPreserveSourceIP]
	sr := ServiceReport{Namespace: name.Namespace, Name: name.Name, Annotation: annotation, Annotated: annotated,
		OptedIn: ok, Via: via, Reason: why, Type: string(svc.Spec.Type), ExternalTrafficPolicy: string(svc.Spec.ExternalTrafficPolicy),
		Problems: m.svcProblems[name], Conflicts: m.conflicts[name], Declined: m.declines[name], Warnings: m.svcWarnings[name]}
	if ok {
		// Select's reason is in Problems too (it is the conversion's problem when not opted in).
		sr.Problems = slices.DeleteFunc(slices.Clone(sr.Problems), func(p string) bool { return p == why })
	} else {
		sr.Problems = nil
	}
	for _, p := range svc.Spec.Ports {
		proto := string(p.Protocol)
		if proto == "" {
			proto = "TCP"
		}
		if p.NodePort != 0 {
			sr.Requested = append(sr.Requested, fmt.Sprintf("nodePort %d/%s", p.NodePort, proto))
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" && !proxiedIngress(ing) {
				sr.Requested = append(sr.Requested, requestedEntry(ing.IP, p.Port, proto))
			}
		}
		for _, ip := range svc.Spec.ExternalIPs {
			sr.Requested = append(sr.Requested, requestedEntry(ip, p.Port, proto))
		}
	}
	for _, re := range m.refused[name] {
		sr.Refused = append(sr.Refused, RefusedReport{Entry: re.Entry.String(), Reason: re.Reason})
	}
	// Pods behind endpoint addresses, from the Service's EndpointSlices.
	pods := map[netip.Addr]string{}
	for _, sl := range m.slicesOf[name] {
		es := m.epSlices[sl]
		if es == nil {
			continue
		}
		for _, e := range es.Endpoints {
			if e.TargetRef == nil || e.TargetRef.Kind != "Pod" {
				continue
			}
			for _, a := range e.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					pods[ip] = e.TargetRef.Namespace + "/" + e.TargetRef.Name
				}
			}
		}
	}
	for _, k := range m.svcKeys[name] {
		sp := m.st.Services[k]
		pr := ServicePortReport{Key: k.String(), PortName: sp.PortName, Protocol: string(sp.Protocol), Family: sp.Family.String(), Port: int(sp.Port),
			NodePort: int(sp.NodePort), Group: sp.GroupID, EntryPoints: []string{}, Endpoints: []EndpointReport{}}
		for _, e := range sp.EntryPoints(m.st.NodePortAddresses) {
			pr.EntryPoints = append(pr.EntryPoints, e.String())
		}
		if a, ok := s.applied[flows.BrEx][k]; ok {
			pr.Cookie = a.Cookie.String()
			pr.Flows = s.appliedSize[flows.BrEx][k]
			pr.EntryPoints = pr.EntryPoints[:0]
			for _, e := range a.EntryPoints {
				pr.EntryPoints = append(pr.EntryPoints, e.String())
			}
		}
		if why, ok := s.declined[k]; ok {
			pr.Declined = "declined: " + why + " (see the SourceIPDeclined Event)"
		}
		_, pr.Rejected = s.rejected[flows.BrEx][k]
		var eps []netip.AddrPort
		nodeOf := map[netip.AddrPort]string{}
		for _, ep := range sp.Endpoints {
			if sp.Family.Has(ep.IP) && ep.Port != 0 {
				ap := netip.AddrPortFrom(ep.IP, ep.Port)
				eps = append(eps, ap)
				nodeOf[ap] = ep.NodeName
			}
		}
		ids := flows.BucketIDs(eps)
		for _, ap := range eps {
			pr.Endpoints = append(pr.Endpoints, EndpointReport{Addr: ap.String(), Bucket: ids[ap], Pod: pods[ap.Addr()], Node: nodeOf[ap]})
		}
		slices.SortFunc(pr.Endpoints, func(a, b EndpointReport) int { return cmp.Compare(a.Bucket, b.Bucket) })
		pr.Endpoints = slices.CompactFunc(pr.Endpoints, func(a, b EndpointReport) bool { return a.Addr == b.Addr })
		if pr.Declined == "" && pr.Cookie != "" {
			pr.Buckets = min(len(pr.Endpoints), flows.MaxGroupBuckets)
		}
		sr.Ports = append(sr.Ports, pr)
	}
	slices.SortFunc(sr.Ports, func(a, b ServicePortReport) int {
		return cmp.Or(cmp.Compare(a.PortName, b.PortName), strings.Compare(a.Protocol, b.Protocol), strings.Compare(a.Family, b.Family))
	})
	return sr
}

// egressReports builds Report.Egress (called with syncMu held).
func (r *Reconciler) egressReports(now time.Time) []EgressReport {
	m, s := r.model, r.syncer
	out := []EgressReport{}
	applied := func(b flows.Bridge, k flows.Key) (FlowSetReport, bool) {
		a, ok := s.applied[b][k]
		if !ok {
			return FlowSetReport{}, false
		}
		return FlowSetReport{Bridge: b.String(), Kind: k.Kind.String(), Key: k.String(), Object: ObjectName(k),
			Cookie: a.Cookie.String(), Flows: s.appliedSize[b][k], Groups: a.Groups}, true
	}
	for _, p := range m.egressPolicies {
		er := EgressReport{Name: p.Name, Generation: p.Generation, Invalid: p.Invalid, IPs: []EgressIPReport{},
			Pods: []EgressPodReport{}, FlowSets: []FlowSetReport{}}
		if p.obj != nil {
			er.Conditions = PolicyStatus(p, now).Conditions
		}
		for _, st := range p.IPs {
			ir := EgressIPReport{IP: addrString(st.IP), Gateway: st.Gateway, Eligible: slices.Clone(st.Eligible),
				ThisNode: "none", Refused: st.Refused, Message: st.Message}
			if ir.Eligible == nil {
				ir.Eligible = []string{}
			}
			switch {
			case st.Gateway != "" && st.Gateway == r.cfg.NodeName:
				ir.ThisNode = "gateway"
				er.Gateway = true
			case slices.Contains(st.Eligible, r.cfg.NodeName):
				ir.ThisNode = "eligible"
			}
			er.IPs = append(er.IPs, ir)
			if st.Refused == "" && st.IP.IsValid() {
				for _, k := range []flows.Key{{Kind: flows.KindEgress, Name: st.IP.String()}, {Kind: flows.KindEgressAnnounce, Name: st.IP.String()}} {
					b := flows.BrInt
					if k.Kind == flows.KindEgressAnnounce {
						b = flows.BrEx
					}
					if fr, ok := applied(b, k); ok {
						er.FlowSets = append(er.FlowSets, fr)
					}
				}
			}
		}
		for k, fp := range m.st.Pods {
			v4 := fp.Egress != nil && fp.Egress.Policy == p.Name
			v6 := fp.Egress6 != nil && fp.Egress6.Policy == p.Name
			if !v4 && !v6 {
				continue
			}
			pr := EgressPodReport{Namespace: k.Namespace, Name: k.Name, IPs: []string{}}
			if v4 {
				pr.EgressIP = fp.Egress.IP.String()
			}
			if v6 {
				pr.EgressIPv6 = fp.Egress6.IP.String()
			}
			for _, ip := range fp.IPs {
				pr.IPs = append(pr.IPs, ip.String())
			}
			er.Pods = append(er.Pods, pr)
			if fr, ok := applied(flows.BrInt, k); ok {
				er.FlowSets = append(er.FlowSets, fr)
			}
		}
		slices.SortFunc(er.Pods, func(a, b EgressPodReport) int { return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
		slices.SortFunc(er.FlowSets, func(a, b FlowSetReport) int {
			return cmp.Or(cmp.Compare(a.Bridge, b.Bridge), cmp.Compare(a.Key, b.Key))
		})
		out = append(out, er)
	}
	return out
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// requestedEntry renders an entry point a Service asks for as ip:port/PROTO, an IPv6 address in
// brackets ([2001:db8::1]:80/TCP, as flows.EntryPoint prints it); an address that does not parse
// as written.
func requestedEntry(ip string, port int32, proto string) string {
	if a, err := netip.ParseAddr(ip); err == nil && a.Unmap().Is6() && port > 0 && port <= 65535 {
		return netip.AddrPortFrom(a.Unmap(), uint16(port)).String() + "/" + proto
	}
	return fmt.Sprintf("%s:%d/%s", ip, port, proto)
}
