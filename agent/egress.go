package agent

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	"github.com/ovs-srcip/ovs-srcip/flows"
)

// EgressIPState is what the agent decided about one egress IP of an EgressGateway.
type EgressIPState struct {
	IP netip.Addr
	// Refused is the Conflict reason (egressv1.Reason*) when the IP is not programmed.
	Refused, Message string
	// Gateway is the active gateway node ("" none); Eligible are the Ready nodes that match the
	// policy's gatewayNodeSelector, by name.
	Gateway  string
	Eligible []string
	// Underlay is the family of the egress path's Geneve underlay (egressUnderlay: the nodes'
	// underlay family; IPv4 in a cluster that mixes them). OtherUnderlay are the Ready nodes
	// that match the selector but cannot be gateways: their underlay address is not of that
	// family (or they have none), and a node tunnels only to nodes of its own underlay family
	// (flows.State.TunnelRefusal).
	Underlay      flows.Family
	OtherUnderlay []string
	// Declined is why this node declines to be the IP's gateway although it is eligible ("":
	// it does not): an IPv6 egress IP inside an IPv6 subnet of one of its secondary NICs
	// (flows.State.SecondarySubnet6For), which it cannot send through that NIC. This node's
	// view only: the node neither campaigns for the IP nor serves it (flows.BuildEgress fails
	// closed), says so in a Warning Event on the policy and in its status.nodes entry.
	Declined string
	usable   bool // programmed: not refused, policy valid
}

// EgressPolicy is one EgressGateway as converted by the agent.
type EgressPolicy struct {
	Name       string
	Generation int64
	IPs        []EgressIPState
	// StatusWriter is the node whose agent writes the policy's activeGateways and conditions:
	// the gateway of its first egress IP that has one, else the first Ready node by name (every
	// agent computes the same).
	StatusWriter string
	// Invalid is set when the spec cannot be used (a selector or CIDR the agent cannot parse).
	Invalid string
	// Pool is how the status writer cuts port blocks (--egress-port-*); Nodes are the nodes
	// the agent knows (a status.nodes entry of another node lists no pods: its blocks are
	// released); LocalPods are this node's pods the policy gives an egress IP, and those that
	// still hold a block of it (retainPortBlocks: a pod keeps its block while it exists), for its own
	// status.nodes entry.
	Pool      PortPool
	Nodes     []string
	LocalPods []egressv1.PodPortRequest
	obj       *egressv1.EgressGateway
	nsSel     labels.Selector // nil: every namespace
	podSel    labels.Selector // nil: every pod
	dsts      []netip.Prefix
	exclude   []netip.Prefix
}

// GatewayChooser returns the active gateway of an egress IP among eligible nodes (sorted by
// name), or "" for none. The default (manifests mode) takes the policy's
// status.activeGateways entry when it names an eligible node, else the first eligible node;
// with Kubernetes the Lease holder is used (LeaseElector).
type GatewayChooser func(policy *egressv1.EgressGateway, ip netip.Addr, eligible []string) string

// StatusGateway is the default GatewayChooser.
func StatusGateway(policy *egressv1.EgressGateway, ip netip.Addr, eligible []string) string {
	for _, a := range policy.Status.ActiveGateways {
		if a.EgressIP == ip.String() && slices.Contains(eligible, a.Node) {
			return a.Node
		}
	}
	if len(eligible) > 0 {
		return eligible[0]
	}
	return ""
}

func egressGatewayEqual(a, b *egressv1.EgressGateway) bool {
	return a.Generation == b.Generation && a.CreationTimestamp.Equal(&b.CreationTimestamp) &&
		equality.Semantic.DeepEqual(a.Spec, b.Spec) &&
		equality.Semantic.DeepEqual(a.Status.ActiveGateways, b.Status.ActiveGateways) &&
		portBlocksEqual(a.Status.PortBlocks, b.Status.PortBlocks) && nodePodsEqual(a.Status.Nodes, b.Status.Nodes)
}

// nodePodsEqual compares the pods the nodes list (what the status writer allocates for), not
// their observedGeneration.
func nodePodsEqual(a, b []egressv1.NodeStatus) bool {
	return slices.EqualFunc(a, b, func(x, y egressv1.NodeStatus) bool {
		return x.Node == y.Node && slices.Equal(x.Pods, y.Pods)
	})
}

func namespaceEqual(a, b *corev1.Namespace) bool { return reflect.DeepEqual(a.Labels, b.Labels) }

// convertEgress parses a policy's selectors and CIDRs.
func convertEgress(g *egressv1.EgressGateway) *EgressPolicy {
	p := &EgressPolicy{Name: g.Name, Generation: g.Generation, obj: g}
	var err error
	if g.Spec.NamespaceSelector != nil {
		if p.nsSel, err = metav1.LabelSelectorAsSelector(g.Spec.NamespaceSelector); err != nil {
			p.Invalid = "namespaceSelector: " + err.Error()
		}
	}
	if g.Spec.PodSelector != nil {
		if p.podSel, err = metav1.LabelSelectorAsSelector(g.Spec.PodSelector); err != nil {
			p.Invalid = "podSelector: " + err.Error()
		}
	}
	if g.Spec.NamespaceSelector == nil && g.Spec.PodSelector == nil {
		p.Invalid = "neither namespaceSelector nor podSelector"
	}
	if p.dsts, err = ParseCIDRs(g.Spec.Destinations); err != nil {
		p.Invalid = "destinations: " + err.Error()
	}
	if p.exclude, err = ParseCIDRs(g.Spec.ExcludedDestinations); err != nil {
		p.Invalid = "excludedDestinations: " + err.Error()
	}
	return p
}

// selects reports whether the policy selects pod (namespace labels from ns; a namespace the
// agent has not seen has only kubernetes.io/metadata.name).
func (p *EgressPolicy) selects(pod *corev1.Pod, ns *corev1.Namespace) bool {
	if p.Invalid != "" {
		return false
	}
	if p.nsSel != nil {
		nsLabels := labels.Set{corev1.LabelMetadataName: pod.Namespace}
		if ns != nil {
			nsLabels = labels.Set(ns.Labels)
		}
		if !p.nsSel.Matches(nsLabels) {
			return false
		}
	}
	return p.podSel == nil || p.podSel.Matches(labels.Set(pod.Labels))
}

// updateEgress recomputes the egress IPs (conflicts, gateways) and every local pod's egress
// assignment; pods whose assignment changed are marked in touched.
func (m *model) updateEgress(logger klog.Logger, touched map[flows.Key]bool) {
	// Policies, oldest first (an egress IP belongs to the oldest policy that names it, C28).
	pols := make([]*EgressPolicy, 0, len(m.egws))
	for _, g := range m.egws {
		pols = append(pols, convertEgress(g))
	}
	slices.SortFunc(pols, func(a, b *EgressPolicy) int {
		if c := a.obj.CreationTimestamp.Compare(b.obj.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	nodeAddrs := map[netip.Addr]string{}
	for _, n := range m.nodes {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				nodeAddrs[ip] = n.Name
			}
		}
	}
	// The Services' LoadBalancer IPs and externalIPs, read only when a policy names an egress
	// IP: without policies a sync does not walk every Service.
	var lbAddrs map[netip.Addr]string
	lbAddr := func(ip netip.Addr) string {
		if lbAddrs == nil {
			lbAddrs = map[netip.Addr]string{}
			for name, s := range m.services {
				for _, in := range s.Status.LoadBalancer.Ingress {
					if ip, err := netip.ParseAddr(in.IP); err == nil {
						lbAddrs[ip] = name.String()
					}
				}
				for _, e := range s.Spec.ExternalIPs {
					if ip, err := netip.ParseAddr(e); err == nil {
						lbAddrs[ip] = name.String()
					}
				}
			}
		}
		return lbAddrs[ip]
	}
	readyNames := []string{}
	for name, n := range m.nodes {
		if nodeReady(n) == corev1.ConditionTrue {
			readyNames = append(readyNames, name)
		}
	}
	slices.Sort(readyNames)
	taken := map[netip.Addr]string{}
	// The usable IPv6 egress IPs by EgressID (their last 32 bits, which name them in the
	// pipeline): a second one with the same id is refused.
	takenID6 := map[uint32]netip.Addr{}
	egress := map[netip.Addr]flows.EgressIP{}
	choose := m.chooseGateway
	if choose == nil {
		choose = StatusGateway
	}
	if m.election != nil {
		choose = m.election.Choose
	}
	underlay := egressUnderlay(m.nodes)
	for _, p := range pols {
		var eligible, otherUnderlay []string
		if sel, err := metav1.LabelSelectorAsSelector(&p.obj.Spec.GatewayNodeSelector); err != nil {
			p.Invalid = "gatewayNodeSelector: " + err.Error()
		} else {
			for _, name := range readyNames {
				if !sel.Matches(labels.Set(m.nodes[name].Labels)) {
					continue
				}
				// The gateway must be reachable over the egress underlay: a node of the other
				// underlay family (or without an underlay address) would hold the Lease while
				// the pods' nodes drop every packet (flows.BuildEgress's DropEgressNoGateway).
				if a := nodeUnderlayAddr(m.nodes[name]); !a.IsValid() || flows.FamilyOf(a) != underlay {
					otherUnderlay = append(otherUnderlay, name)
					continue
				}
				eligible = append(eligible, name)
			}
		}
		// An IPv6 egress IP is served only by a node that runs IPv6 (an IPv6 pod CIDR: its
		// br-int and br-ex carry IPv6, flows.BuildEgress).
		var eligible6 []string
		for _, name := range eligible {
			if nodeHasIPv6PodCIDR(m.nodes[name]) {
				eligible6 = append(eligible6, name)
			}
		}
		for _, s := range p.obj.Spec.EgressIPs {
			st := EgressIPState{Eligible: eligible, Underlay: underlay, OtherUnderlay: otherUnderlay}
			ip, err := netip.ParseAddr(s)
			if err == nil && ip.Is6() && !ip.Is4In6() {
				st.Eligible = eligible6
			}
			switch {
			case err != nil:
				st.Refused, st.Message = egressv1.ReasonUnsupported, "not an IP address: "+s
			case ip.Is4In6():
				st.IP = ip
				st.Refused, st.Message = egressv1.ReasonUnsupported, ip.String()+" is an IPv4-mapped IPv6 address: refused (write the IPv4 address "+ip.Unmap().String()+")"
			case ip.Zone() != "" || !ip.IsGlobalUnicast():
				st.IP = ip
				st.Refused, st.Message = egressv1.ReasonUnsupported, ip.String()+" is not a global unicast address (loopback, link-local, multicast or unspecified): refused (the gateway would answer for and send from an address the router does not route)"
			case nodeAddrs[ip] != "":
				st.IP = ip
				st.Refused, st.Message = egressv1.ReasonNodeAddress, ip.String()+" is an address of node "+nodeAddrs[ip]
			case lbAddr(ip) != "":
				st.IP = ip
				st.Refused, st.Message = egressv1.ReasonLoadBalancerIP, ip.String()+" is a LoadBalancer IP or externalIP of Service "+lbAddr(ip)
			case taken[ip] != "":
				st.IP = ip
				st.Refused, st.Message = egressv1.ReasonEgressIPInUse, ip.String()+" is an egress IP of the older EgressGateway "+taken[ip]
			case ip.Is6() && takenID6[flows.EgressID(ip)].IsValid():
				other := takenID6[flows.EgressID(ip)]
				st.IP = ip
				st.Refused, st.Message = egressv1.ReasonEgressIPInUse, ip.String()+" has the same last 32 bits as the IPv6 egress IP "+other.String()+" of EgressGateway "+taken[other]+" (the pipeline names an IPv6 egress IP by them)"
			default:
				st.IP = ip
				taken[ip] = p.Name
				if ip.Is6() {
					takenID6[flows.EgressID(ip)] = ip
				}
				st.usable = p.Invalid == ""
				if _, _, where, ok := m.st.SecondarySubnet6For(ip); ok && st.usable && slices.Contains(st.Eligible, m.node) {
					st.Declined = "IPv6 egress IP " + ip.String() + " is " + where + " on node " + m.node + ": " + flows.Egress6SecondaryNote
				}
			}
			p.IPs = append(p.IPs, st)
		}
	}
	// Refusals as Warning Events on the policy, per family (each changed set once).
	for _, p := range pols {
		var probs []string
		for _, s := range p.IPs {
			if s.Refused == "" {
				continue
			}
			fam := "IPv4 "
			switch {
			case !s.IP.IsValid():
				fam = ""
			case s.IP.Is6() && !s.IP.Is4In6():
				fam = "IPv6 "
			}
			probs = append(probs, fam+"egress IP refused ("+s.Refused+"): "+s.Message)
		}
		if len(probs) > 0 || !m.quiet(probs) {
			m.report(egressEventObject(p.obj), "egressgateway/"+p.Name, ReasonConflict, probs)
		}
		// What this node declines (EgressIPState.Declined), never silently.
		var declined []string
		for _, s := range p.IPs {
			if s.Declined != "" {
				declined = append(declined, s.Declined)
			}
		}
		if len(declined) > 0 || !m.quiet(declined) {
			m.report(egressEventObject(p.obj), "egress-declined/"+p.Name, ReasonDeclined, declined)
		}
	}
	// The election first learns what this node may serve (it gives up the rest at once), then
	// names the gateways.
	if m.election != nil {
		var mine []netip.Addr
		for _, p := range pols {
			for _, st := range p.IPs {
				if st.usable && st.Declined == "" && slices.Contains(st.Eligible, m.node) {
					mine = append(mine, st.IP)
				}
			}
		}
		m.election.Campaign(mine)
	}
	for _, p := range pols {
		for i := range p.IPs {
			st := &p.IPs[i]
			if st.usable {
				st.Gateway = choose(p.obj, st.IP, st.Eligible)
				e := flows.EgressIP{IP: st.IP, Policy: p.Name, Gateway: st.Gateway}
				// The stateless reply path needs every node's blocks: the API's (a status
				// writer), not this node's own (manifests mode: unique on this node only).
				if st.Gateway == m.node && !m.localPortBlocks {
					e.ReplyBlocks = replyBlocksOf(&p.obj.Status, st.IP)
				}
				egress[st.IP] = e
				if p.StatusWriter == "" && st.Gateway != "" {
					p.StatusWriter = st.Gateway
				}
			}
		}
		if p.StatusWriter == "" && len(readyNames) > 0 {
			p.StatusWriter = readyNames[0]
		}
		p.Pool = m.portPool
		p.Nodes = make([]string, 0, len(m.nodes))
		for name := range m.nodes {
			p.Nodes = append(p.Nodes, name)
		}
		slices.Sort(p.Nodes)
	}
	// Pool exhaustion as a Warning Event on the policy, by its status writer only (the
	// condition PortBlocksExhausted is in the status, PolicyStatus).
	for _, p := range pols {
		var probs []string
		if p.StatusWriter == m.node {
			if blocks, waiting := AllocatePortBlocks(p.obj.Status.PortBlocks, portRequests(p), p.Pool, m.now()); len(waiting) > 0 {
				probs = append(probs, exhaustedMessage(p, blocks, waiting))
			}
		}
		if len(probs) > 0 || !m.quiet(probs) {
			m.report(egressEventObject(p.obj), "egressgateway/"+p.Name+"/ports", ReasonPortBlocksExhausted, probs)
		}
	}
	polByName := map[string]*EgressPolicy{}
	for _, p := range pols {
		polByName[p.Name] = p
	}
	m.st.Egress = egress
	m.st.EgressClusterCIDRs = m.egressClusterCIDRs
	m.egressPolicies = pols

	// Local pods, per family: a pod's IPv4 traffic follows the oldest policy that selects it
	// and has a usable IPv4 egress IP, its IPv6 traffic the oldest one with a usable IPv6
	// egress IP (a policy of one family governs only that family's traffic).
	type podEg struct {
		pe, pe6 *flows.PodEgress
		uid     string
	}
	assigned := make(map[flows.Key]podEg, len(m.st.Pods))
	for k := range m.st.Pods {
		var a podEg
		if pod := m.pods[nn(k.Namespace, k.Name)]; pod != nil {
			a.uid = string(pod.UID)
			a.pe = podEgressFor(pols, pod, m.namespaces[pod.Namespace], false)
			// A chained pod's too: its egress interface carries IPv6 when its main CNI gave
			// it an IPv6 address (flows.chainedPodFlows).
			a.pe6 = podEgressFor(pols, pod, m.namespaces[pod.Namespace], true)
			for _, e := range []*flows.PodEgress{a.pe, a.pe6} {
				if e != nil {
					p := polByName[e.Policy]
					p.LocalPods = append(p.LocalPods, egressv1.PodPortRequest{Pod: k.Namespace + "/" + k.Name, PodUID: a.uid, EgressIP: e.IP.String()})
				}
			}
		}
		assigned[k] = a
	}
	// A pod keeps the blocks it holds for as long as it exists on this node, selected or not
	// (docs/egress.md "Port blocks", the release rule): its connections pinned in ZonePod (C37)
	// keep the block's translation for their life, whatever the policies do later, so this node
	// goes on listing the pod for every block it holds (of an egress IP the policy still serves)
	// and the writer never hands the block to another pod while the pod may still use it. A block
	// is released when its pod is gone (deleted, or its node gone from the API).
	for _, p := range pols {
		m.retainPortBlocks(p)
	}
	// The port blocks: from the policy's status (the status writer allocates them for every
	// node), or, without a status writer (manifests mode), allocated here among this node's
	// own pods and kept in memory (unique on this node only: docs/egress.md "Port blocks").
	// A pod without a block is failed closed only when the allocation leaves it waiting (the
	// pool of its egress IP is exhausted: every agent computes the writer's allocation from the
	// same status); while its block is pending (its node's entry or the writer's update not
	// written yet, or a status writer that allocates none: an agent of an older version during
	// an upgrade) it keeps the egress path with its own port (flows.PodEgress.PortsExhausted).
	blocksOf := map[string][]egressv1.PortBlock{}
	type waitKey struct {
		policy string
		holder holderKey
	}
	exhausted := map[waitKey]bool{}
	for _, p := range pols {
		slices.SortFunc(p.LocalPods, func(a, b egressv1.PodPortRequest) int {
			return cmp.Or(cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.EgressIP, b.EgressIP))
		})
		var waiting []PortRequest
		if !m.localPortBlocks {
			blocksOf[p.Name] = p.obj.Status.PortBlocks
			_, waiting = AllocatePortBlocks(p.obj.Status.PortBlocks, portRequests(p), p.Pool, m.now())
		} else {
			var want []PortRequest
			for _, r := range p.LocalPods {
				want = append(want, PortRequest{Pod: r.Pod, PodUID: r.PodUID, EgressIP: r.EgressIP})
			}
			blocksOf[p.Name], waiting = AllocatePortBlocks(m.localBlocks[p.Name], want, m.portPool, m.now())
		}
		for _, r := range waiting {
			exhausted[waitKey{p.Name, holderOf(r.EgressIP, r.Pod, r.PodUID)}] = true
		}
	}
	if m.localPortBlocks {
		m.localBlocks = blocksOf
	}
	for k, fp := range m.st.Pods {
		a := assigned[k]
		pe, pe6 := a.pe, a.pe6
		// The pod's port block per family (none: pending, or its pool is exhausted).
		for _, e := range []*flows.PodEgress{pe, pe6} {
			if e != nil {
				var ok bool
				e.PortFirst, e.PortLast, ok = portBlockOf(blocksOf[e.Policy], e.IP.String(), k.Namespace+"/"+k.Name, a.uid)
				e.PortsExhausted = !ok && exhausted[waitKey{e.Policy, holderOf(e.IP.String(), k.Namespace+"/"+k.Name, a.uid)}]
			}
		}
		if !reflect.DeepEqual(pe, m.podEgress[k]) || !reflect.DeepEqual(pe, fp.Egress) ||
			!reflect.DeepEqual(pe6, m.podEgress6[k]) || !reflect.DeepEqual(pe6, fp.Egress6) {
			markObject(touched, "Pod", k.Namespace, k.Name)
			if pe == nil {
				delete(m.podEgress, k)
			} else {
				m.podEgress[k] = pe
				logger.V(2).Info("Pod egress", "pod", klog.KRef(k.Namespace, k.Name), "egressIP", pe.IP, "policy", pe.Policy,
					"ports", fmt.Sprintf("%d-%d", pe.PortFirst, pe.PortLast))
			}
			if pe6 == nil {
				delete(m.podEgress6, k)
			} else {
				m.podEgress6[k] = pe6
				logger.V(2).Info("Pod egress (IPv6)", "pod", klog.KRef(k.Namespace, k.Name), "egressIP", pe6.IP, "policy", pe6.Policy,
					"ports", fmt.Sprintf("%d-%d", pe6.PortFirst, pe6.PortLast))
			}
		}
		fp.Egress, fp.Egress6 = pe, pe6
		m.st.Pods[k] = fp
	}
}

// retainPortBlocks adds to p.LocalPods every active block of p (its status, or this node's own
// allocation in manifests mode) whose pod is a pod of this node with the block's UID, that
// p.LocalPods does not list (the pod is no longer selected, or uses another egress IP now), of an
// egress IP p still serves (connections pinned to an egress IP that went are dropped anyway).
func (m *model) retainPortBlocks(p *EgressPolicy) {
	blocks := p.obj.Status.PortBlocks
	if m.localPortBlocks {
		blocks = m.localBlocks[p.Name]
	}
	if len(blocks) == 0 {
		return
	}
	usable := map[string]bool{}
	for _, s := range p.IPs {
		if s.usable {
			usable[s.IP.String()] = true
		}
	}
	listed := map[holderKey]bool{}
	for _, r := range p.LocalPods {
		listed[holderOf(r.EgressIP, r.Pod, r.PodUID)] = true
	}
	for _, b := range blocks {
		h := holderOf(b.EgressIP, b.Pod, b.PodUID)
		if b.ReleasedAt != nil || !usable[b.EgressIP] || listed[h] {
			continue
		}
		ns, name, _ := strings.Cut(b.Pod, "/")
		if _, local := m.st.Pods[flows.Key{Kind: flows.KindPod, Namespace: ns, Name: name}]; !local {
			continue
		}
		if pod := m.pods[nn(ns, name)]; pod == nil || string(pod.UID) != b.PodUID {
			continue
		}
		listed[h] = true
		p.LocalPods = append(p.LocalPods, egressv1.PodPortRequest{Pod: b.Pod, PodUID: b.PodUID, EgressIP: b.EgressIP})
	}
}

// portRequests are the (pod, egress IP) pairs of p that need a port block: those the nodes
// list in p's status.nodes, of known nodes (a node gone from the API releases its pods'
// blocks) and of p's usable egress IPs. The entry of a node the agent does not know is skipped
// with a V(2) log line naming the policy, the node and how many pods it lists.
func portRequests(p *EgressPolicy) []PortRequest {
	usable := map[string]bool{}
	for _, s := range p.IPs {
		if s.usable {
			usable[s.IP.String()] = true
		}
	}
	var out []PortRequest
	for _, n := range p.obj.Status.Nodes {
		if _, ok := slices.BinarySearch(p.Nodes, n.Node); !ok {
			klog.V(2).InfoS("Port-block requests of an unknown node skipped", "egressGateway", p.Name, "node", n.Node,
				"pods", len(n.Pods), "reason", "not a Node the agent knows (gone from the API): its pods' blocks are released")
			continue
		}
		for _, r := range n.Pods {
			if r.PodUID == "" {
				// A pod from the API always has a metadata.uid (only manifests mode, which has no
				// status writer, knows UID-less pods): an empty one here is a hand edit or a
				// foreign writer's, and gets no block.
				klog.V(2).InfoS("Port-block request without a pod key skipped", "egressGateway", p.Name, "node", n.Node,
					"pod", r.Pod, "egressIP", r.EgressIP, "reason", "status.nodes[].pods[].podUID is empty")
				continue
			}
			if usable[r.EgressIP] {
				out = append(out, PortRequest{Pod: r.Pod, PodUID: r.PodUID, EgressIP: r.EgressIP})
			}
		}
	}
	return out
}

// exhaustedMessage says how many pods of p wait for a port block (blocks: the allocation that
// leaves them waiting), why (the pool of their egress IP, or the status list's limit) and
// what to do.
func exhaustedMessage(p *EgressPolicy, blocks []egressv1.PortBlock, waiting []PortRequest) string {
	names := make([]string, 0, 3)
	for i, r := range waiting {
		if i == 3 {
			names = append(names, "...")
			break
		}
		names = append(names, r.String())
	}
	if portBlocksListFull(blocks) {
		return fmt.Sprintf("%d pod(s) wait for a source-port block (%s): status.portBlocks holds %d entries, the most "+
			"the EgressGateway CRD allows (one per pod and egress IP, quarantined blocks included); their TCP and UDP "+
			"egress is dropped until an entry is free: split the pods among several EgressGateways",
			len(waiting), strings.Join(names, ", "), len(blocks))
	}
	return fmt.Sprintf("%d pod(s) wait for a source-port block (%s): each egress IP holds %d blocks of %d ports "+
		"(ports %d-%d); their TCP and UDP egress is dropped until a block is free: add egress IPs, or give "+
		"srcip-agent a larger --egress-port-range or a smaller --egress-port-block-size",
		len(waiting), strings.Join(names, ", "), p.Pool.Blocks(), p.Pool.Size, p.Pool.First, p.Pool.Last)
}

// podEgressFor returns pod's egress assignment of one family (v6: IPv6, else IPv4): the
// oldest policy in pols that selects it and has a usable egress IP of that family; with
// several, the one FNV-1a of namespace/name picks. nil: none.
func podEgressFor(pols []*EgressPolicy, pod *corev1.Pod, ns *corev1.Namespace, v6 bool) *flows.PodEgress {
	for _, p := range pols {
		if !p.selects(pod, ns) {
			continue
		}
		var usable []netip.Addr
		for _, s := range p.IPs {
			if s.Refused == "" && s.IP.IsValid() && s.IP.Is6() == v6 {
				usable = append(usable, s.IP)
			}
		}
		if len(usable) == 0 {
			continue
		}
		h := fnv.New32a()
		h.Write([]byte(pod.Namespace + "/" + pod.Name))
		return &flows.PodEgress{IP: usable[int(h.Sum32())%len(usable)], Policy: p.Name,
			Destinations: p.dsts, Excluded: p.exclude}
	}
	return nil
}

// egressEventObject is g with its TypeMeta set, so that the event recorder (whose scheme does
// not know the EgressGateway type) can reference it.
func egressEventObject(g *egressv1.EgressGateway) *egressv1.EgressGateway {
	c := *g
	c.TypeMeta = metav1.TypeMeta{Kind: "EgressGateway", APIVersion: egressv1.SchemeGroupVersion.String()}
	return &c
}

// nodeUnderlayAddr is n's Geneve underlay address as ConvertNode takes it: its first IPv4
// InternalIP, else its first IPv6 one (invalid: none).
func nodeUnderlayAddr(n *corev1.Node) netip.Addr {
	if n == nil {
		return netip.Addr{}
	}
	c, err := ConvertNode(n)
	if err != nil {
		return netip.Addr{}
	}
	return c.InternalIP
}

// egressUnderlay is the family of the egress path's underlay, the same on every agent: IPv6 when
// every node with an underlay address has an IPv6 one (an IPv6-underlay cluster), else IPv4 (an
// IPv4-underlay cluster, and a cluster that mixes the families, whose nodes of the other family
// cannot tunnel to the IPv4 ones anyway: their agents refuse them). All nodes count, Ready or
// not, so a node's readiness never flips the family.
func egressUnderlay(nodes map[string]*corev1.Node) flows.Family {
	six := false
	for _, n := range nodes {
		switch a := nodeUnderlayAddr(n); {
		case !a.IsValid():
		case a.Is4():
			return flows.IPv4
		default:
			six = true
		}
	}
	if six {
		return flows.IPv6
	}
	return flows.IPv4
}

// nodeHasIPv6PodCIDR reports whether n has an IPv6 pod CIDR (spec.podCIDRs, by family).
func nodeHasIPv6PodCIDR(n *corev1.Node) bool {
	if n == nil {
		return false
	}
	for _, c := range append([]string{n.Spec.PodCIDR}, n.Spec.PodCIDRs...) {
		if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is6() && !p.Addr().Is4In6() {
			return true
		}
	}
	return false
}

// EgressPolicies returns the policies as last converted (status writers, srcipctl).
func (m *model) EgressPolicies() []*EgressPolicy { return m.egressPolicies }

// egressSummary is a one-line description for logs.
func egressSummary(p *EgressPolicy) string {
	var b strings.Builder
	for _, s := range p.IPs {
		b.WriteString(s.IP.String())
		if s.Refused != "" {
			b.WriteString("(refused:" + s.Refused + ")")
		} else {
			b.WriteString("->" + s.Gateway)
		}
		b.WriteString(" ")
	}
	return strings.TrimSpace(b.String())
}
