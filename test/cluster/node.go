package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const cgroupBase = "/sys/fs/cgroup"

// Host paths that each node's mount namespace covers with its own directory (hard-wired in
// kubelet, containerd, libcni, the CNI plugins and node-setup). They are created, empty, on the
// host when missing, as mount points; nothing is ever written into them from the root namespace.
var nodeMounts = []struct{ sub, target string }{
	{"kubelet", "/var/lib/kubelet"},       // cert-dir default, device-plugins socket
	{"cni-cache", "/var/lib/cni"},         // libcni result cache, host-local leases
	{"run-containerd", "/run/containerd"}, // shim sockets
	{"varlog", "/var/log"},                // /var/log/containers, /var/log/pods
	{"cni-conf", "/etc/cni/net.d"},        // the conflist (written in place)
	{"cni-bin", "/opt/cni/bin"},           // plugins
	{"run-ovs-srcip", "/run/ovs-srcip"},   // the DaemonSet agent's flow snapshot
}

// sysctls kubelet would set host-wide; bind-mounted files with these values make it find them set.
var maskedSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// holderScript runs in the node's new private mount namespace and ends as `sleep infinity`. When
// the lab runs in a chroot (../shared/tools/fresh-debian), it first makes the chroot's root the
// namespace's own root (pivot_root(2) from the namespace's real root, which setns(2) into one's own
// mount namespace reveals; the old root is detached). A machine's mount namespace is like that:
// runc exec (kubectl exec) joins a container's mount namespace with setns, which sets the root to
// the namespace's own root - the container's rootfs only if the container's pivot_root happened
// on top of it. In a chroot, the exec'd process saw the host's / ("exec: /echo: no such file").
// Outside a chroot the root is already the namespace's own, and nothing is done.
const holderScript = `set -u
id=$(awk '$5 == "/" { id = $1 } END { print id }' /proc/self/mountinfo)
mp=$(nsenter --mount=/proc/self/ns/mnt cat /proc/self/mountinfo | awk -v id="$id" '$1 == id { print $5 }')
echo "holder: root mount $id is at ${mp:-?} from the namespace's own root"
if [ -n "$mp" ] && [ "$mp" != / ]; then
	old=run/srcip-holder-oldroot.$$
	mkdir -p "/$old"
	if nsenter --mount=/proc/self/ns/mnt sh -ec 'cd "$1"; pivot_root . "$2"; umount -l "/$2"' - "$mp" "$old"; then
		echo "holder: pivot_root into $mp: the node's root is its mount namespace's own"
	else
		echo "holder: pivot_root into $mp failed: kubectl exec will not see the containers' files" >&2
	fi
	rmdir "/$old" 2>/dev/null || true
fi
exec sleep infinity
`

// netnsPath is the node's network namespace file.
func (kn *KNode) netnsPath() string { return "/run/netns/" + kn.Netns }

// enter is the argv prefix that runs a program in the node's netns and mount namespace. -r keeps
// the holder's root directory: joining a mount namespace resets the root to that namespace's own,
// which escapes a chroot (the test then runs in fresh-debian's, and the lab's paths are not there).
func (kn *KNode) enter() []string {
	return []string{"nsenter", "-t", strconv.Itoa(kn.holder.pid), "-m", "-n", "-r"}
}

// Enter is the command line that runs a program on the node as a process of the node would run:
// in its netns and its private mount namespace (its /etc/cni/net.d, /opt/cni/bin, /var/lib/kubelet,
// /run/containerd, /var/run/openvswitch), e.g. append "sh" for a shell on the node.
func (kn *KNode) Enter() []string { return kn.enter() }

// ContainerdSocket is the node's containerd socket, reachable from the root netns too:
// `ctr -a <socket> -n k8s.io images ls` (ctr from BinDir).
func (kn *KNode) ContainerdSocket() string { return kn.path("containerd.sock") }

// Exec runs argv in the node (its netns and mount namespace) and returns stdout.
func (kn *KNode) Exec(argv ...string) (string, error) {
	return kn.c.run(append(kn.enter(), argv...)...)
}

func (kn *KNode) path(p ...string) string { return filepath.Join(append([]string{kn.Dir}, p...)...) }

func (kn *KNode) up(ctx context.Context) error {
	c := kn.c
	for _, d := range []string{"kubelet", "cni-cache", "run-containerd", "varlog", "cni-conf", "cni-bin", "ovs-srcip",
		"run-ovs-srcip", "sysctl", "containerd/root", "containerd/state", "runc", "pod-logs", "opt"} {
		if err := os.MkdirAll(kn.path(d), 0o755); err != nil {
			return err
		}
	}
	for _, p := range []string{"host-local", "loopback", "bridge"} {
		if err := copyFile(filepath.Join(c.BinDir, "cni", p), kn.path("cni-bin", p)); err != nil {
			return err
		}
	}
	if err := kn.makeCgroups(); err != nil {
		return err
	}
	// br-ex as a node installer leaves it: switching normally, so that the node reaches the API
	// server before the agent (which needs the API server) has programmed anything.
	if _, err := c.Lab.Ofctl(kn.Name, "add-flow", "br-ex", "priority=0,actions=NORMAL"); err != nil {
		return err
	}
	// The holder owns the node's private mount namespace.
	var err error
	if kn.holder, err = c.start("holder "+kn.Name, kn.path("holder.log"),
		"nsenter", "--net="+kn.netnsPath(), "unshare", "-m", "--propagation", "private",
		"sh", "-c", holderScript); err != nil {
		return err
	}
	self, _ := os.Readlink("/proc/self/ns/mnt")
	if err := lab.WaitFor(func() error {
		if !kn.holder.running() {
			return fmt.Errorf("holder exited: %v", kn.holder.err)
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", kn.holder.pid))
		mnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", kn.holder.pid))
		if !strings.HasSuffix(exe, "/sleep") || mnt == self {
			return fmt.Errorf("holder not in its own mount namespace yet (%s, %s)", exe, mnt)
		}
		return nil
	}, 10*time.Second); err != nil {
		return err
	}
	if err := kn.mounts(); err != nil {
		return err
	}
	if kn.tlsCert, kn.tlsKey, err = kn.servingCert(kn.path("serving")); err != nil {
		return err
	}
	if err := kn.writeConfigs(); err != nil {
		return err
	}
	// containerd, then the images.
	if kn.containerd, err = c.start("containerd "+kn.Name, kn.path("containerd.log"),
		append(kn.enter(), filepath.Join(c.BinDir, "containerd"), "--config", kn.path("containerd.toml"))...); err != nil {
		return err
	}
	if err := lab.WaitFor(func() error {
		if !kn.containerd.running() {
			return fmt.Errorf("containerd exited: %v (see %s)", kn.containerd.err, kn.path("containerd.log"))
		}
		if _, err := os.Stat(kn.path("containerd.sock")); err != nil {
			return err
		}
		return nil
	}, 60*time.Second); err != nil {
		return err
	}
	for _, im := range c.images {
		if err := kn.ImportImage(im); err != nil {
			return err
		}
	}
	if kn.kubelet, err = c.start("kubelet "+kn.Name, kn.path("kubelet.log"),
		append(kn.enter(), filepath.Join(c.BinDir, "kubelet"), "--config", kn.path("kubelet.yaml"),
			"--kubeconfig", c.Kubeconfig, "--root-dir", kn.path("kubelet"), "--cert-dir", kn.path("kubelet", "pki"),
			"--hostname-override", kn.Name, "--node-ip", kn.nodeIPs(),
			"--node-labels", corev1.LabelTopologyZone+"="+kn.Zone, "--v=2")...); err != nil {
		return err
	}
	if kn.proxy, err = c.start("kube-proxy "+kn.Name, kn.path("kube-proxy.log"),
		append(kn.enter(), filepath.Join(c.BinDir, "kube-proxy"), "--config", kn.path("kube-proxy.yaml"), "--v=2")...); err != nil {
		return err
	}
	// The pod CIDR kube-controller-manager allocated once the kubelet registered the Node.
	if err := lab.WaitFor(func() error {
		if !kn.kubelet.running() {
			return fmt.Errorf("kubelet exited: %v (see %s)", kn.kubelet.err, kn.path("kubelet.log"))
		}
		n, err := c.Client.CoreV1().Nodes().Get(ctx, kn.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range n.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() && !kn.PodCIDR.IsValid() {
				kn.PodCIDR = p
			} else if err == nil && p.Addr().Is6() && !kn.PodCIDR6.IsValid() {
				kn.PodCIDR6 = p
			}
		}
		if !kn.PodCIDR.IsValid() {
			return fmt.Errorf("node %s: no spec.podCIDRs yet", kn.Name)
		}
		if c.cfg.DualStack && !kn.PodCIDR6.IsValid() {
			return fmt.Errorf("node %s: no IPv6 entry in spec.podCIDRs %v yet", kn.Name, n.Spec.PodCIDRs)
		}
		return nil
	}, 60*time.Second); err != nil {
		return err
	}
	if err := kn.routePodCIDR(); err != nil {
		return err
	}
	switch c.cfg.CNI {
	case CNIBridge:
		if err := kn.writeBridgeConflist(); err != nil {
			return err
		}
	case CNISrcip:
		if err := kn.nodeSetup(); err != nil {
			return err
		}
		if err := kn.StartAgent(); err != nil {
			return err
		}
	case CNIChained:
		if err := kn.nodeSetup(); err != nil {
			return err
		}
		if err := os.Remove(kn.path("cni-conf", "10-ovs-srcip.conflist")); err != nil {
			return err
		}
		if err := kn.writeConflistInPlace("10-lab-chained.conflist", ChainedConflist(kn.PodCIDR, c.cfg.DualStack)); err != nil {
			return err
		}
		if c.cfg.DualStack {
			// The bridge plugin creates cni0 at the first ADD, when the netns default has IPv6
			// off (the lab's): it could not give cni0 its IPv6 gateway address. The plugin takes
			// an existing bridge of that name, so it is made here with IPv6 on.
			if _, err := c.run("ip", "-n", kn.Netns, "link", "add", "cni0", "type", "bridge"); err != nil {
				return err
			}
			if err := kn.sysctl6("cni0", ipv6On); err != nil {
				return err
			}
		}
		if err := kn.StartAgent(); err != nil {
			return err
		}
	case CNIDaemonSet:
		return nil // Ready once the DaemonSet's node-setup wrote the conflist
	}
	_, err = c.WaitNodeReady(ctx, kn.Name, 90*time.Second)
	return err
}

// makeCgroups creates the kubelet's cgroupRoot in every v1 hierarchy (cpuset gets the root's
// cpus and mems, else nothing can join it).
func (kn *KNode) makeCgroups() error {
	ents, err := os.ReadDir(cgroupBase)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() || e.Name() == "unified" {
			continue
		}
		d := filepath.Join(cgroupBase, e.Name(), kn.CgroupRoot)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if e.Name() == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(cgroupBase, "cpuset", f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (kn *KNode) mounts() error {
	var sh []string
	for _, m := range nodeMounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return err
		}
		sh = append(sh, "mount --bind "+kn.path(m.sub)+" "+m.target)
	}
	// The node's OVS run dir where srcip-cni and a DaemonSet agent look by default.
	if err := os.MkdirAll("/run/openvswitch", 0o755); err != nil {
		return err
	}
	sh = append(sh, "mount --bind "+kn.Node.Dir+" /run/openvswitch")
	for k, v := range maskedSysctls {
		f := kn.path("sysctl", strings.ReplaceAll(k, "/", "."))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o644); err != nil {
			return err
		}
		sh = append(sh, "mount --bind "+f+" /proc/sys/"+k)
	}
	_, err := kn.c.run(append([]string{"nsenter", "-t", strconv.Itoa(kn.holder.pid), "-m", "-r", "sh", "-ec"},
		strings.Join(sh, "; "))...)
	return err
}

// ImportImage imports a docker-archive or OCI image layout tarball into the node's containerd (namespace k8s.io).
func (kn *KNode) ImportImage(tarball string) error {
	_, err := kn.c.run(filepath.Join(kn.c.BinDir, "ctr"), "-a", kn.path("containerd.sock"), "-n", "k8s.io",
		"images", "import", "--no-unpack=false", tarball)
	return err
}

func (kn *KNode) writeConfigs() error {
	c := kn.c
	resolvConf, dns, localStorage := "/etc/resolv.conf", "", "false"
	if c.cfg.Conformance {
		// Ephemeral-storage capacity and limits (the e2e test of a Service whose only pod is
		// evicted for its ephemeral storage; without it the node has no ephemeral-storage
		// capacity and that pod is never scheduled).
		localStorage = "true"
		// Pods' upstream resolver (dnsPolicy Default, CoreDNS's forward) is the lab router, which
		// serves no DNS: no query ever leaves the lab for the host's resolver.
		resolvConf = kn.path("resolv.conf")
		if err := os.WriteFile(resolvConf, []byte("nameserver "+c.Lab.RouterPrefix().Addr().String()+"\n"), 0o644); err != nil {
			return err
		}
		dns = "clusterDNS: [" + CoreDNSServiceIP + "]\nclusterDomain: cluster.local\n"
	}
	files := map[string]string{
		"containerd.toml": `version = 3
root = '` + kn.path("containerd", "root") + `'
state = '` + kn.path("containerd", "state") + `'
imports = []
[grpc]
  address = '` + kn.path("containerd.sock") + `'
[ttrpc]
  address = '` + kn.path("containerd.sock.ttrpc") + `'
[plugins.'io.containerd.internal.v1.opt']
  path = '` + kn.path("opt") + `'
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '` + PauseImage + `'
[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  # no CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj (pause wants -998)
  restrict_oom_score_adj = true
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ['/opt/cni/bin']
  conf_dir = '/etc/cni/net.d'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = '/usr/sbin/runc'
  Root = '` + kn.path("runc") + `'
  SystemdCgroup = false
`,
		"kubelet.yaml": `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: ` + kn.CgroupRoot + `
containerRuntimeEndpoint: unix://` + kn.path("containerd.sock") + `
address: ` + kn.IP.String() + `
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
tlsCertFile: ` + kn.tlsCert + `
tlsPrivateKeyFile: ` + kn.tlsKey + `
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: ` + filepath.Join(c.CP.Dir, "pki", "ca.crt") + `}}
authorization: {mode: Webhook}
failSwapOn: false
podLogsDir: ` + kn.path("pod-logs") + `
resolvConf: ` + resolvConf + `
` + dns + `imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
localStorageCapacityIsolation: ` + localStorage + `
nodeStatusUpdateFrequency: 2s
`,
		"kube-proxy.yaml": `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ` + c.cfg.ProxyMode + `
clientConnection: {kubeconfig: ` + c.Kubeconfig + `}
hostnameOverride: ` + kn.Name + `
clusterCIDR: ` + c.clusterCIDRs() + `
bindAddress: ` + kn.IP.String() + `
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# never write the host-global nf_conntrack_max; the TCP timeouts are per netns (kube-proxy's
# defaults, 24h established and 1h CLOSE_WAIT, which the KubeProxy e2e test checks)
conntrack: {maxPerCore: 0, min: 0}
`,
	}
	for name, body := range files {
		if err := os.WriteFile(kn.path(name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeConflistInPlace writes the conflist with open/truncate/write: containerd's watcher ignores
// a file renamed into its directory.
func (kn *KNode) writeConflistInPlace(name, body string) error {
	f, err := os.OpenFile(kn.path("cni-conf", name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (kn *KNode) writeBridgeConflist() error {
	return kn.writeConflistInPlace("10-lab-bridge.conflist", `{"cniVersion": "1.0.0", "name": "lab", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "mtu": 1400,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "`+kn.PodCIDR.String()+`"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}}
]}
`)
}

// down stops the node's processes by pid (agent, kube-proxy, kubelet, then every process in the
// node's cgroups - the containers -, the shims, containerd, the holder) and removes its cgroups.
func (kn *KNode) down() error {
	logf := kn.c.logf
	var errs []error
	for _, p := range []*proc{kn.agent, kn.proxy, kn.kubelet} {
		if err := p.stop(logf, 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if err := killCgroup(kn.CgroupRoot); err != nil {
		errs = append(errs, err)
	}
	// Shims: in the node netns, started by this containerd (their command line names its socket).
	if kn.holder != nil {
		for _, pid := range netnsPids(kn.netnsPath()) {
			cl := cmdline(pid)
			if strings.Contains(cl, "containerd-shim") && strings.Contains(cl, kn.Dir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	for _, p := range []*proc{kn.containerd, kn.holder} {
		if err := p.stop(logf, 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeCgroup(kn.CgroupRoot); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// killCgroup SIGKILLs every process in root's subtree of every v1 hierarchy, until none is left.
func killCgroup(root string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := cgroupPids(root)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: pids %v survive SIGKILL", root, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func cgroupPids(root string) []int {
	seen := map[int]bool{}
	var pids []int
	ents, _ := os.ReadDir(cgroupBase)
	for _, e := range ents {
		d := filepath.Join(cgroupBase, e.Name(), root)
		_ = filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err != nil || !de.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroup removes root's subtree in every hierarchy, deepest first.
func removeCgroup(root string) error {
	var errs []error
	ents, _ := os.ReadDir(cgroupBase)
	for _, e := range ents {
		d := filepath.Join(cgroupBase, e.Name(), root)
		var dirs []string
		_ = filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// netnsPids lists the processes whose netns is the one at path.
func netnsPids(path string) []int {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nil
	}
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var ps syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name()+"/ns/net", &ps) == nil && ps.Ino == st.Ino && ps.Dev == st.Dev {
			pids = append(pids, pid)
		}
	}
	return pids
}

func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// CleanupStale removes the cgroups of real-kubelet labs whose lab directory (baseDir/<prefix>,
// default /tmp) is gone or whose owner is dead, killing what is still in them; then
// lab.CleanupStale removes the labs' netns (and the processes in them) and directories.
func CleanupStale(baseDir string, logf func(string, ...any)) error {
	if baseDir == "" {
		baseDir = "/tmp"
	}
	var errs []error
	ents, _ := os.ReadDir(filepath.Join(cgroupBase, "pids"))
	for _, e := range ents {
		name := e.Name()
		i := strings.IndexByte(name, '-')
		if !e.IsDir() || i != 6 || !strings.HasPrefix(name, "sl") {
			continue
		}
		if ownerAlive(filepath.Join(baseDir, name[:i])) {
			continue
		}
		if logf != nil {
			logf("cleanup: stale cgroup /%s", name)
		}
		if err := killCgroup("/" + name); err != nil {
			errs = append(errs, err)
		}
		if err := removeCgroup("/" + name); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := lab.CleanupStale(baseDir, logf); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ownerAlive reads the owner file lab.New writes ("pid starttime").
func ownerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || !lab.PidAlive(pid) {
		return false
	}
	st, _ := os.ReadFile("/proc/" + f[0] + "/stat")
	s := string(st)
	if i := strings.LastIndexByte(s, ')'); i > 0 {
		if fs := strings.Fields(s[i+1:]); len(fs) >= 20 {
			return fs[19] == f[1]
		}
	}
	return false
}
