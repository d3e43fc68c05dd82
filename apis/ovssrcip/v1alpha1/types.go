package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EgressGateway sends the traffic of selected pods towards destinations through one gateway
// node per egress IP, which SNATs it to that egress IP (docs/egress.md). Cluster-scoped.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=egw
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Egress IPs",type=string,JSONPath=`.spec.egressIPs`
// +kubebuilder:printcolumn:name="Gateways",type=string,description="The node that SNATs each egress IP.",JSONPath=`.status.activeGateways[*].node`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Destinations",type=string,priority=1,JSONPath=`.spec.destinations`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EgressGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says what goes through the gateway and which nodes may be the gateway.
	// +required
	Spec EgressGatewaySpec `json:"spec"`
	// Status is written by the agents.
	// +optional
	Status EgressGatewayStatus `json:"status,omitempty"`
}

// EgressGatewaySpec is what to send through the gateway, and which nodes may be the gateway.
//
// +kubebuilder:validation:XValidation:rule="has(self.namespaceSelector) || has(self.podSelector)",message="at least one of namespaceSelector and podSelector is required (an empty selector {} selects everything)"
// +kubebuilder:validation:XValidation:rule="!has(self.destinations) || self.egressIPs.all(e, !isIP(e) || self.destinations.all(d, !isCIDR(d) || cidr(d).ip().family() == ip(e).family()))",message="every destination must be of the egress IPs' address family"
// +kubebuilder:validation:XValidation:rule="self.egressIPs.all(e, !isIP(e) || ip(e).family() == 4) || self.egressIPs.all(e, !isIP(e) || ip(e).family() == 6)",message="egress IPs must all be of one address family"
type EgressGatewaySpec struct {
	// EgressIPs are the source addresses of the selected pods' traffic after the gateway, all
	// of one family: IPv4 ones carry the pods' IPv4 traffic, IPv6 ones their IPv6 traffic
	// (docs/egress.md "IPv6"). Each selected pod uses one of them, chosen by a hash of its
	// namespace and name; each has its own active gateway. The network must deliver them to
	// the gateway nodes' uplink L2 (the active gateway answers ARP, for IPv6 Neighbor
	// Solicitations, for them). An address equal to a node address, a Service's
	// LoadBalancer IP or another EgressGateway's egress IP is refused (condition Conflict).
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="must be an IPv4 or IPv6 address"
	// +kubebuilder:validation:items:XValidation:rule="!isIP(self) || ip(self).isGlobalUnicast()",message="must be a unicast address (not unspecified, loopback, link-local, multicast or broadcast)"
	EgressIPs []string `json:"egressIPs"`

	// GatewayNodeSelector selects the nodes that may be the gateway; for each egress IP the
	// agents elect one of them that is Ready (a Lease per egress IP). Required: an empty selector
	// {} allows every node.
	// +required
	GatewayNodeSelector metav1.LabelSelector `json:"gatewayNodeSelector"`

	// NamespaceSelector selects the namespaces whose pods are selected. Absent: every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// PodSelector selects pods in those namespaces. Absent: every pod.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`

	// Destinations are the networks (CIDRs without host bits) whose traffic goes through the
	// gateway. Absent or empty: everything outside the cluster's pod, Service and node networks
	// (the agents' --egress-cluster-cidrs and every Node's pod CIDRs and addresses, which are
	// always excluded).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 192.0.2.0/24 or 2001:db8::/32"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="must be a network address without host bits (192.0.2.0/24, not 192.0.2.1/24)"
	Destinations []string `json:"destinations,omitempty"`

	// ExcludedDestinations are networks inside Destinations whose traffic keeps the node's
	// own path (masqueraded to the node address).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 192.0.2.0/24 or 2001:db8::/32"
	ExcludedDestinations []string `json:"excludedDestinations,omitempty"`
}

// EgressGatewayStatus is written by the agents (status subresource).
type EgressGatewayStatus struct {
	// ActiveGateways is the node that currently SNATs each egress IP (the holder of its
	// Lease); an egress IP without an entry has no gateway: its pods' traffic to the
	// destinations is dropped (fail closed).
	// +optional
	// +listType=map
	// +listMapKey=egressIP
	// +kubebuilder:validation:MaxItems=16
	ActiveGateways []ActiveGateway `json:"activeGateways,omitempty"`

	// Conditions: Ready (every usable egress IP has an active gateway), Conflict (an egress
	// IP is refused; reasons below) and PortBlocksExhausted (True: selected pods wait for a
	// source-port block, their pool being exhausted (PoolExhausted) or portBlocks full
	// (ListFull); Unknown WriteFailed: the status writer's update of portBlocks failed).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Nodes is, per node whose agent applied this policy, the metadata.generation it applied,
	// the node's pods that need a port block (pods) and the egress IPs it declines to serve
	// (declined).
	// +optional
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=5000
	Nodes []NodeStatus `json:"nodes,omitempty"`

	// PortBlocks are the source-port blocks of the selected pods, one per (pod, egress IP),
	// unique per egress IP: the pod's node maps its TCP and UDP source ports into its block,
	// so every gateway of the egress IP sees ports no other pod uses and keeps them (sessions
	// survive a failover; two pods using the same source port to one server stay distinct).
	// Written by the policy's status writer only (update with resourceVersion, conflicts
	// retried), from the pods the nodes list (nodes[].pods); a pod keeps its block while it
	// exists, also when the policy no longer selects it; a block whose pod is gone keeps its
	// entry with releasedAt and is not given to another pod before the quarantine
	// (--egress-port-quarantine, 2 x MSL) has passed. Pods beyond the list's limit (MaxItems,
	// quarantined entries included) wait (condition PortBlocksExhausted, reason ListFull).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	PortBlocks []PortBlock `json:"portBlocks,omitempty"`
}

// MaxPortBlocks is the most entries EgressGatewayStatus.PortBlocks may hold: the value of its
// +kubebuilder:validation:MaxItems marker (a marker takes a literal; keep the two equal, which
// agent's TestMaxPortBlocksIsTheCRDLimit checks against deploy/crds). The status writer
// allocates no block beyond it (an update the API server would refuse).
const MaxPortBlocks = 4096

// PortBlock is the source-port block of one pod for one egress IP.
type PortBlock struct {
	// EgressIP is one of spec.egressIPs.
	// +required
	// +kubebuilder:validation:MaxLength=45
	EgressIP string `json:"egressIP"`
	// Pod is the pod's namespace/name.
	// +required
	// +kubebuilder:validation:MaxLength=317
	Pod string `json:"pod"`
	// PodUID is the pod's metadata.uid (a pod re-created under the same name gets a new block).
	// +required
	// +kubebuilder:validation:MaxLength=64
	PodUID string `json:"podUID"`
	// First is the block's first port; the block is First..First+Size-1, aligned to Size.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	First int32 `json:"first"`
	// Size is the number of ports, a power of two.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32768
	Size int32 `json:"size"`
	// ReleasedAt is set when the pod is gone (deleted, or its node gone; a pod the policy no
	// longer selects keeps its block while it exists: its open connections still use it): the
	// block is quarantined from then on and freed after the quarantine.
	// +optional
	ReleasedAt *metav1.Time `json:"releasedAt,omitempty"`
}

// PodPortRequest names one local pod that a node's agent needs a port block for.
type PodPortRequest struct {
	// Pod is the pod's namespace/name.
	// +required
	// +kubebuilder:validation:MaxLength=317
	Pod string `json:"pod"`
	// PodUID is the pod's metadata.uid.
	// +required
	// +kubebuilder:validation:MaxLength=64
	PodUID string `json:"podUID"`
	// EgressIP is the egress IP the pod uses (one per family).
	// +required
	// +kubebuilder:validation:MaxLength=45
	EgressIP string `json:"egressIP"`
}

// ActiveGateway is the gateway node of one egress IP.
type ActiveGateway struct {
	// EgressIP is one of spec.egressIPs.
	// +required
	// +kubebuilder:validation:MaxLength=45
	EgressIP string `json:"egressIP"`
	// Node is the name of the node that holds the egress IP's Lease.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
}

// NodeStatus is what one node's agent applied.
type NodeStatus struct {
	// Node is the node's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// ObservedGeneration is the metadata.generation of the policy the node's flows implement.
	// +required
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration"`
	// Pods are the node's pods that this policy selects, with their egress IP, and those that
	// still hold a block of it (no longer selected, or using another egress IP now): the status
	// writer allocates and keeps their port blocks (portBlocks).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	Pods []PodPortRequest `json:"pods,omitempty"`
	// Declined are the egress IPs this node is eligible for but declines to serve, each with
	// why and what to do (e.g. an IPv6 egress IP inside an IPv6 subnet of one of the node's
	// secondary NICs: docs/egress.md "Secondary NICs"). The node does not run for them; the
	// other eligible nodes do.
	// +optional
	// +listType=map
	// +listMapKey=egressIP
	// +kubebuilder:validation:MaxItems=64
	Declined []NodeDecline `json:"declined,omitempty"`
}

// NodeDecline is one egress IP a node declines to serve.
type NodeDecline struct {
	// EgressIP is one of spec.egressIPs.
	// +required
	// +kubebuilder:validation:MaxLength=45
	EgressIP string `json:"egressIP"`
	// Message says why and what to do.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// Condition types and reasons of EgressGatewayStatus.Conditions.
const (
	// ConditionReady is True when every egress IP that is not refused has an active gateway.
	ConditionReady = "Ready"
	// ConditionConflict is True when at least one egress IP is refused.
	ConditionConflict = "Conflict"

	// ReasonGatewaysActive: Ready=True.
	ReasonGatewaysActive = "GatewaysActive"
	// ReasonNoEligibleNode: Ready=False, no Ready node matches gatewayNodeSelector.
	ReasonNoEligibleNode = "NoEligibleNode"
	// ReasonElecting: Ready=False, eligible nodes exist but a Lease has no holder yet.
	ReasonElecting = "Electing"
	// ReasonInvalidSpec: Ready=False, a selector or CIDR of the spec cannot be used.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonNodeAddress: Conflict=True, an egress IP is a Node's address.
	ReasonNodeAddress = "NodeAddress"
	// ReasonLoadBalancerIP: Conflict=True, an egress IP is a Service's LoadBalancer IP or
	// externalIP.
	ReasonLoadBalancerIP = "LoadBalancerIP"
	// ReasonEgressIPInUse: Conflict=True, an egress IP belongs to an older EgressGateway.
	ReasonEgressIPInUse = "EgressIPInUse"
	// ReasonUnsupported: Conflict=True, an egress IP is IPv6 (not programmed yet).
	ReasonUnsupported = "Unsupported"
	// ReasonNoConflict: Conflict=False.
	ReasonNoConflict = "NoConflict"

	// ConditionPortBlocksExhausted is True when a selected pod has no port block because its
	// egress IP's port pool is full (its TCP and UDP egress is dropped until one is freed).
	ConditionPortBlocksExhausted = "PortBlocksExhausted"
	// ReasonPoolExhausted: PortBlocksExhausted=True.
	ReasonPoolExhausted = "PoolExhausted"
	// ReasonBlocksAllocated: PortBlocksExhausted=False, every listed pod has its block.
	ReasonBlocksAllocated = "BlocksAllocated"
	// ReasonPortBlocksWriteFailed: PortBlocksExhausted=Unknown, the status writer's update of
	// status.portBlocks failed (the message has the error); retried at its next sync.
	ReasonPortBlocksWriteFailed = "WriteFailed"
	// ReasonPortBlocksListFull: PortBlocksExhausted=True, status.portBlocks holds MaxPortBlocks
	// entries (the CRD's limit) and pods wait although their pools may have free blocks.
	ReasonPortBlocksListFull = "ListFull"
)

// EgressGatewayList is a list of EgressGateways.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type EgressGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the EgressGateways.
	Items []EgressGateway `json:"items"`
}
