// Package cluster turns the lab (test/lab: one netns per node with its own Open vSwitch, a router,
// clients) into a real Kubernetes cluster: each emulated node runs containerd v2 (with Debian's
// runc), a kubelet and kube-proxy (nftables mode, or kubeadm's default iptables mode:
// Config.ProxyMode), all in a private mount namespace entered into the node's netns; the control
// plane (test/kube: etcd, kube-apiserver, kube-controller-manager allocating node pod CIDRs) gets
// kube-scheduler. Pods are created by the kubelet from real
// Deployments, from images written locally from the repo's own static binaries.
//
// Recipe, figures and every pitfall: ../shared/spikes/kubelet/FINDINGS.md and
// /work/shared/design/LAB-FACTS.md ("A real kubelet per emulated node"). In short, per node:
//
//   - a holder process (`nsenter --net=<node netns> unshare -m --propagation private sleep`) owns
//     the node's mount namespace; every daemon of the node enters it and the node netns with
//     `nsenter -t <holder> -m -n` (not `ip netns exec`, which remounts /sys and hides cgroups);
//   - in that mount namespace, per-node directories are bind-mounted over the paths that are
//     hard-wired in kubelet, containerd and the CNI libraries (/var/lib/kubelet, /var/lib/cni,
//     /run/containerd, /var/log, /etc/cni/net.d, /opt/cni/bin), the node's OVS run dir over
//     /var/run/openvswitch, and files with the values kubelet wants over the host-global sysctls it
//     would otherwise write (kernel.panic, kernel.panic_on_oops, vm.overcommit_memory, ...);
//   - containerd runs with restrict_oom_score_adj (no CAP_SYS_RESOURCE here), kubelet with
//     failCgroupV1: false and its own cgroupRoot (created beforehand in every v1 hierarchy);
//   - kube-proxy never writes the host-global nf_conntrack_max (maxPerCore 0); its TCP timeouts
//     are per netns, so it sets them in the node netns as on a real node.
//
// The API server binds to the root end of a veth between the root netns and the lab router
// (172.31.X.1/30); the router masquerades the nodes' connections to it. The root netns routes the
// node underlay (UnderlayRouterCIDR, never the manifests labs' 192.0.2.0/24, which is this
// machine's own eth0 network) and the cluster's pod CIDR over that veth, after checking that
// neither overlaps a route the host has (Start refuses otherwise): the API server dials the
// kubelets, whose serving certificates the cluster CA signs, with a client certificate that the
// kubelets' webhook authentication and authorization accept (kubectl exec, logs, attach,
// port-forward), and reaches pods (pods/proxy). The lease endpoint reconciler keeps the
// "kubernetes" Service pointing at the API server.
//
// Close stops everything by pid (kubelet, kube-proxy, agents, containers by cgroup, shims,
// containerd, the holder), removes the cgroups, the control plane and the lab. CleanupStale
// removes what a crashed run left (cgroups of labs whose owner is gone; the lab's own netns and
// dirs through lab.CleanupStale).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/ovs-srcip/ovs-srcip/test/kube"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// CNI modes.
const (
	// CNIBridge is the reference bridge + host-local chain (pods on a Linux bridge cni0 in the
	// node netns, not on OVS): proves the kubelet/containerd bring-up alone.
	CNIBridge = "bridge"
	// CNISrcip is srcip-cni on br-int, installed by `srcip-agent node-setup`, which the harness
	// runs on each node before it starts the agent there.
	CNISrcip = "srcip"
	// CNIDaemonSet leaves node-setup, the agent and srcip-cni to the deploy/ DaemonSet, which the
	// test applies: Start returns with the nodes registered but NotReady, the release image
	// (ReleaseImage: hack/image.sh, as make image writes it, Config.ReleaseVersion) imported on
	// every node, ServiceAccount tokens on and the "kubernetes" Service
	// pointing at the API server.
	CNIDaemonSet = "daemonset"
	// CNIChained is srcip-cni in chained mode after the reference bridge + host-local (pods on
	// cni0 with addresses from ChainedSubnet, masqueraded by the bridge plugin): node-setup and
	// the agent run as for CNISrcip, then the harness replaces node-setup's conflist with
	// ChainedConflist (docs/egress.md#chained-mode).
	CNIChained = "chained"
)

// kube-proxy modes (Config.ProxyMode).
const (
	ProxyNFTables = "nftables"
	ProxyIPTables = "iptables"
)

// ChainedDestinations are the egressDestinations of ChainedConflist: the lab's client network.
const ChainedDestinations = "198.51.100.0/24"

// ChainedDestinations6 are the IPv6 egressDestinations of ChainedConflist on a dual-stack
// cluster: the client network's IPv6 subnet (ClientSubnet6).
const ChainedDestinations6 = ClientSubnet6

// ChainedSubnet is the main CNI's pod subnet of a node in CNIChained mode: 10.88.N.0/24 for the
// node whose pod CIDR is 10.244.N.0/24 (outside the cluster's pod CIDRs, which srcip-gw0 holds).
func ChainedSubnet(podCIDR netip.Prefix) netip.Prefix {
	b := podCIDR.Addr().As4()
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 88, b[2], 0}), 24)
}

// ChainedSubnet6 is the main CNI's IPv6 pod subnet of a node in CNIChained mode on a dual-stack
// cluster: 2001:db8:88:N::/64 for the node whose pod CIDR is 10.244.N.0/24 (outside the
// cluster's IPv6 pod CIDRs, ClusterCIDR6).
func ChainedSubnet6(podCIDR netip.Prefix) netip.Prefix {
	b := [16]byte{0x20, 0x01, 0x0d, 0xb8, 0x00, 0x88, 0x00, podCIDR.Addr().As4()[2]}
	return netip.PrefixFrom(netip.AddrFrom16(b), 64)
}

// ChainedConflist is the conflist of CNIChained for a node with pod CIDR podCIDR: the bridge
// plugin with host-local as the main CNI, then srcip-cni in chained mode. dualStack adds the
// IPv6 range ChainedSubnet6 (and its default route) to host-local and ChainedDestinations6 to
// the egress destinations.
func ChainedConflist(podCIDR netip.Prefix, dualStack bool) string {
	ranges := `[{"subnet": "` + ChainedSubnet(podCIDR).String() + `"}]`
	routes := `{"dst": "0.0.0.0/0"}`
	dsts := `"` + ChainedDestinations + `"`
	if dualStack {
		ranges += `, [{"subnet": "` + ChainedSubnet6(podCIDR).String() + `"}]`
		routes += `, {"dst": "::/0"}`
		dsts += `, "` + ChainedDestinations6 + `"`
	}
	return `{"cniVersion": "1.0.0", "name": "lab-chained", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "ipMasqBackend": "nftables", "mtu": 1400,
   "ipam": {"type": "host-local", "ranges": [` + ranges + `],
            "routes": [` + routes + `]}},
  {"type": "srcip-cni", "mode": "chained", "mtu": 1400, "egressDestinations": [` + dsts + `]}
]}
`
}

// Image references the nodes import (imagePullPolicy: Never).
const (
	PauseImage = "localhost/ovs-srcip/pause:test"
	EchoImage  = "localhost/ovs-srcip/echo:test"
)

// Config describes a cluster.
type Config struct {
	// Lab is the lab's configuration; its ManifestsDir holds the Node manifests (names,
	// InternalIPs; their podCIDRs only name the lab's, the real ones come from
	// kube-controller-manager) and no pods.
	Lab lab.Config
	// BinDir is hack/cluster/build.sh's output; default $SRCIP_CLUSTER_BIN, else build.sh runs
	// (a cache hit after `make cluster`).
	BinDir string
	// AgentBin, EchoBin, PauseBin and CNIBin are the repo's binaries (srcip-agent, test/echo,
	// test/pause, srcip-cni); PortmapBin is the reference portmap plugin built from the repo's
	// module (its tool dependency, the version node-setup's image ships), which node-setup
	// installs and chains after srcip-cni. CNIBridge and CNIDaemonSet need no AgentBin, CNIBin
	// and PortmapBin (CNIDaemonSet: the release image carries them).
	AgentBin, EchoBin, PauseBin, CNIBin, PortmapBin string
	// CNI is CNIBridge or CNISrcip (default).
	CNI string
	// ClusterCIDR is kube-controller-manager's --cluster-cidr; default 10.244.0.0/16 (/24 per node).
	ClusterCIDR string
	// CRDs are CustomResourceDefinition manifests (files) applied before the nodes start (e.g.
	// deploy/crds/crd-egressgateway.yaml, so the agents find EgressGateways served from the start).
	CRDs []string
	// ProxyMode is kube-proxy's mode: ProxyNFTables (default) or ProxyIPTables (kubeadm's
	// default; iptables through its nf_tables backend, Debian's default, in the node netns).
	ProxyMode string
	// AgentArgs are appended to each agent's flags.
	AgentArgs []string
	// Conformance makes the cluster what Kubernetes' e2e suite expects of one (make conformance,
	// docs/conformance.md): kube-controller-manager runs every controller and the ServiceAccount
	// admission plugin is on, the kubelets point pods at CoreDNS (clusterDNS 10.96.0.10,
	// cluster.local; DeployCoreDNS deploys it) and at a lab resolv.conf naming the lab router, and
	// every docker-archive tarball in Images is imported into each node's containerd.
	Conformance bool
	// ReleaseVersion is the tag of the release image CNIDaemonSet imports (hack/image.sh -v);
	// default the repository's VERSION (what deploy/ is pinned to).
	ReleaseVersion string
	// Images are docker-archive tarballs imported into every node besides the lab's own
	// (hack/conformance/build.sh's images/*.tar: the e2e images under their exact names).
	Images []string
	// DualStack makes the cluster dual-stack (issue 22; default IPv4 only, and then nothing below
	// happens): the Service CIDR gets ServiceCIDR6 as second range, kube-controller-manager
	// allocates every node an IPv6 pod CIDR (/64) from ClusterCIDR6 beside the IPv4 one, the
	// kubelets register an IPv6 InternalIP (--node-ip v4,v6), kube-proxy proxies both families,
	// node-setup gets both cluster CIDRs; the lab's underlay segment, client segment and br-ex get
	// IPv6 addresses from 2001:db8::/32 (setupIPv6; the underlay stays IPv4). The test binary
	// turns it on with SRCIP_LAB_DUAL_STACK=1.
	DualStack bool
	// ClusterCIDR6 is the IPv6 cluster CIDR of DualStack; default DefaultClusterCIDR6.
	ClusterCIDR6 string
	// ServiceCIDR6 is the IPv6 Service CIDR of DualStack; default DefaultServiceCIDR6.
	ServiceCIDR6 string
	// Logf receives progress lines (t.Logf).
	Logf func(format string, args ...any)
}

// Cluster is a running real-kubelet lab.
type Cluster struct {
	*lab.Lab
	CP *kube.ControlPlane
	// Client talks to the API server as admin.
	Client kubernetes.Interface
	// Kubeconfig is the admin kubeconfig (the API server's link address), used by every node
	// component.
	Kubeconfig string
	// BinDir is where kubelet, containerd, ... come from; BuildTime how long build.sh took.
	BinDir    string
	BuildTime time.Duration
	// KNodes are the nodes' Kubernetes parts, by node name.
	KNodes map[string]*KNode
	// NodeReady is how long each node took from its holder's start to Ready.
	NodeReady map[string]time.Duration

	cfg       Config
	dir       string
	link      string // root end of the root<->router veth
	linkIP    netip.Addr
	scheduler *proc
	images    []string
	closeOnce sync.Once
	closeErr  error
}

// KNode is one node's Kubernetes parts.
type KNode struct {
	*lab.Node
	// Dir holds the node's containerd, kubelet and kube-proxy state, configs and logs.
	Dir string
	// CgroupRoot is the kubelet's cgroupRoot (a directory in every v1 hierarchy).
	CgroupRoot string
	// PodCIDR is the node's IPv4 entry of spec.podCIDRs, allocated by kube-controller-manager.
	PodCIDR netip.Prefix
	// IP6 and PodCIDR6 are the node's IPv6 InternalIP (on br-ex beside IP: IPv6Of) and the IPv6
	// entry of spec.podCIDRs; invalid unless Config.DualStack.
	IP6      netip.Addr
	PodCIDR6 netip.Prefix
	// Zone is the node's label topology.kubernetes.io/zone (ZoneOf): every node is a zone of its
	// own, so that EndpointSlices carry zones and topology hints have something to allocate (the
	// e2e Topology Hints and Traffic Distribution tests skip themselves with fewer than 3 zones).
	Zone string

	c                                  *Cluster
	holder, containerd, kubelet, proxy *proc
	tlsCert, tlsKey                    string // kubelet serving certificate (servingCert)
	agent                              *proc
	mu                                 sync.Mutex
}

// ProxyMode is kube-proxy's mode on every node (ProxyNFTables or ProxyIPTables).
func (c *Cluster) ProxyMode() string { return c.cfg.ProxyMode }

// DualStack reports whether the cluster is dual-stack (Config.DualStack).
func (c *Cluster) DualStack() bool { return c.cfg.DualStack }

// ZoneOf is the zone of the lab node named node: "zone-" + node.
func ZoneOf(node string) string { return "zone-" + node }

func (c *Cluster) logf(format string, args ...any) {
	if c.cfg.Logf != nil {
		c.cfg.Logf(format, args...)
	}
}

// Start builds (or finds in the cache) the node binaries, brings up the lab, the link to the
// control plane, the control plane with kube-scheduler, and on every node containerd, kubelet,
// kube-proxy and (CNISrcip) the node set-up and the agent; it returns once every Node is Ready.
// On error everything already started is stopped.
func Start(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if err := lab.CheckPrograms(append(append(append([]lab.Program{}, lab.ClusterPrograms...), lab.ControlPlanePrograms...), lab.LabPrograms...)); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if cfg.CNI == "" {
		cfg.CNI = CNISrcip
	}
	if cfg.ClusterCIDR == "" {
		cfg.ClusterCIDR = "10.244.0.0/16"
	}
	switch cfg.ProxyMode {
	case "":
		cfg.ProxyMode = ProxyNFTables
	case ProxyNFTables, ProxyIPTables:
	default:
		return nil, fmt.Errorf("cluster: Config.ProxyMode %q: want %q or %q", cfg.ProxyMode, ProxyNFTables, ProxyIPTables)
	}
	if cfg.DualStack {
		if cfg.ClusterCIDR6 == "" {
			cfg.ClusterCIDR6 = DefaultClusterCIDR6
		}
		if cfg.ServiceCIDR6 == "" {
			cfg.ServiceCIDR6 = DefaultServiceCIDR6
		}
		for name, v := range map[string]string{"ClusterCIDR6": cfg.ClusterCIDR6, "ServiceCIDR6": cfg.ServiceCIDR6} {
			if p, err := netip.ParsePrefix(v); err != nil || !p.Addr().Is6() {
				return nil, fmt.Errorf("cluster: Config.%s %q: not an IPv6 prefix", name, v)
			}
		}
	}
	if cfg.Lab.RouterCIDR == "" {
		cfg.Lab.RouterCIDR = UnderlayRouterCIDR
	}
	for name, p := range map[string]*string{"EchoBin": &cfg.EchoBin, "PauseBin": &cfg.PauseBin, "AgentBin": &cfg.AgentBin, "CNIBin": &cfg.CNIBin,
		"PortmapBin": &cfg.PortmapBin} {
		if *p == "" {
			if (name == "AgentBin" || name == "CNIBin" || name == "PortmapBin") && (cfg.CNI == CNIBridge || cfg.CNI == CNIDaemonSet) {
				continue
			}
			return nil, fmt.Errorf("cluster: Config.%s is required", name)
		}
		if *p, err = filepath.Abs(*p); err != nil {
			return nil, err
		}
	}
	c = &Cluster{cfg: cfg, KNodes: map[string]*KNode{}, NodeReady: map[string]time.Duration{}}
	c.BinDir = cfg.BinDir
	if c.BinDir == "" {
		c.BinDir = os.Getenv("SRCIP_CLUSTER_BIN")
	}
	if c.BinDir == "" {
		t := time.Now()
		if c.BinDir, err = Build(ctx); err != nil {
			return nil, err
		}
		c.BuildTime = time.Since(t)
		c.logf("cluster: node binaries in %s (hack/cluster/build.sh %v)", c.BinDir, c.BuildTime.Round(time.Millisecond))
	}
	cfg.Lab.Logf = cfg.Logf
	if c.Lab, err = lab.New(cfg.Lab); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.LogTails(30))
			if cerr := c.Close(); cerr != nil {
				c.logf("cluster: cleanup after failed start: %v", cerr)
			}
			c = nil
		}
	}()
	c.dir = filepath.Join(c.Lab.Dir, "k8s")
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return c, err
	}
	if err := c.setupLink(); err != nil {
		return c, fmt.Errorf("cluster: link to the lab: %w", err)
	}
	if err := c.routeIntoLab(); err != nil {
		return c, fmt.Errorf("cluster: routes into the lab: %w", err)
	}
	if cfg.DualStack {
		if err := c.setupIPv6(); err != nil {
			return c, fmt.Errorf("cluster: IPv6 in the lab: %w", err)
		}
	}
	controllers := "endpointslice-controller,endpointslice-mirroring-controller,namespace-controller," +
		"garbage-collector-controller,deployment-controller,replicaset-controller,daemonset-controller," +
		"node-ipam-controller,node-lifecycle-controller"
	if cfg.CNI == CNIDaemonSet {
		controllers += ",serviceaccount-controller,root-ca-certificate-publisher-controller"
	}
	if cfg.Conformance {
		controllers = "*"
	}
	restore := c.serviceCIDREnv()
	c.CP, err = kube.Start(ctx, kube.Options{
		Dir:              filepath.Join(c.dir, "cp"),
		APIServerAddress: c.linkIP.String(),
		ClusterCIDR:      c.clusterCIDRs(),
		ServiceAccounts:  cfg.CNI == CNIDaemonSet || cfg.Conformance,
		Kubelets:         true,
		Controllers:      controllers,
		Logf:             cfg.Logf,
	})
	restore()
	if err != nil {
		return c, fmt.Errorf("cluster: %w", err)
	}
	c.Client, c.Kubeconfig = c.CP.Client, c.CP.Kubeconfig
	if c.scheduler, err = c.start("kube-scheduler", filepath.Join(c.dir, "kube-scheduler.log"),
		filepath.Join(c.BinDir, "kube-scheduler"), "--kubeconfig="+c.Kubeconfig, "--leader-elect=false",
		"--secure-port=0", "--v=2"); err != nil {
		return c, err
	}
	if err := c.writeImages(); err != nil {
		return c, err
	}
	for _, f := range cfg.CRDs {
		if err := c.applyCRD(ctx, f); err != nil {
			return c, err
		}
	}
	if cfg.CNI == CNISrcip || cfg.CNI == CNIChained {
		// What node-setup installs into each node's /opt/cni/bin (--cni-source-dir).
		src := filepath.Join(c.dir, "cni-src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return c, err
		}
		for dst, from := range map[string]string{"srcip-cni": cfg.CNIBin, "portmap": cfg.PortmapBin,
			"host-local": filepath.Join(c.BinDir, "cni", "host-local"), "loopback": filepath.Join(c.BinDir, "cni", "loopback")} {
			if err := copyFile(from, filepath.Join(src, dst)); err != nil {
				return c, err
			}
		}
	}
	for _, n := range c.Lab.Nodes {
		kn := &KNode{Node: n, c: c, Dir: filepath.Join(n.Dir, "k"),
			CgroupRoot: "/" + c.Lab.Prefix + "-" + n.Name, Zone: ZoneOf(n.Name)}
		if cfg.DualStack {
			kn.IP6 = IPv6Of(n.IP, NodeSubnet6)
		}
		c.KNodes[n.Name] = kn
	}
	var mu sync.Mutex
	if err := parallel(c.Lab.Nodes, func(n *lab.Node) error {
		t := time.Now()
		kn := c.KNodes[n.Name]
		if err := kn.up(ctx); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		d := time.Since(t)
		mu.Lock()
		c.NodeReady[n.Name] = d
		mu.Unlock()
		if cfg.CNI == CNIDaemonSet {
			c.logf("cluster: node %s registered %v after its start (pod CIDR %s)", n.Name, d.Round(time.Millisecond), kn.PodCIDR)
			return nil
		}
		if cfg.DualStack {
			c.logf("cluster: node %s Ready %v after its start (pod CIDRs %s %s, IPv6 InternalIP %s)", n.Name, d.Round(time.Millisecond),
				kn.PodCIDR, kn.PodCIDR6, kn.IP6)
			return nil
		}
		c.logf("cluster: node %s Ready %v after its start (pod CIDR %s)", n.Name, d.Round(time.Millisecond), kn.PodCIDR)
		return nil
	}); err != nil {
		return c, fmt.Errorf("cluster: %w", err)
	}
	return c, nil
}

// Build runs hack/cluster/build.sh (a cache hit after the first build) and returns its directory.
func Build(ctx context.Context) (string, error) {
	script, err := hackFile("cluster/build.sh")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %v\n%s", script, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// hackFile finds hack/<rel> above the working directory (tests run in test/cluster).
func hackFile(rel string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "hack", rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("hack/%s not found above %s", rel, wd)
		}
	}
}

// setupLink joins the root netns to the lab router with a veth (root end 172.31.X.1/30, router end
// .2) and masquerades the nodes' traffic to the root end in the router, so the root netns needs
// no route to the lab. X is derived from the lab prefix, moved on when the address is taken.
func (c *Cluster) setupLink() error {
	c.link = c.Lab.Prefix + "k"
	peer := c.Lab.Prefix + "kr"
	h := 0
	for _, ch := range c.Lab.Prefix {
		h = h*31 + int(ch)
	}
	out, err := c.run("ip", "-4", "-o", "addr", "show")
	if err != nil {
		return err
	}
	var base netip.Addr
	for i := 0; i < 64; i++ {
		x := (h + i) % 16384
		cand := netip.AddrFrom4([4]byte{172, 31, byte(x >> 6), byte(x&63) << 2})
		if !strings.Contains(out, " "+cand.Next().String()+"/") {
			base = cand
			break
		}
	}
	if !base.IsValid() {
		return errors.New("no free 172.31.0.0/16 /30")
	}
	c.linkIP = base.Next()
	routerIP := c.linkIP.Next()
	if _, err := c.run("ip", "link", "add", "name", c.link, "type", "veth", "peer", "name", peer, "netns", c.Lab.RouterNetns); err != nil {
		return err
	}
	if _, err := c.run("ip", "addr", "add", c.linkIP.String()+"/30", "dev", c.link); err != nil {
		return err
	}
	if _, err := c.run("ip", "link", "set", c.link, "up"); err != nil {
		return err
	}
	if _, err := c.run("ip", "-n", c.Lab.RouterNetns, "addr", "add", routerIP.String()+"/30", "dev", peer); err != nil {
		return err
	}
	if _, err := c.run("ip", "-n", c.Lab.RouterNetns, "link", "set", peer, "up"); err != nil {
		return err
	}
	rules := "table ip lab-link {\n chain post {\n  type nat hook postrouting priority 100; policy accept;\n" +
		"  oifname \"" + peer + "\" masquerade\n }\n}\n"
	if _, err := c.runIn(rules, "ip", "netns", "exec", c.Lab.RouterNetns, "nft", "-f", "-"); err != nil {
		return err
	}
	return nil
}

// writeImages writes the pause and echo images (docker-archive tarballs) the nodes import.
func (c *Cluster) writeImages() error {
	dir := filepath.Join(c.dir, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mk := filepath.Join(c.BinDir, "mkimage")
	for _, im := range []struct{ ref, bin, file string }{
		{PauseImage, c.cfg.PauseBin, "pause.tar"},
		{EchoImage, c.cfg.EchoBin, "echo.tar"},
	} {
		// Copy under the image's own base name: the entrypoint is /<base name>.
		out := filepath.Join(dir, im.file)
		if _, err := c.run(mk, "-ref", im.ref, "-out", out, im.bin); err != nil {
			return err
		}
		c.images = append(c.images, out)
	}
	c.images = append(c.images, c.cfg.Images...)
	if c.cfg.CNI != CNIDaemonSet {
		return nil
	}
	out, err := ReleaseImage(context.Background(), c.cfg.ReleaseVersion, dir)
	if err != nil {
		return err
	}
	c.images = append(c.images, out)
	return nil
}

// ReleaseImage runs hack/image.sh (make image) for version (empty: the VERSION file) into dir and
// returns the OCI image layout tarball of ghcr.io/ovs-srcip/srcip-agent:<version>, which
// KNode.ImportImage imports as `ctr -n k8s.io images import` does. The binaries are built with the
// version stamped (a Go build cache hit after the first).
func ReleaseImage(ctx context.Context, version, dir string) (string, error) {
	script, err := hackFile("image.sh")
	if err != nil {
		return "", err
	}
	return ImageFrom(ctx, script, version, dir)
}

// ImageFrom runs script (a hack/image.sh, possibly of another checkout of the repository, which
// builds that checkout) for version into dir with extra arguments (e.g. -l) and returns the
// tarball's path, as ReleaseImage does.
func ImageFrom(ctx context.Context, script, version, dir string, extra ...string) (string, error) {
	args := append([]string{"-o", dir}, extra...)
	if version != "" {
		args = append(args, "-v", version)
	}
	cmd := exec.CommandContext(ctx, script, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %v\n%s", script, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// WaitNodeReady waits until node's Ready condition is True.
func (c *Cluster) WaitNodeReady(ctx context.Context, node string, timeout time.Duration) (*corev1.Node, error) {
	var kn *corev1.Node
	err := lab.WaitFor(func() error {
		var err error
		kn, err = c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range kn.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s Ready=%s: %s", node, cond.Status, cond.Message)
			}
		}
		return fmt.Errorf("node %s: no Ready condition yet", node)
	}, timeout)
	return kn, err
}

// SaveLogs copies every log of the cluster (nodes' components and pods, control plane, OVS) to
// dir, which survives Close.
func (c *Cluster) SaveLogs(dir string) error {
	if _, err := c.run("cp", "-r", c.Lab.Dir, dir); err != nil {
		return err
	}
	// Only logs: drop state (images, containerd content, etcd data) that is large.
	_, err := c.run("find", dir, "-type", "f", "!", "-name", "*.log", "!", "-name", "*.yaml", "!", "-name", "*.conflist", "-delete")
	return err
}

// LogTails returns the last n lines of every node component's log.
func (c *Cluster) LogTails(n int) string {
	var b strings.Builder
	for _, node := range c.Lab.Nodes {
		kn := c.KNodes[node.Name]
		if kn == nil {
			continue
		}
		for _, f := range []string{"holder.log", "containerd.log", "kubelet.log", "kube-proxy.log", "agent.log"} {
			data, err := os.ReadFile(kn.path(f))
			if err != nil {
				continue
			}
			lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
			if len(lines) > n {
				lines = lines[len(lines)-n:]
			}
			fmt.Fprintf(&b, "==== %s %s (last %d lines)\n%s\n", kn.Name, f, n, strings.Join(lines, "\n"))
		}
	}
	if data, err := os.ReadFile(filepath.Join(c.dir, "kube-scheduler.log")); err == nil {
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(&b, "==== kube-scheduler (last %d lines)\n%s\n", n, strings.Join(lines, "\n"))
	}
	if c.CP != nil {
		b.WriteString(c.CP.LogTails(n))
	}
	return b.String()
}

// Close stops everything Start started, by pid, and removes cgroups, the control plane and the
// lab. Idempotent.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		t := time.Now()
		var errs []error
		var kns []*KNode
		for _, kn := range c.KNodes {
			kns = append(kns, kn)
		}
		if err := parallel(kns, func(kn *KNode) error { return kn.down() }); err != nil {
			errs = append(errs, err)
		}
		if err := c.scheduler.stop(c.logf, 10*time.Second); err != nil {
			errs = append(errs, err)
		}
		if c.CP != nil {
			if err := c.CP.Stop(); err != nil {
				errs = append(errs, err)
			}
		}
		if c.link != "" {
			_, _ = c.run("ip", "link", "del", c.link) // also goes with the router netns
		}
		if c.Lab != nil {
			if err := c.Lab.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		c.closeErr = errors.Join(errs...)
		c.logf("cluster: teardown took %v (err=%v)", time.Since(t).Round(time.Millisecond), c.closeErr)
	})
	return c.closeErr
}

func (c *Cluster) run(argv ...string) (string, error) { return c.runIn("", argv...) }

func (c *Cluster) runIn(stdin string, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t := time.Now()
	out, err := cmd.Output()
	status := "ok"
	if err != nil {
		status = err.Error()
	}
	c.logf("$ %s  [%v, %s]", strings.Join(argv, " "), time.Since(t).Round(time.Millisecond), status)
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func parallel[T any](items []T, f func(T) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(items))
	for i, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(it)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// proc is a long-running process the cluster started.
type proc struct {
	name string
	cmd  *exec.Cmd
	pid  int
	done chan struct{}
	err  error
}

func (c *Cluster) start(name, logPath string, argv ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== %s start %s: %s\n", name, time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group; killed when the test binary dies without Close (CleanupStale then
	// removes the rest).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	c.logf("started %s pid %d: %s (log %s)", name, p.pid, strings.Join(argv, " "), logPath)
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop: SIGTERM by pid, SIGKILL after timeout.
func (p *proc) stop(logf func(string, ...any), timeout time.Duration) error {
	if !p.running() {
		return nil
	}
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
	}
	if logf != nil {
		logf("%s pid %d ignored SIGTERM for %v: SIGKILL", p.name, p.pid, timeout)
	}
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s pid %d did not exit after SIGKILL", p.name, p.pid)
	}
}

// applyCRD applies the CustomResourceDefinition in file (server-side apply) and waits until it
// is Established.
func (c *Cluster) applyCRD(ctx context.Context, file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		return fmt.Errorf("CRD %s: %w", file, err)
	}
	dyn, err := dynamic.NewForConfig(c.CP.RESTConfig)
	if err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(gvr).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "cluster", Force: true}); err != nil {
		return fmt.Errorf("apply CRD %s: %w", file, err)
	}
	return lab.WaitFor(func() error {
		got, err := dyn.Resource(gvr).Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, x := range conds {
			if m, ok := x.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("CRD %s not Established yet", u.GetName())
	}, time.Minute)
}
