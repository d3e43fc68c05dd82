package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/openflow"
)

// PlaceholderPorts are the ofports and MAC RenderDesired uses instead of OVSDB's.
// A node has its gateway port (srcip-gw0, ofport 3), as the node set-up step leaves it.
var PlaceholderPorts = flows.Ports{ExUplink: 1, ExPatch: 2, IntPatch: 1, IntTunnel: 2,
	ExMAC: net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}, IntGateway: 3,
	GatewayMAC: net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}}

// ReadManifestDir parses every manifest file of dir (see ManifestSource) and fails on the first
// file that does not parse.
func ReadManifestDir(dir string) ([]runtime.Object, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []runtime.Object
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") || !isManifest(e.Name()) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		objs, err := ParseManifests(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// DesiredOptions are the agent flags and node facts Desired renders with.
type DesiredOptions struct {
	// NodePortCIDRs and ExternalIPCIDRs are the agent's --nodeport-addresses and
	// --external-ip-cidrs.
	NodePortCIDRs, ExternalIPCIDRs []netip.Prefix
	// PreserveSourceIP is the agent's --preserve-source-ip ("": PreserveAnnotated).
	PreserveSourceIP PreserveMode
	// NodePortRange is the agent's --service-node-port-range (zero: DefaultNodePortRange);
	// EgressClusterCIDRs its --egress-cluster-cidrs.
	NodePortRange      [2]uint16
	EgressClusterCIDRs []netip.Prefix
	// NonMasqueradeCIDRs are the routed pods' CIDRs as the agent reports them (FlagsReport;
	// flows.NonMasqueradeSet already applied).
	NonMasqueradeCIDRs []netip.Prefix
	// Events receives problems with objects (nil: logged).
	Events EventSink
	// Ports are the node's ofports and MACs (nil: PlaceholderPorts).
	Ports *flows.Ports
	// PodPorts are the node's pod ports (nil: a placeholder port per Pod of the node with a
	// podIP, ofport 100, 101, ... in name order).
	PodPorts []PodPort
}

// RenderDesired returns the bundle lines ("flow add ...", "group add_or_mod ...") a first full
// sync of node would write into empty bridges, given cluster objects, without touching OVS: the
// ofports are PlaceholderPorts and every Pod of the node with a podIP (either family) gets a placeholder
// pod port (ofport 100, 101, ... in name order). It fails when node is not one of the Nodes of objs. nodePortCIDRs and externalIPCIDRs are the agent's
// --nodeport-addresses and --external-ip-cidrs. Problems are reported to events (nil: logged).
func RenderDesired(ctx context.Context, node string, objs []runtime.Object, nodePortCIDRs, externalIPCIDRs []netip.Prefix, events EventSink) (map[flows.Bridge][]string, error) {
	lines, _, err := Desired(ctx, node, objs, DesiredOptions{NodePortCIDRs: nodePortCIDRs, ExternalIPCIDRs: externalIPCIDRs, Events: events})
	return lines, err
}

// Desired is RenderDesired with the node's real ports when o gives them, and also returns the
// Report of the rendered state (its FlowSets have the cookies, flow counts and groups a first
// full sync would write: with the node's real ports they are the cookies its agent applies).
// Errors: node is not one of the Nodes of objs (with the names of those that are), or the sync
// failed.
func Desired(ctx context.Context, node string, objs []runtime.Object, o DesiredOptions) (map[flows.Bridge][]string, Report, error) {
	return desired(ctx, node, objs, o, nil)
}

// DesiredFlowSets is Desired returning, instead of bundle lines, the flow sets per bridge: those a
// full sync of the node's agent compares with the bridge's inventory (flows.FullDiff), after
// conflicts are resolved. Errors: as Desired.
func DesiredFlowSets(ctx context.Context, node string, objs []runtime.Object, o DesiredOptions) (map[flows.Bridge][]*flows.FlowSet, Report, error) {
	sets := map[flows.Bridge][]*flows.FlowSet{}
	_, rep, err := desired(ctx, node, objs, o, func(b flows.Bridge, desired []*flows.FlowSet) {
		sets[b] = desired
	})
	if err != nil {
		return nil, Report{}, err
	}
	for _, fs := range sets {
		slices.SortFunc(fs, func(a, b *flows.FlowSet) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	}
	return sets, rep, nil
}

// desired renders objs for node (Desired); planned, when set, receives each bridge's desired flow
// sets.
func desired(ctx context.Context, node string, objs []runtime.Object, o DesiredOptions, planned func(flows.Bridge, []*flows.FlowSet)) (map[flows.Bridge][]string, Report, error) {
	events := o.Events
	if events == nil {
		events = logEvents{}
	}
	dp := &staticDataplane{ports: PlaceholderPorts}
	if o.Ports != nil {
		dp.ports = *o.Ports
	}
	var pods []*corev1.Pod
	var nodes []string
	found := false
	for _, ob := range objs {
		if p, ok := ob.(*corev1.Pod); ok && p.Spec.NodeName == node {
			pods = append(pods, p)
		}
		if n, ok := ob.(*corev1.Node); ok {
			nodes = append(nodes, n.Name)
			found = found || n.Name == node
		}
	}
	if !found {
		slices.Sort(nodes)
		return nil, Report{}, fmt.Errorf("node %q is not among the Nodes of the objects (%s)", node, strings.Join(nodes, ", "))
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	if o.PodPorts != nil {
		dp.podPorts = o.PodPorts
	} else {
		for i, p := range pods {
			dp.podPorts = append(dp.podPorts, PodPort{Namespace: p.Namespace, Name: p.Name,
				Interface: fmt.Sprintf("pod%d", i), OFPort: 100 + i,
				MAC: net.HardwareAddr{0x0a, 0x58, 0, 0, byte(i >> 8), byte(i)}})
		}
	}
	out := map[flows.Bridge][]string{}
	bridges := map[flows.Bridge]FlowBridge{}
	for _, b := range applyOrder {
		bridges[b] = &captureBridge{lines: func(l []string) { out[b] = append(out[b], l...) }}
	}
	r := NewReconciler(ReconcilerConfig{NodeName: node, Bridges: bridges, Dataplane: dp,
		NodePortCIDRs: o.NodePortCIDRs, ExternalIPCIDRs: o.ExternalIPCIDRs, PreserveSourceIP: o.PreserveSourceIP, Events: events,
		NodePortRange: o.NodePortRange, EgressClusterCIDRs: o.EgressClusterCIDRs, NonMasqueradeCIDRs: o.NonMasqueradeCIDRs})
	r.syncer.planned = planned
	for _, ob := range objs {
		deliver(r, nil, ob)
	}
	if err := r.Sync(ctx); err != nil {
		return nil, Report{}, err
	}
	return out, r.Report(), nil
}

type staticDataplane struct {
	ports    flows.Ports
	podPorts []PodPort
}

func (d *staticDataplane) EnsureIntegration(context.Context) (flows.Ports, error) {
	return d.ports, nil
}
func (d *staticDataplane) PodPorts(context.Context) ([]PodPort, error) { return d.podPorts, nil }
func (d *staticDataplane) Changes() <-chan struct{}                    { return nil }
func (d *staticDataplane) PodPortChanges() <-chan struct{}             { return nil }

type captureBridge struct{ lines func([]string) }

func (c *captureBridge) Bundle(_ context.Context, msgs []openflow.Message) error {
	c.lines(openflow.Text(msgs))
	return nil
}

func (c *captureBridge) Inventory(context.Context) (flows.Inventory, error) {
	return flows.Inventory{}, nil
}
