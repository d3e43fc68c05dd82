// Package v1alpha1 is the ovs-srcip.io/v1alpha1 API: the cluster-scoped EgressGateway policy.
// Its CRD (deploy/crds/crd-egressgateway.yaml), deep copies, clientset, listers and informers
// (client/) are generated from these types by hack/update-codegen.sh; see docs/egress.md.
//
// +k8s:deepcopy-gen=package
// +groupName=ovs-srcip.io
// +groupGoName=OvsSrcip
package v1alpha1
