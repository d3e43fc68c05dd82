package main

import "slices"

// A listed test: a regular expression over the full spec name (the ginkgo container texts and the
// leaf text joined by spaces, e.g. "[sig-network] Services should serve a basic endpoint from
// pods [Conformance]") and why it is listed. docs/conformance.md shows the same tables.
type listed struct {
	Pattern, Reason string
}

// skips are the [sig-network] tests (249 in e2e.test v1.37.2) that cannot run on this machine or
// against this kind of lab, passed to ginkgo --skip. Every other [sig-network] test runs; those
// that need a provider (gce, aws) or more zones than the lab has skip themselves and are counted
// as skipped.
var skips = []listed{
	{`\[Feature:NetworkPolicy\]`,
		"NetworkPolicy (49 tests): ovs-srcip does not implement NetworkPolicy, nor does the reference bridge CNI; a cluster that needs it runs a policy engine beside ours"},
	{`\[Feature:LoadBalancer\]`,
		"type=LoadBalancer provisioned by a cloud provider (17 tests): they wait for a cloud to assign the ingress IP; LoadBalancer IPs written by hand are tested in test/cluster, MetalLB's by the bare-metal issue (#24)"},
	{`\[Feature:SCTPConnectivity\]`,
		"SCTP traffic (9 tests): this machine's kernel has no SCTP (socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP) is EPROTONOSUPPORT) and modules cannot be loaded; the two SCTP tests without traffic (a Service, a hostPort) run"},
	{`\[Feature:Networking-IPv4\]|\[Feature:Networking-IPv6\]|\[Feature:Networking-DNS\]|DNS configMap nameserver Forward PTR lookup`,
		"the Internet (4 tests): they reach 8.8.8.8, 2001:4860:4860::8888 and google.com, or resolve 8.8.8.8's PTR record through the cluster's upstream resolver; the lab never sends a packet off this machine (on a dual-stack lab the IPv6 one fails in every mode, kube-proxy alone included, with \"nc: connect to 2001:4860:4860::8888 port 53 (tcp) failed: Network is unreachable\": the lab router has no route there)"},
	{`\[Feature:LocalhostNodePorts\]|\[Feature:KubeProxyNFAcct\]`,
		"NodePorts on 127.0.0.1 (4 tests): a kube-proxy iptables-mode feature; the lab runs kube-proxy in nftables mode, which does not serve localhost NodePorts"},
	{`\[Feature:PerformanceDNS\]|\[Feature:Networking-Performance\]`,
		"performance (2 tests): iperf2 and DNS at scale on 2 cores prove nothing about the pipeline; make bench measures it"},
	{`\[Disruptive\]`,
		"disruptive (3 tests): they restart kube-proxy or the API server through SSH or delete nftables rules on every node; the lab's nodes have no SSH"},
}

// ipv4OnlySkip is listed on an IPv4-only lab (conformance-run without -dual-stack); a dual-stack
// lab (-dual-stack: cluster.Config.DualStack) runs these tests, but for the SCTP one (listed
// above). The 24th IPv6 test, [Feature:Networking-IPv6], needs the Internet (listed above).
var ipv4OnlySkip = listed{`\[Feature:IPv6DualStack\]`,
	"dual-stack (23 tests): the lab is IPv4-only (no -dual-stack): its nodes, pods and Service CIDR have no IPv6; with -dual-stack they run"}

// skipList is the skip list of a lab: skips, plus ipv4OnlySkip unless the lab is dual-stack.
func skipList(dualStack bool) []listed {
	if dualStack {
		return skips
	}
	return append(slices.Clone(skips), ipv4OnlySkip)
}

// knownDiffs are tests that may pass in mode plain and fail in mode all for a reason another
// issue owns; make conformance reports them but does not fail on them. None is listed: under
// --preserve-source-ip=all a Service with sessionAffinity: ClientIP and one without endpoints are
// on the preserved path (docs/pipeline.md, "Session affinity" and "No endpoints"), and the
// upstream affinity, timeout and "rejected" tests pass there as in mode plain.
var knownDiffs = []listed{}
