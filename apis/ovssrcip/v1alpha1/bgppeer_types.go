package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BGPPeer is a BGP router that the selected nodes' agents dial to announce their pod CIDRs
// (spec.podCIDRs), for routed pods (docs/bgp.md, docs/routed-pods.md). Cluster-scoped.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=bgpp
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Peer",type=string,JSONPath=`.spec.peerAddress`
// +kubebuilder:printcolumn:name="Peer ASN",type=integer,JSONPath=`.spec.peerASN`
// +kubebuilder:printcolumn:name="My ASN",type=integer,JSONPath=`.spec.myASN`
// +kubebuilder:printcolumn:name="Sessions",type=string,description="Each node's session state.",JSONPath=`.status.nodes[*].sessionState`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the peer and the nodes that dial it.
	// +required
	Spec BGPPeerSpec `json:"spec"`
	// Status is written by the agents, one entry per node.
	// +optional
	Status BGPPeerStatus `json:"status,omitempty"`
}

// BGPPeerSpec is one BGP peer (RFC 4271) of the selected nodes.
type BGPPeerSpec struct {
	// PeerAddress is the peer's address; its family is the session's only address family: an
	// IPv4 peer learns the node's IPv4 pod CIDR, an IPv6 peer its IPv6 pod CIDR.
	// +required
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).isGlobalUnicast()",message="must be a unicast IPv4 or IPv6 address"
	PeerAddress string `json:"peerAddress"`
	// PeerASN is the peer's AS number.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	PeerASN int64 `json:"peerASN"`
	// MyASN is the nodes' AS number on the session.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	MyASN int64 `json:"myASN"`
	// PeerPort is the peer's TCP port; default 179. The nodes dial; they listen on no port.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	PeerPort int32 `json:"peerPort,omitempty"`
	// HoldTime is the proposed hold time (RFC 4271 4.2), whole seconds from 3s; default 90s. The
	// keepalive interval is a third of it.
	// +optional
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`
	// NodeSelector selects the nodes that dial the peer; absent or {}: every node.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// PasswordSecretRef names the TCP-MD5 (RFC 2385) key: a key of a Secret in the agent's
	// namespace. A node that cannot read it declines the peer (it does not dial unsigned).
	// +optional
	PasswordSecretRef *SecretKeyRef `json:"passwordSecretRef,omitempty"`
}

// SecretKeyRef is one key of a Secret in the agent's namespace.
type SecretKeyRef struct {
	// Name is the Secret's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key is the key in the Secret's data; default password.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// BGPPeerStatus is written by the agents (status subresource).
type BGPPeerStatus struct {
	// Nodes is, per node the peer selects, its session and what it announces, or why it
	// declines the peer.
	// +optional
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=5000
	Nodes []BGPPeerNodeStatus `json:"nodes,omitempty"`
}

// BGPPeerNodeStatus is one node's session with the peer.
type BGPPeerNodeStatus struct {
	// Node is the node's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// ObservedGeneration is the metadata.generation the node applied.
	// +required
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration"`
	// SessionState is the RFC 4271 8.2.2 state (Idle, Connect, Active, OpenSent, OpenConfirm,
	// Established), or Declined (message says why).
	// +required
	// +kubebuilder:validation:MaxLength=32
	SessionState string `json:"sessionState"`
	// Advertised are the prefixes the node announces on the session.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=64
	Advertised []string `json:"advertised,omitempty"`
	// Message says why a node declines the peer and what to do.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// SessionDeclined is BGPPeerNodeStatus.SessionState of a declined peer.
const SessionDeclined = "Declined"

// BGPPeerList is a list of BGPPeers.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type BGPPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the BGPPeers.
	Items []BGPPeer `json:"items"`
}
