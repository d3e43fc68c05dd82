package flows

import (
	"fmt"
	"slices"
)

// Kind says what kind of object a FlowSet serves; it is byte 6 of every cookie.
type Kind uint8

// Kinds. Values are part of the cookie layout and never change meaning. Each has exactly one
// entry in the registry below; see docs/architecture.md "Adding a kind".
const (
	// KindExBase is the static br-ex pipeline: uplink<->host plumbing and the classifier hooks.
	KindExBase Kind = 0x01
	// KindIntBase is the static br-int pipeline: classifier, ARP responder, pod ingress commit.
	KindIntBase Kind = 0x02
	// KindNode is the route to one other node's pod CIDRs over Geneve.
	KindNode Kind = 0x03
	// KindPod is one local pod: spoof guard, L3 delivery.
	KindPod Kind = 0x04
	// KindTunnelPeer lets Geneve from one other node's InternalIP into this node (br-ex).
	KindTunnelPeer Kind = 0x05
	// KindGateway is host connectivity through the gateway port (srcip-gw0), when the node has one.
	KindGateway Kind = 0x06
	// KindEgress is one egress IP on br-int: where its pods' packets go (the active gateway, or
	// drop), and on the active gateway its SNAT and un-SNAT (key: the egress IP).
	KindEgress Kind = 0x07
	// KindEgressAnnounce is one egress IP on br-ex of its active gateway: the ARP answer, the
	// uplink hook of its replies and the hand-off of SNATed packets to the host.
	KindEgressAnnounce Kind = 0x08
	// KindServicePort is one opted-in Service port: entry points, select group.
	KindServicePort Kind = 0x10
	// KindServiceDrain is one entry point (VIP:port/protocol) of a Service port that went away
	// (annotation removed, Service or port deleted, ETP changed) while ZoneService still held
	// connections to it: its ExServiceLB flow, below the live entry priority, keeps sending them
	// through ct(nat) so that established connections keep flowing; new ones go to the host.
	KindServiceDrain Kind = 0x11
	// KindUDPFragments sends every UDP fragment to one address with UDP entry points through
	// ct(zone=ZoneService,nat), which reassembles the datagram (key: the address).
	KindUDPFragments Kind = 0x12
	// KindLearnedReset marks the short-lived flows that IntPodIngressCT's collision flow learns
	// (ResetLearn): they are no flow set of the agent's; the agent never deletes or repairs
	// them (Cookie.Learned), their hard timeout ends them.
	KindLearnedReset Kind = 0x20
	// KindLearnedAffinity marks the flows a sessionAffinity: ClientIP Service port's bucket
	// learns in ExServiceAffinity (AffinityLearn): one client's choice of endpoint, ended by
	// their idle timeout (timeoutSeconds). The fingerprint names the Service port, the timeout
	// and the endpoint (AffinityCookie): the agent deletes them by cookie when the endpoint
	// leaves the port, the timeout changes or affinity is turned off (FlowSet.Learned), and a
	// full sync deletes those no flow set names.
	KindLearnedAffinity Kind = 0x21
)

// Trigger says which changes make the flow sets of a kind dirty (to be rebuilt by a partial
// sync). A full sync rebuilds every flow set whatever its triggers.
type Trigger uint8

// Triggers; a kind may have several.
const (
	// EverySync: rebuilt in every sync (cheap, may read any part of State), as are the applied
	// flow sets of the kind whose keys State no longer calls for (they go away).
	EverySync Trigger = 1 << iota
	// OwnObject: rebuilt when the object its Key names changes (a Node, a Pod or its pod port,
	// a Service or one of its EndpointSlices, a drain starting or ending).
	OwnObject
	// PodCIDRs: rebuilt (all of the kind) when any node's pod CIDRs change.
	PodCIDRs
)

// KindSpec is everything about one kind of flow set, in one place: how it is built from State,
// what makes it dirty, how it ranks in conflicts, and its names. Adding a kind = a file
// flows/<kind>.go with its builder + one entry in registry.
type KindSpec struct {
	// Kind is the cookie's kind byte.
	Kind Kind
	// Name is the kind's name in logs, metrics (label "kind") and srcipctl (--kind).
	Name string
	// Doc is a one-line description (srcipctl, docs/pipeline.md).
	Doc string
	// Bridge is where its flow sets live.
	Bridge Bridge
	// Tier is the kind's base collision rank (lower wins; see Rank).
	Tier int
	// Triggers say what makes its flow sets dirty.
	Triggers Trigger
	// Keys lists the keys of every flow set of this kind that st calls for (a full build).
	Keys func(st *State) []Key
	// Build builds the flow set of k from st; (nil, nil) when st holds no such object any more.
	Build func(st *State, k Key) (*FlowSet, error)
	// Rank is the object's part of the collision rank (nil: zero).
	Rank func(st *State, k Key) Rank
	// Object is the Kubernetes kind of the object a Key of this kind names ("Node", "Pod",
	// "Service"; empty for the base pipelines and drains): problems are reported on it.
	Object string
	// AllOrNothing: a flow set that loses any flow to another is not programmed at all (a pod
	// whose address belongs to another pod).
	AllOrNothing bool
}

// registry holds one entry per kind, in cookie-byte order.
var registry = []KindSpec{
	{Kind: KindExBase, Name: "ex-base", Doc: "the static br-ex pipeline", Bridge: BrEx,
		Tier: 0, Triggers: EverySync, Keys: singleton(KindExBase), Build: buildExBase},
	{Kind: KindIntBase, Name: "int-base", Doc: "the static br-int pipeline (incl. ARP responder of this node's pod CIDRs)", Bridge: BrInt,
		Tier: 0, Triggers: EverySync, Keys: singleton(KindIntBase), Build: buildIntBase},
	{Kind: KindNode, Name: "node", Doc: "the Geneve route to one other node's pod CIDRs", Bridge: BrInt,
		Tier: 1, Triggers: OwnObject, Keys: otherNodeKeys(KindNode), Build: otherNodeBuild(BuildNode), Rank: nodeRank, Object: "Node"},
	{Kind: KindPod, Name: "pod", Doc: "one local pod: spoof guard and delivery", Bridge: BrInt,
		Tier: 1, Triggers: OwnObject, Keys: podKeys, Build: buildPodKey, Rank: podRank, Object: "Pod", AllOrNothing: true},
	{Kind: KindTunnelPeer, Name: "tunnel-peer", Doc: "Geneve from one other node's InternalIP, let into this node (all other Geneve is dropped)", Bridge: BrEx,
		Tier: 1, Triggers: OwnObject, Keys: otherNodeKeys(KindTunnelPeer), Build: otherNodeBuild(BuildTunnelPeer), Rank: nodeRank, Object: "Node"},
	{Kind: KindGateway, Name: "gateway", Doc: "host connectivity through the gateway port (srcip-gw0), when the node has one: host <-> pods, pods -> node addresses, ClusterIPs and the outside world, replies of what the host sent in go back to it", Bridge: BrInt,
		Tier: 0, Triggers: EverySync, Keys: gatewayKeys, Build: buildGatewayKey},
	{Kind: KindEgress, Name: "egress", Doc: "one egress IP of an EgressGateway on br-int: its pods' packets to the active gateway over Geneve (VNI 4) or drop without one; on the active gateway the SNAT in ZoneEgress and the un-SNAT of replies (key: the egress IP)", Bridge: BrInt,
		Tier: 1, Triggers: EverySync, Keys: egressKeys(KindEgress), Build: egressBuild(BuildEgress)},
	{Kind: KindEgressAnnounce, Name: "egress-announce", Doc: "one egress IP on br-ex of its active gateway only: ARP answer on the uplink (the secondary uplink whose subnet holds the IP, if any), its replies to br-int, SNATed packets to the host (key: the egress IP)", Bridge: BrEx,
		Tier: 1, Triggers: EverySync, Keys: egressKeys(KindEgressAnnounce), Build: egressBuild(BuildEgressAnnounce)},
	{Kind: KindServicePort, Name: "service-port", Doc: "one opted-in Service port: entry points and its select group", Bridge: BrEx,
		Tier: 1, Triggers: OwnObject | PodCIDRs, Keys: servicePortKeys, Build: buildServicePortKey, Rank: servicePortRank, Object: "Service"},
	{Kind: KindServiceDrain, Name: "service-drain", Doc: "one TCP entry point of a Service port that went away, while connections to it remain (key: `ip:port/TCP`; its cookie depends only on the entry point)", Bridge: BrEx,
		Tier: 1, Triggers: OwnObject, Keys: drainKeys, Build: buildDrainKey},
	{Kind: KindUDPFragments, Name: "udp-fragments", Doc: "every UDP fragment to one address with UDP entry points, through ct(zone=ZoneService,nat) (key: the address)", Bridge: BrEx,
		Tier: 1, Triggers: EverySync, Keys: udpFragmentsKeys, Build: buildUDPFragmentsKey},
}

// Kinds returns the registry: one KindSpec per kind, in cookie-byte order.
func Kinds() []KindSpec { return registry }

// KindNames returns the kinds' names, in registry order.
func KindNames() []string {
	out := make([]string, len(registry))
	for i, s := range registry {
		out[i] = s.Name
	}
	return out
}

// Spec returns the registry entry of k.
func Spec(k Kind) (KindSpec, bool) {
	i := slices.IndexFunc(registry, func(s KindSpec) bool { return s.Kind == k })
	if i < 0 {
		return KindSpec{}, false
	}
	return registry[i], true
}

// KindByName returns the kind named s (KindSpec.Name).
func KindByName(s string) (Kind, bool) {
	i := slices.IndexFunc(registry, func(e KindSpec) bool { return e.Name == s })
	if i < 0 {
		return 0, false
	}
	return registry[i].Kind, true
}

// String returns the kind's name as shown by srcipctl, in metrics and in logs.
func (k Kind) String() string {
	if s, ok := Spec(k); ok {
		return s.Name
	}
	return fmt.Sprintf("kind(0x%02x)", uint8(k))
}

// RankOf returns the collision rank of the flow set of k: the kind's tier plus what the object
// adds.
func RankOf(st *State, k Key) Rank {
	s, _ := Spec(k.Kind)
	var r Rank
	if s.Rank != nil {
		r = s.Rank(st, k)
	}
	r.Tier += s.Tier
	return r
}

func singleton(k Kind) func(*State) []Key {
	return func(*State) []Key { return []Key{{Kind: k}} }
}

// BuildKey builds the flow set of k from st through the registry; (nil, nil) when st holds no
// such object.
func BuildKey(st *State, k Key) (*FlowSet, error) {
	s, ok := Spec(k.Kind)
	if !ok {
		return nil, fmt.Errorf("unknown flow set kind %s", k.Kind)
	}
	return s.Build(st, k)
}
