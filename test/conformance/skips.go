package main

// A listed test: a regular expression over the full spec name (the ginkgo container texts and the
// leaf text joined by spaces, e.g. "[sig-network] Services should serve a basic endpoint from
// pods [Conformance]") and why it is listed. docs/conformance.md shows the same tables.
type listed struct {
	Pattern, Reason string
}

// skips are the [sig-network] tests that cannot run on this machine or against this kind of lab,
// passed to ginkgo --skip. Every other [sig-network] test runs.
var skips = []listed{
	{`\[Feature:NetworkPolicy\]|NetworkPolicy|Netpol`,
		"NetworkPolicy: ovs-srcip does not implement NetworkPolicy (neither does the reference bridge CNI); a cluster that needs it runs a policy engine beside it"},
	{`\[Disruptive\]`,
		"disruptive tests reboot or partition nodes, or restart kube-proxy/kubelet through SSH: the lab's nodes have no SSH and no reboot"},
	{`\[Feature:Ingress\]|\[Feature:NEG\]|\[Feature:kubemci\]|\[Feature:IngressScale\]|IngressClass.*\[Feature|\[Feature:GCE`,
		"Ingress controllers and cloud load balancers (GCE, NEG, kubemci): no ingress controller and no cloud provider"},
	{`LoadBalancers|\[Feature:LoadBalancer\]|\[Feature:ServiceLoadBalancer|ESIPP`,
		"type=LoadBalancer provisioning by a cloud provider (these tests wait for the cloud to assign an ingress IP); LoadBalancer IPs themselves are tested by test/cluster and, with MetalLB, by the bare-metal issue"},
	{`\[Feature:IPv6DualStack\]|\[Feature:Networking-IPv6\]|\[Feature:Networking-DualStack\]|\[LinuxOnly\].*IPv6|IPv6`,
		"IPv6 and dual-stack: ovs-srcip is IPv4-only until the dual-stack issue lands (the lab has no IPv6)"},
	{`\[Feature:Networking-Performance\]|\[Feature:PerformanceDNS\]|\[Feature:NetworkingPerformance\]|iperf2`,
		"performance tests: minutes of iperf on a 2-core machine prove nothing about the pipeline (make bench measures it)"},
	{`\[Feature:ServiceCIDRs\]|\[Feature:Topology|\[Feature:Traffic|\[Feature:ProxyTerminatingEndpoints\]|\[Feature:SCTPConnectivity\]|\[Feature:Example\]|\[Feature:Networking-Internet\]|\[Feature:ExternalName`,
		"other [Feature:...] tests, not run by default upstream: they need an alpha/beta feature gate, an outside network (Internet) or a cloud"},
	{`\[Flaky\]`, "marked flaky upstream"},
}

// knownDiffs are tests that pass in mode plain and fail in mode all for a reason another issue
// owns; make conformance reports them but does not fail on them.
var knownDiffs = []listed{
	{`Services should have session affinity work for NodePort service|Services should be able to switch session affinity for NodePort service|Services should have session affinity timeout work for NodePort service`,
		"sessionAffinity: ClientIP on the preserved path is the Service-semantics issue's (#20): the NodePort is served by a select group that hashes the 5-tuple"},
}
