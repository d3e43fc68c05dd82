// Command trylab starts the real-kubelet lab that `make test` installs ovs-srcip on
// (test/cluster/install): three emulated nodes with containerd, a kubelet and kube-proxy each,
// registered and NotReady (no CNI), nothing of ovs-srcip installed, the release image of
// `make image` already imported into each node's containerd; and holds it until SIGINT or SIGTERM,
// then closes it (every process by pid, the netns, the directories). It is the cluster to try
// docs/install.md on from an empty cluster:
//
//	make try-lab      # or: go run ./test/cluster/trylab (as root, from the repository's root)
//
// Once the nodes are registered it prints, and writes to <lab dir>/try-lab.env (shell variables),
// the admin kubeconfig, the kubectl, helm and ctr binaries, each node (its IP, pod CIDR, netns,
// the command line that enters it, its containerd socket and OVS run directory), the external
// client and the router, the address ranges the agent's flags and the node set-up's settings take,
// kustomize and Helm settings files for the lab's nodes, and its own pid. It refuses to start
// while another lab (netns slXXXX-*) of a live process is up.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ovs-srcip/ovs-srcip/test/cluster"
	"github.com/ovs-srcip/ovs-srcip/test/kube"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const (
	imageRepo     = "ghcr.io/ovs-srcip/srcip-agent"
	clusterCIDR   = "10.244.0.0/16"
	nodePortRange = "30000-32767" // kube-apiserver's default (test/kube Options.NodePortRange)
	podMTU        = 1400          // the lab's underlay MTU is 1500: 1500 - 50 (Geneve), rounded down
)

func main() { os.Exit(run()) }

func run() int {
	nodes := flag.String("nodes", "test/cluster/testdata/nodes", "directory of the lab's Node manifests (names and InternalIPs)")
	echoBin := flag.String("echo", "", "static test/echo binary (default: built into a temp dir)")
	pauseBin := flag.String("pause", "", "static test/pause binary (default: built into a temp dir)")
	helmBin := flag.String("helm", "", "helm binary (default: hack/helm/build.sh's, a cache hit after the first build)")
	proxyMode := flag.String("proxy-mode", cluster.ProxyNFTables, "kube-proxy's mode: nftables or iptables (kubeadm's default)")
	release := flag.String("release-version", "", "tag of the release image imported on the nodes (hack/image.sh -v; default the VERSION file)")
	verbose := flag.Bool("v", false, "log every command the lab runs")
	flag.Parse()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "try-lab: "+format+"\n", args...)
		return 1
	}
	if os.Geteuid() != 0 {
		return fail("needs root (network namespaces, Open vSwitch, cgroups)")
	}
	logf := func(string, ...any) {}
	if *verbose {
		logf = func(f string, a ...any) { fmt.Fprintf(os.Stderr, "  "+f+"\n", a...) }
	}
	say := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "try-lab: "+f+"\n", a...) }

	// Another lab would share the host's routes to the underlay and the pod CIDR (cluster.Start
	// refuses an overlap) and the machine's two cores: one lab at a time.
	if err := cluster.CleanupStale("", say); err != nil {
		return fail("cleanup of the labs of dead runs: %v", err)
	}
	live, err := lab.LiveLabs("")
	if err != nil {
		return fail("%v", err)
	}
	if len(live) > 0 {
		var l []string
		for p, pid := range live {
			l = append(l, fmt.Sprintf("%s (owner pid %d: %s)", p, pid, cmdline(pid)))
		}
		slices.Sort(l)
		return fail("another lab is up: %s.\nClose it first (Ctrl-C in its terminal, or kill <owner pid>), or wait until its run ends; "+
			"`make clean-labs` removes only the labs of dead runs.", strings.Join(l, ", "))
	}

	tmp, err := os.MkdirTemp("", "try-lab-bin")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(tmp)
	// echo and pause go into images as their only file: static.
	for _, b := range []struct {
		bin *string
		pkg string
	}{{echoBin, "./test/echo"}, {pauseBin, "./test/pause"}} {
		if *b.bin != "" {
			continue
		}
		*b.bin = filepath.Join(tmp, filepath.Base(b.pkg))
		cmd := exec.Command("go", "build", "-trimpath", "-o", *b.bin, b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fail("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	if *helmBin == "" {
		out, err := exec.Command("hack/helm/build.sh").Output()
		if err != nil {
			return fail("hack/helm/build.sh (run from the repository's root): %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		*helmBin = lines[len(lines)-1]
	}
	if *release == "" {
		b, err := os.ReadFile("VERSION")
		if err != nil {
			return fail("VERSION (run from the repository's root): %v", err)
		}
		*release = strings.TrimSpace(string(b))
	}

	// Held until SIGINT or SIGTERM; a signal during the start stops it (Start cleans up). The
	// handler stays installed until the lab is closed: a second Ctrl-C does not cut Close short.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	say("starting the real-kubelet lab (CNI none: nodes NotReady; image %s:%s imported on each node)...", imageRepo, *release)
	t0 := time.Now()
	c, err := cluster.Start(ctx, cluster.Config{
		Lab:     lab.Config{ManifestsDir: *nodes, NoGateway: true, EchoBin: *echoBin, Logf: logf},
		EchoBin: *echoBin, PauseBin: *pauseBin,
		CNI: cluster.CNIDaemonSet, ClusterCIDR: clusterCIDR, ProxyMode: *proxyMode, ReleaseVersion: *release, Logf: logf,
	})
	if err != nil {
		if ctx.Err() != nil {
			return fail("signalled during the start: stopped (%v)", firstLine(err))
		}
		return fail("%v", err)
	}
	up := time.Since(t0)
	defer func() {
		t := time.Now()
		if err := c.Close(); err != nil {
			say("close: %v", err)
		}
		left := leftoverNetns(c.Lab.Prefix)
		say("lab %s closed in %v; netns left: %d %v", c.Lab.Prefix, time.Since(t).Round(time.Millisecond), len(left), left)
	}()

	root, err := os.Getwd()
	if err != nil {
		return fail("%v", err)
	}
	overlay, values, err := writeSettings(filepath.Join(c.Lab.Dir, "try-lab"), root)
	if err != nil {
		return fail("%v", err)
	}
	env := filepath.Join(c.Lab.Dir, "try-lab.env")
	body := envFile(c, env, lines(c, *helmBin, *release, overlay, values))
	if err := os.WriteFile(env, []byte(body), 0o644); err != nil {
		return fail("%v", err)
	}
	var reg []string
	for _, n := range c.Lab.Nodes {
		reg = append(reg, fmt.Sprintf("%s %v", n.Name, c.NodeReady[n.Name].Round(time.Millisecond)))
	}
	fmt.Printf("try-lab: lab %s up in %v (nodes registered after their start: %s): NotReady (no CNI), nothing of ovs-srcip\n"+
		"  installed, %s:%s imported on every node: the cluster `make test` installs ovs-srcip on (test/cluster/install)\n",
		c.Lab.Prefix, up.Round(time.Millisecond), strings.Join(reg, ", "), imageRepo, *release)
	fmt.Printf("try-lab: env file %s (. it: these variables, KUBECONFIG exported, shell functions kubectl and helm):\n%s", env, body)
	fmt.Printf("try-lab: docs/install.md on this lab: the node set-up settings of these nodes are NIC= (br-ex exists), DATAPATH_TYPE=netdev, MTU=%d\n", podMTU)
	fmt.Printf("try-lab: pid %d: Ctrl-C or kill %d closes the lab\n", os.Getpid(), os.Getpid())
	<-ctx.Done()
	say("signalled: closing the lab %s", c.Lab.Prefix)
	return 0
}

// info is one KEY=value line of try-lab.env with its comment.
type info struct{ key, value, comment string }

// lines are the lab's facts, in the order of try-lab.env.
func lines(c *cluster.Cluster, helm, release, overlay, values string) []info {
	bin := func(n string) string { return filepath.Join(c.BinDir, n) }
	router := c.Lab.RouterPrefix()
	var names []string
	for _, n := range c.Lab.Nodes {
		names = append(names, n.Name)
	}
	l := []info{
		{"KUBECONFIG", c.Kubeconfig, "the admin kubeconfig (the API server on " + c.CP.RESTConfig.Host + ")"},
		{"KUBECTL", bin("kubectl"), "kubectl v1.37.2 (hack/cluster)"},
		{"HELM", helm, "helm (hack/helm)"},
		{"CTR", bin("ctr"), "containerd's ctr: $CTR -a $NODE1_CONTAINERD -n k8s.io images ls"},
		{"RELEASE_IMAGE", imageRepo + ":" + release, "imported on every node (imagePullPolicy IfNotPresent never pulls it)"},
		{"NODES", strings.Join(names, " "), "registered, NotReady until a CNI config is in their /etc/cni/net.d"},
	}
	for _, n := range c.Lab.Nodes {
		kn := c.KNodes[n.Name]
		k := "NODE" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(strings.TrimPrefix(n.Name, "node")))
		if !strings.HasPrefix(n.Name, "node") {
			k = "NODE_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(n.Name))
		}
		l = append(l,
			info{k + "_IP", n.IP.String(), n.Name + "'s InternalIP, on br-ex (the Geneve underlay)"},
			info{k + "_POD_CIDR", kn.PodCIDR.String(), "spec.podCIDRs[0], allocated by kube-controller-manager"},
			info{k + "_NETNS", n.Netns, "its network namespace: ip netns exec " + n.Netns + " ip -br addr"},
			info{k + "_ENTER", strings.Join(kn.Enter(), " "), "a command on the node with its files too (/etc/cni/net.d, /var/lib/kubelet, /var/run/openvswitch): $" + k + "_ENTER sh"},
			info{k + "_CONTAINERD", kn.ContainerdSocket(), "its containerd socket: $CTR -a $" + k + "_CONTAINERD -n k8s.io images ls"},
			info{k + "_OVS_RUNDIR", n.Dir, "its Open vSwitch: OVS_RUNDIR=$" + k + "_OVS_RUNDIR ovs-vsctl show"},
		)
	}
	var routes []string
	for pfx, node := range c.Lab.Routes() {
		routes = append(routes, pfx+" -> "+node)
	}
	slices.Sort(routes)
	var extCIDRs []string
	for _, r := range routes {
		extCIDRs = append(extCIDRs, strings.Fields(r)[0])
	}
	cl := c.Lab.Clients[0]
	l = append(l,
		info{"CLIENT_NETNS", cl.Netns, "the external client: ip netns exec " + cl.Netns + " curl http://<node IP>:<NodePort>/"},
		info{"CLIENT_IP", cl.IP.String(), "the source address a backend must see when the client IP is kept"},
		info{"ROUTER_NETNS", c.Lab.RouterNetns, "the lab router (" + router.Addr().String() + " on the node underlay), routes " + strings.Join(routes, ", ")},
		info{"NODE_CIDR", router.Masked().String(), "the node underlay (every InternalIP)"},
		info{"CLUSTER_CIDR", clusterCIDR, "kube-controller-manager --cluster-cidr: node set-up's CLUSTER_CIDRS / nodeSetup.clusterCIDRs"},
		info{"SERVICE_CIDR", kube.ServiceCIDR, "kube-apiserver --service-cluster-ip-range: the agent's --service-cidrs"},
		info{"EXTERNAL_CIDRS", strings.Join(extCIDRs, ","), "addresses the router sends to the nodes, for LoadBalancer IPs (served without a flag) and externalIPs (served only inside the agent's --external-ip-cidrs)"},
		info{"NODE_PORT_RANGE", nodePortRange, "kube-apiserver --service-node-port-range: the agent's --service-node-port-range"},
		info{"KUSTOMIZE_OVERLAY", overlay, "deploy/ with the lab's node set-up settings: kubectl apply -k deploy/crds && kubectl apply -k $KUSTOMIZE_OVERLAY"},
		info{"HELM_VALUES", values, "the chart's values for the lab's nodes: helm install ovs-srcip deploy/helm/ovs-srcip -n kube-system -f $HELM_VALUES"},
		info{"TRY_LAB_PID", strconv.Itoa(os.Getpid()), "Ctrl-C, or kill $TRY_LAB_PID, closes the lab"},
	)
	return l
}

// writeSettings writes a kustomize overlay of root/deploy and Helm values with the lab's node
// set-up settings (br-ex exists already: NIC empty; no kernel module: netdev; pod MTU) into dir
// and returns the overlay's directory and the values file.
func writeSettings(dir, root string) (overlay, values string, err error) {
	overlay = filepath.Join(dir, "overlay")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		return "", "", err
	}
	settings := "# The lab's nodes: br-ex exists already (NIC empty), no openvswitch kernel module (netdev), the\n" +
		"# underlay's MTU 1500 (pod MTU 1400). Written by make try-lab.\n"
	// kustomize takes no absolute path to a base.
	deploy, err := filepath.Rel(overlay, filepath.Join(root, "deploy"))
	if err != nil {
		return "", "", err
	}
	kust := settings + `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ` + deploy + `
configMapGenerator:
  - name: srcip-node-setup
    namespace: ovs-srcip
    behavior: merge
    literals:
      - NIC=
      - DATAPATH_TYPE=netdev
      - CLUSTER_CIDRS=` + clusterCIDR + `
      - MTU=` + strconv.Itoa(podMTU) + `
`
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		return "", "", err
	}
	values = filepath.Join(dir, "values.yaml")
	vals := settings + `nodeSetup:
  nic: ""
  datapathType: netdev
  clusterCIDRs: ` + clusterCIDR + `
  mtu: ` + strconv.Itoa(podMTU) + `
`
	return overlay, values, os.WriteFile(values, []byte(vals), 0o644)
}

// envFile renders l as shell assignments, each with its comment.
func envFile(c *cluster.Cluster, path string, l []info) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# The real-kubelet lab %s of make try-lab (pid %d): . %s\n", c.Lab.Prefix, os.Getpid(), path)
	for _, i := range l {
		fmt.Fprintf(&b, "%s=%s  # %s\n", i.key, shellQuote(i.value), i.comment)
	}
	// Functions, not aliases: a script that sources the file gets them too (a shell expands
	// aliases only when interactive).
	b.WriteString("export KUBECONFIG\nkubectl() { \"$KUBECTL\" \"$@\"; }\nhelm() { \"$HELM\" \"$@\"; }\n")
	return b.String()
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:,=+@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// leftoverNetns lists the netns of the lab prefix still there.
func leftoverNetns(prefix string) []string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return []string{"ip netns list: " + err.Error()}
	}
	var left []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			left = append(left, f[0])
		}
	}
	return left
}

func cmdline(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return "?"
	}
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return s
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
