package lab

import (
	"fmt"
	"os/exec"
	"strings"
)

// Program is an external program the lab, the tests or `make` execute, with the Debian 12
// package that installs it. hack/deps.sh installs the same list (TestDepsInstallsEveryProgram
// keeps the two in step).
type Program struct{ Name, DebianPackage string }

// LabPrograms are the programs the lab, the agents it runs and the tests on it execute:
// namespaces, links and routes (ip), sysctls, checksum offload (ethtool, through sh), each node's
// Open vSwitch (ovsdb-tool, ovsdb-server, ovs-vswitchd, ovs-vsctl; ovs-ofctl and ovs-appctl also
// from the agent and srcipctl), captures (tcpdump, test/e2e), long-lived connections and raw
// segments of test/e2e/entry_test.go (python3), each node's masquerade and test/e2e's ClusterIP
// DNAT (nft; also srcip-agent node-setup's nftables table, through knftables), reachability
// (ping, TestLabUp), a placeholder process (sleep, TestCleanup) and test/nodesetup, which runs
// node-setup in a node namespace (nsenter).
var LabPrograms = []Program{
	{"ip", "iproute2"},
	{"sh", "dash"},
	{"sleep", "coreutils"},
	{"sysctl", "procps"},
	{"ethtool", "ethtool"},
	{"ping", "iputils-ping"},
	{"tcpdump", "tcpdump"},
	{"python3", "python3"},
	{"nft", "nftables"},
	{"ovsdb-tool", "openvswitch-common"},
	{"ovsdb-server", "openvswitch-common"},
	{"ovs-appctl", "openvswitch-common"},
	{"ovs-ofctl", "openvswitch-common"},
	{"ovs-vsctl", "openvswitch-switch"},
	{"ovs-vswitchd", "openvswitch-switch"},
	{"nsenter", "util-linux"},
}

// ControlPlanePrograms are what hack/controlplane/{build,start,stop}.sh execute besides coreutils
// and go (test/kube runs them): the cache lock, the test CA, readiness probes, detached starts.
var ControlPlanePrograms = []Program{
	{"bash", "bash"},
	{"flock", "util-linux"},
	{"setsid", "util-linux"},
	{"openssl", "openssl"},
	{"curl", "curl"},
	{"awk", "mawk"},
	{"grep", "grep"},
	{"sed", "sed"},
	{"find", "findutils"},
	{"sha256sum", "coreutils"},
	{"od", "coreutils"},
	{"base64", "coreutils"},
}

// ClusterPrograms are what the real-kubelet lab (test/cluster) and hack/cluster/build.sh execute
// besides the lab's (nft also for kube-proxy in nftables mode, nsenter also to enter a node's
// mount namespace) and the control plane's: runc (containerd's runtime), unshare and mount (each
// node's private mount namespace), pivot_root (its holder in a chroot); kube-proxy in iptables
// mode (test/cluster Config.ProxyMode) runs Debian's iptables (its nf_tables backend by default):
// iptables-save and iptables-restore, and ip6tables for its dual-stack probe.
var ClusterPrograms = []Program{
	{"runc", "runc"},
	{"iptables", "iptables"},
	{"iptables-save", "iptables"},
	{"iptables-restore", "iptables"},
	{"ip6tables", "iptables"},
	{"ip6tables-save", "iptables"},
	{"ip6tables-restore", "iptables"},
	{"unshare", "util-linux"},
	{"pivot_root", "util-linux"},
	{"mount", "mount"},
}

// RouterPrograms are what test/cluster/frr runs in the lab's router netns to play the upstream BGP
// router of MetalLB's BGP mode (issue 24): FRR's zebra and bgpd, each with a pathspace of its own
// (-N), and vtysh to read their state as JSON. Debian installs the daemons outside PATH, hence the
// absolute names. hack/deps.sh keeps the package's own service from starting (policy-rc.d). The
// BGP tests also read the router's kernel counters (nstat: strict rp_filter drops).
var RouterPrograms = []Program{
	{"/usr/lib/frr/zebra", "frr"},
	{"/usr/lib/frr/bgpd", "frr"},
	{"vtysh", "frr"},
	{"nstat", "iproute2"},
}

// ConformancePrograms are what hack/conformance/build.sh copies, with their shared libraries, into
// the e2e images (agnhost, busybox, nginx, glibc-dns-testing, distroless-iptables) and what it
// executes besides the control plane's: the images' shell and tools (busybox-static, GNU wget,
// curl, OpenBSD nc, dig/nslookup/host, ss, getent, bash, iperf, socat, conntrack, iptables, nft,
// nginx), the Debian package versions in its cache key (dpkg-query), and the smoke test that runs
// them in an unpacked image (tar, chroot).
var ConformancePrograms = []Program{
	{"busybox", "busybox-static"},
	{"wget", "wget"},
	{"nc", "netcat-openbsd"},
	{"dig", "bind9-dnsutils"},
	{"nslookup", "bind9-dnsutils"},
	{"host", "bind9-host"},
	{"ss", "iproute2"},
	{"getent", "libc-bin"},
	{"iperf", "iperf"},
	{"socat", "socat"},
	{"conntrack", "conntrack"},
	{"iptables", "iptables"},
	{"nginx", "nginx"},
	{"dpkg-query", "dpkg"},
	{"tar", "tar"},
	{"chroot", "coreutils"},
}

// MakePrograms are what the Makefile itself executes besides go: `make vet` lists the Go files
// with git.
var MakePrograms = []Program{
	{"git", "git"},
}

// CheckPrograms returns an error naming every missing program with its Debian package.
func CheckPrograms(progs []Program) error {
	var missing, pkgs []string
	seen := map[string]bool{}
	for _, p := range progs {
		if _, err := exec.LookPath(p.Name); err == nil {
			continue
		}
		missing = append(missing, fmt.Sprintf("%s (Debian package %s)", p.Name, p.DebianPackage))
		if !seen[p.DebianPackage] {
			seen[p.DebianPackage] = true
			pkgs = append(pkgs, p.DebianPackage)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("missing programs: %s; install them with hack/deps.sh (as root) or apt-get install %s",
		strings.Join(missing, ", "), strings.Join(pkgs, " "))
}
