package agent

import (
	"context"
	"net"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/openflow"
)

// FlowBridge is one OpenFlow bridge as the Reconciler writes it (implemented by ofctl's
// OpenFlow client and, in tests, by ofctltest.Fake).
type FlowBridge interface {
	// Bundle applies msgs (flows.Plan.Messages) as ONE atomic OpenFlow bundle: all or nothing.
	Bundle(ctx context.Context, msgs []openflow.Message) error
	// Inventory reads the owned cookies (with flow counts) and owned group ids of the bridge.
	Inventory(ctx context.Context) (flows.Inventory, error)
}

// EncodedBundler is a FlowBridge that takes a bundle already encoded (openflow.EncodeAll;
// ofctl.OpenFlow on its native connection): a cold start's full sync encodes its next chunk
// while the switch commits the current one.
type EncodedBundler interface {
	BundleEncoded(ctx context.Context, e *openflow.Encoded) error
}

// PodPort is a pod interface attached to br-int, as found through OVSDB Interface.external_ids
// (the Dataplane's PodPorts): the one type ofctl returns and the agent reads.
type PodPort = flows.PodPort

// Dataplane is the node's OVSDB as the Reconciler needs it (implemented in cmd/srcip-agent on
// top of ofctl.DB).
type Dataplane interface {
	// EnsureIntegration idempotently creates br-int, the patch ports and the Geneve port and
	// returns the ofports and MAC the pipeline outputs to.
	EnsureIntegration(ctx context.Context) (flows.Ports, error)
	// PodPorts lists the pod interfaces on br-int.
	PodPorts(ctx context.Context) ([]PodPort, error)
	// Changes is signalled (coalesced) after an OVSDB change that is more than pod ports (the
	// bridges, the uplink, patch, tunnel and gateway ports, their ofports), after a reconnect and
	// after an ovs-vswitchd restart: the agent makes a full sync.
	Changes() <-chan struct{}
	// PodPortChanges is signalled (coalesced) after OVSDB changes that may have added, changed
	// or removed pod ports: the agent lists PodPorts again and makes a partial sync of the pods
	// whose ports differ (podPortSource).
	PodPortChanges() <-chan struct{}
}

// PodFlowAcker is optionally implemented by a Dataplane that records, for srcip-cni's ADD, that
// a pod's flow set is in br-int (cmd/srcip-agent: ofctl.DB.AckPodFlows, external_ids
// srcip-agent-flows on the pod's Interface; docs/architecture.md "A pod from CNI ADD to its
// flows").
type PodFlowAcker interface {
	// AckPodFlows records, per pod Interface name (PodPort.Interface), the cookie of the pod flow
	// set applied for it. Names that are gone are skipped.
	AckPodFlows(ctx context.Context, acks map[string]flows.Cookie) error
}

// ConnectionChecker is optionally implemented by a Dataplane that knows whether its OVSDB
// connection is up; /healthz uses it.
type ConnectionChecker interface {
	Connected() bool
}

// Handler receives every change a Source sees. prev is nil for an add, cur is nil for a delete.
// Implementations must be fast and must not block: the Reconciler's handler only records the
// change in a ChangeTracker and requests a sync.
type Handler interface {
	OnNode(prev, cur *corev1.Node)
	OnService(prev, cur *corev1.Service)
	OnEndpointSlice(prev, cur *discoveryv1.EndpointSlice)
	OnPod(prev, cur *corev1.Pod)
	// OnEgressGateway and OnNamespace feed the egress policies (docs/egress.md).
	OnEgressGateway(prev, cur *egressv1.EgressGateway)
	OnNamespace(prev, cur *corev1.Namespace)
	// OnServiceCIDR feeds admission the cluster's Service CIDRs (networking.k8s.io/v1).
	OnServiceCIDR(prev, cur *networkingv1.ServiceCIDR)
}

// Source is where cluster objects come from: the Kubernetes API (KubeSource) or a directory of
// manifests (ManifestSource).
type Source interface {
	// Start begins delivering changes to h from the Source's own goroutines until ctx is done.
	// It returns after the watches are set up, not after they have synced.
	Start(ctx context.Context, h Handler) error
	// HasSynced reports whether h has been given the complete initial content.
	HasSynced() bool
	// Events returns where problems with objects are reported.
	Events() EventSink
}

// EventSink reports a problem with one object: a Kubernetes Event (KubeSource) or a log line.
type EventSink interface {
	Warn(obj runtime.Object, reason, message string)
}

// Conntrack is the node datapath's connection tracker (implemented by ofctl.OpenFlow through
// ovs-vswitchd's dpctl/ commands and, in tests, by ofctltest.Fake).
type Conntrack interface {
	// FlushConntrack deletes the entries that f selects: those of f.Zone with protocol
	// f.Protocol whose reply tuple source is f.ReplySrc and, when f.OrigDst is valid, whose
	// original destination is f.OrigDst.
	FlushConntrack(ctx context.Context, f flows.ConntrackFilter) error
	// ConntrackDestinations counts the live entries of zone by protocol and original destination.
	ConntrackDestinations(ctx context.Context, zone uint16) (map[flows.EntryPoint]int, error)
}

// ConntrackLimiter is optionally implemented by a Conntrack that can bound each conntrack zone
// (implemented by ofctl.OpenFlow through ovs-vswitchd's dpctl/ct-*-limits commands).
type ConntrackLimiter interface {
	// ConntrackMax returns the datapath's maximum number of conntrack entries.
	ConntrackMax(ctx context.Context) (int, error)
	// SetConntrackZoneLimits sets positive per-zone limits.
	SetConntrackZoneLimits(ctx context.Context, limits map[uint16]int) error
	// DeleteConntrackZoneLimits lifts the limits of zones.
	DeleteConntrackZoneLimits(ctx context.Context, zones ...uint16) error
	// ConntrackZoneLimits reads the limit and entry count of zones.
	ConntrackZoneLimits(ctx context.Context, zones ...uint16) (map[uint16]flows.ZoneLimit, error)
}

// Announcer announces an egress IP on br-ex's uplink (implemented by ofctl.OpenFlow.AnnounceIP:
// a gratuitous ARP by packet-out).
type Announcer interface {
	// AnnounceIP sends a gratuitous ARP for ip at mac out of ofport.
	AnnounceIP(ctx context.Context, ip netip.Addr, mac net.HardwareAddr, ofport int) error
}

// EgressStatusSink receives the EgressGateways as the last successful sync converted them
// (EgressStatusWriter); Publish must not block.
type EgressStatusSink interface {
	Publish(policies []*EgressPolicy)
}

// FlowStatser is implemented by a FlowBridge that can read its flows' counters
// (ofctl.OpenFlow.FlowStats); the per-Service and drop metrics are read through it at scrape time.
type FlowStatser interface {
	FlowStats(ctx context.Context) ([]flows.FlowStat, error)
}
