// Package cni tests the srcip-cni binary as a container runtime calls it (CNI_COMMAND, CNI_*
// environment, the network configuration on stdin), with the real host-local IPAM plugin, on a
// one-node lab (test/lab: the node's own ovsdb-server and ovs-vswitchd, userspace datapath)
// running the real srcip-agent in manifests mode. Pods are network namespaces the test creates;
// their Pod objects have no status.podIPs (the kubelet writes them after ADD returns). It needs
// root and Open vSwitch; `make test` provides both.
package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const (
	node     = "node1"
	podCIDR  = "10.244.1.0/24"
	gateway  = "10.244.1.1"
	podMTU   = 1400
	flowWait = 20 * time.Second
)

const nodeYAML = `apiVersion: v1
kind: Node
metadata:
  name: node1
spec:
  podCIDR: 10.244.1.0/24
  podCIDRs: [10.244.1.0/24]
status:
  addresses:
  - type: InternalIP
    address: 192.0.2.11
  conditions:
  - type: Ready
    status: "True"
`

// podYAML is a scheduled Pod as the API server holds it while the CNI ADD runs: no podIPs.
func podYAML(name, uid string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: cni
  uid: %s
  creationTimestamp: "2026-11-30T10:00:00Z"
spec:
  nodeName: node1
  containers:
  - name: c
    image: none
status:
  phase: Pending
`, name, uid)
}

// env is one test's lab and binaries.
type env struct {
	t                  *testing.T
	lab                *lab.Lab
	node               *lab.Node
	bins               string // srcip-cni, host-local, loopback (CNI_PATH)
	manifests, ipamDir string
}

func build(t *testing.T, dir string) {
	t.Helper()
	for out, pkg := range map[string]string{
		"srcip-agent": "../../cmd/srcip-agent",
		"srcip-cni":   "../../cmd/srcip-cni",
		"host-local":  "github.com/containernetworking/plugins/plugins/ipam/host-local",
		"loopback":    "github.com/containernetworking/plugins/plugins/main/loopback",
	} {
		b, err := exec.Command("go", "build", "-o", filepath.Join(dir, out), pkg).CombinedOutput()
		require.NoError(t, err, "build %s: %s", pkg, b)
	}
}

func newEnv(t *testing.T) *env { return newEnvNode(t, nodeYAML) }

// newEnvNode is newEnv with the Node object nodeManifest.
func newEnvNode(t *testing.T, nodeManifest string) *env {
	tmp, err := os.MkdirTemp("", "srcip-cni")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	e := &env{t: t, bins: filepath.Join(tmp, "bin"), manifests: filepath.Join(tmp, "manifests"), ipamDir: filepath.Join(tmp, "ipam")}
	for _, d := range []string{e.bins, e.manifests, e.ipamDir} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	build(t, e.bins)
	require.NoError(t, os.WriteFile(filepath.Join(e.manifests, "nodes.yaml"), []byte(nodeManifest), 0o644))
	_, err = lab.CleanupStale("", t.Logf)
	require.NoError(t, err)
	e.lab, err = lab.New(lab.Config{ManifestsDir: e.manifests, AgentBin: filepath.Join(e.bins, "srcip-agent"), Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(e.lab.AgentLog(node)); err == nil {
				t.Logf("agent log:\n%s", tail(string(b), 60))
			}
		}
		assert.NoError(t, e.lab.Close())
	})
	e.node = e.lab.Node(node)
	return e
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startAgent starts srcip-agent on the node and waits for br-int (the agent creates it).
func (e *env) startAgent() {
	e.t.Helper()
	require.NoError(e.t, e.lab.StartAgent(node))
	require.NoError(e.t, lab.WaitFor(func() error {
		_, err := e.lab.Vsctl(node, "br-exists", "br-int")
		return err
	}, 30*time.Second), "the agent did not create br-int")
}

// addPod writes the Pod object and creates the pod's network namespace (IPv6 off: no router
// solicitations); both are removed at the end of the test.
func (e *env) addPod(name, uid string) string {
	e.t.Helper()
	require.NoError(e.t, os.WriteFile(filepath.Join(e.manifests, "pod-"+name+".yaml"), []byte(podYAML(name, uid)), 0o644))
	ns := e.lab.Prefix + "-" + name
	out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput()
	require.NoError(e.t, err, "%s", out)
	e.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	out, err = exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1").CombinedOutput()
	require.NoError(e.t, err, "%s", out)
	return ns
}

func netnsPath(ns string) string { return "/var/run/netns/" + ns }

// conf is the plugin's network configuration (the conflist entry node-setup writes), with
// cniVersion, name and, for CHECK, the prevResult.
func (e *env) conf(flowWait string, prev *current.Result, extra map[string]any) []byte {
	c := map[string]any{
		"cniVersion": "1.1.0", "name": "ovs-srcip", "type": "srcip-cni",
		"bridge": "br-int", "ovsdb": "unix:" + e.node.DBSock(), "ovsRunDir": e.node.Dir,
		"mtu": podMTU, "flowWait": flowWait,
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]string{{{"subnet": podCIDR, "gateway": gateway}}},
			"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
			"dataDir": e.ipamDir,
		},
	}
	if prev != nil {
		c["prevResult"] = prev
	}
	for k, v := range extra {
		c[k] = v
	}
	b, err := json.Marshal(c)
	require.NoError(e.t, err)
	return b
}

// cniResult is one run of the plugin.
type cniResult struct {
	stdout, stderr string
	err            error
	elapsed        time.Duration
}

// cni runs srcip-cni in the node's network namespace, as the runtime would.
func (e *env) cni(command, containerID, netns, pod, uid string, stdin []byte) cniResult {
	e.t.Helper()
	cmd := exec.Command("ip", "netns", "exec", e.node.Netns, filepath.Join(e.bins, "srcip-cni"))
	cmd.Env = append(os.Environ(),
		"CNI_COMMAND="+command, "CNI_CONTAINERID="+containerID, "CNI_IFNAME=eth0",
		"CNI_PATH="+e.bins,
		fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=cni;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s", pod, containerID, uid))
	if netns != "" {
		cmd.Env = append(cmd.Env, "CNI_NETNS="+netns)
	}
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := cniResult{stdout: stdout.String(), stderr: stderr.String(), err: err, elapsed: time.Since(start)}
	e.t.Logf("srcip-cni %s %s (%s): err=%v stdout=%s stderr=%s", command, pod, r.elapsed.Round(time.Millisecond), err, strings.TrimSpace(r.stdout), strings.TrimSpace(r.stderr))
	return r
}

func (e *env) mustAdd(id, netns, pod, uid string) *current.Result {
	e.t.Helper()
	r := e.cni("ADD", id, netnsPath(netns), pod, uid, e.conf("20s", nil, nil))
	require.NoError(e.t, r.err, "ADD: %s %s", r.stdout, r.stderr)
	res := &current.Result{}
	require.NoError(e.t, json.Unmarshal([]byte(r.stdout), res))
	require.NotEmpty(e.t, res.IPs)
	return res
}

func inNetns(t *testing.T, netns string, argv ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", netns}, argv...)...).CombinedOutput()
	require.NoError(t, err, "%v: %s", argv, out)
	return string(out)
}

// ifaceOf returns the Interface row of the port srcip-cni made for containerID (name and
// external_ids), "" when there is none.
func (e *env) ifaceOf(containerID string) string {
	e.t.Helper()
	out, err := e.lab.Vsctl(node, "--bare", "--columns=name,ofport,external_ids", "find", "Interface", "external_ids:srcip-cni-container="+containerID)
	require.NoError(e.t, err)
	return strings.TrimSpace(out)
}

// hostLinks lists the node netns' links whose names start with "srcip" (srcip-cni's host ends).
func (e *env) hostLinks() string {
	e.t.Helper()
	out, err := exec.Command("ip", "-n", e.node.Netns, "-o", "link", "show").CombinedOutput()
	require.NoError(e.t, err, "%s", out)
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && strings.HasPrefix(f[1], "srcip") && !strings.HasPrefix(f[1], "srcip-") {
			names = append(names, strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":"))
		}
	}
	return strings.Join(names, " ")
}

// allocated reports whether host-local holds an allocation for containerID.
func (e *env) allocated(containerID string) bool {
	e.t.Helper()
	found := false
	_ = filepath.Walk(e.ipamDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && !strings.HasPrefix(info.Name(), "last_reserved") && !strings.HasSuffix(info.Name(), ".lock") {
			if b, _ := os.ReadFile(p); strings.HasPrefix(string(b), containerID) {
				found = true
			}
		}
		return nil
	})
	return found
}

func TestCNILifecycle(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	nsA := e.addPod("a", "uid-a")
	nsB := e.addPod("b", "uid-b")

	// ADD: the pod's interface, address, MTU and default route; the port with the pod's identity;
	// the agent's flows; only then the result.
	resA := e.mustAdd("ctr-a", nsA, "a", "uid-a")
	ipA := resA.IPs[0].Address
	assert.Equal(t, "10.244.1.2/24", ipA.String(), "host-local's first address after the gateway")
	assert.Equal(t, gateway, resA.IPs[0].Gateway.String())
	require.Len(t, resA.Interfaces, 2)
	assert.Equal(t, "eth0", resA.Interfaces[1].Name)
	assert.Equal(t, netnsPath(nsA), resA.Interfaces[1].Sandbox)
	link := inNetns(t, nsA, "ip", "-o", "addr", "show", "dev", "eth0")
	assert.Contains(t, link, "inet 10.244.1.2/24")
	assert.Contains(t, inNetns(t, nsA, "ip", "-o", "link", "show", "dev", "eth0"), fmt.Sprintf("mtu %d", podMTU))
	assert.Contains(t, inNetns(t, nsA, "ip", "route", "show", "default"), "default via "+gateway+" dev eth0")
	assert.Contains(t, inNetns(t, nsA, "ip", "-o", "link", "show", "dev", "eth0"), "state UP")

	row := e.ifaceOf("ctr-a")
	t.Logf("Interface of ctr-a: %s", row)
	hostA := resA.Interfaces[0].Name
	assert.True(t, strings.HasPrefix(row, hostA), "port named after the host end %s", hostA)
	for _, kv := range []string{"pod-namespace=cni", "pod-name=a", "pod-uid=uid-a", "attached-mac=" + resA.Interfaces[1].Mac,
		"ip_addresses=10.244.1.2/24", "srcip-cni-container=ctr-a", "srcip-cni-ifname=eth0"} {
		assert.Contains(t, row, kv)
	}
	ofport := strings.Fields(row)[1]
	require.Regexp(t, `^[1-9][0-9]*$`, ofport)
	flows, err := e.lab.DumpFlows(node, "br-int", "cookie=0x5c04000000000000/0xffff000000000000,in_port="+ofport)
	require.NoError(t, err)
	assert.Contains(t, flows, "nw_src=10.244.1.2", "the pod's spoof guard flows:\n%s", flows)
	assert.Equal(t, int64(podMTU), mtuOf(t, e.node.Netns, hostA), "the host end's MTU")
	// The lab's br-int is on the userspace datapath: transmit checksum offload is off on both
	// ends (docs/lab-facts.md pitfall 1), else no TCP segment from the pod would pass.
	assert.Contains(t, inNetns(t, nsA, "ethtool", "-k", "eth0"), "tx-checksumming: off")
	assert.Contains(t, inNetns(t, e.node.Netns, "ethtool", "-k", hostA), "tx-checksumming: off")
	// ... and the node's own IP stack keeps out of the pod's frames, which it also receives there:
	// no ARP answers (the node holds the gateway address on srcip-gw0), no forwarding.
	linkOut, err := exec.Command("ip", "-n", e.node.Netns, "link", "show", "dev", hostA).CombinedOutput()
	require.NoError(t, err, "%s", linkOut)
	assert.Contains(t, string(linkOut), "NOARP", "ARP off on the host end")
	assert.Equal(t, "0", strings.TrimSpace(inNetns(t, e.node.Netns, "cat", "/proc/sys/net/ipv4/conf/"+hostA+"/forwarding")))

	resB := e.mustAdd("ctr-b", nsB, "b", "uid-b")
	ipB := resB.IPs[0].Address.IP.String()
	assert.Equal(t, "10.244.1.3", ipB)

	// Real packets: pod a -> pod b through br-int (the agent answers ARP for the gateway).
	out, err := exec.Command("ip", "netns", "exec", nsA, "ping", "-c", "3", "-i", "0.2", "-W", "2", ipB).CombinedOutput()
	assert.NoError(t, err, "ping a -> b:\n%s\nflows:\n%s", out, dump(e))
	t.Logf("ping a -> b:\n%s", out)

	// CHECK passes on a good attachment, and fails (saying why) on a changed MTU.
	r := e.cni("CHECK", "ctr-a", netnsPath(nsA), "a", "uid-a", e.conf("20s", resA, nil))
	assert.NoError(t, r.err, "CHECK: %s", r.stdout)
	inNetns(t, nsA, "ip", "link", "set", "eth0", "mtu", "1300")
	r = e.cni("CHECK", "ctr-a", netnsPath(nsA), "a", "uid-a", e.conf("20s", resA, nil))
	assert.Error(t, r.err)
	assert.Contains(t, r.stdout, "MTU 1300, want 1400")
	inNetns(t, nsA, "ip", "link", "set", "eth0", "mtu", fmt.Sprint(podMTU))

	// STATUS: ready; not ready (code 50) without ovsdb-server at the configured endpoint.
	r = e.cni("STATUS", "", "", "", "", e.conf("20s", nil, nil))
	assert.NoError(t, r.err, "STATUS: %s", r.stdout)
	r = e.cni("STATUS", "", "", "", "", e.conf("20s", nil, map[string]any{"ovsdb": "unix:/nonexistent/db.sock"}))
	assert.Error(t, r.err)
	assert.Contains(t, r.stdout, `"code": 50`)
	assert.Contains(t, r.stdout, "is ovsdb-server running on this node")

	// GC with only a valid: b's port, veth and address go; a stays.
	r = e.cni("GC", "", "", "", "", e.conf("20s", nil, map[string]any{
		"cni.dev/valid-attachments": []map[string]string{{"containerID": "ctr-a", "ifname": "eth0"}}}))
	assert.NoError(t, r.err, "GC: %s", r.stdout)
	assert.Empty(t, e.ifaceOf("ctr-b"), "GC left b's port")
	assert.False(t, e.allocated("ctr-b"), "GC left b's address")
	assert.NotEmpty(t, e.ifaceOf("ctr-a"), "GC removed a valid attachment")
	assert.True(t, e.allocated("ctr-a"))
	assert.Equal(t, hostA, e.hostLinks(), "only a's host end is left")

	// DEL twice: everything of a is gone, the second call succeeds too.
	for i := 0; i < 2; i++ {
		r = e.cni("DEL", "ctr-a", netnsPath(nsA), "a", "uid-a", e.conf("20s", nil, nil))
		assert.NoError(t, r.err, "DEL #%d: %s", i+1, r.stdout)
	}
	assert.Empty(t, e.ifaceOf("ctr-a"))
	assert.False(t, e.allocated("ctr-a"))
	assert.Empty(t, e.hostLinks())
	assert.NotContains(t, inNetns(t, nsA, "ip", "-o", "link", "show"), "eth0")
	require.NoError(t, lab.WaitFor(func() error {
		f, err := e.lab.DumpFlows(node, "br-int", "cookie=0x5c04000000000000/0xffff000000000000,in_port="+ofport)
		if err != nil || strings.Contains(f, "in_port") {
			return fmt.Errorf("pod a's flows still there: %v\n%s", err, f)
		}
		return nil
	}, 10*time.Second))

	// DEL with the network namespace gone (b was already GC'd: also a DEL of a missing port),
	// and with no CNI_NETNS at all.
	out, err = exec.Command("ip", "netns", "del", nsB).CombinedOutput()
	require.NoError(t, err, "%s", out)
	r = e.cni("DEL", "ctr-b", netnsPath(nsB), "b", "uid-b", e.conf("20s", nil, nil))
	assert.NoError(t, r.err, "DEL with the netns gone: %s", r.stdout)
	r = e.cni("DEL", "ctr-b", "", "b", "uid-b", e.conf("20s", nil, nil))
	assert.NoError(t, r.err, "DEL without CNI_NETNS: %s", r.stdout)

	// A full ADD of a pod whose netns is deleted before DEL: the port goes with DEL.
	nsC := e.addPod("c", "uid-c")
	e.mustAdd("ctr-c", nsC, "c", "uid-c")
	out, err = exec.Command("ip", "netns", "del", nsC).CombinedOutput()
	require.NoError(t, err, "%s", out)
	r = e.cni("DEL", "ctr-c", netnsPath(nsC), "c", "uid-c", e.conf("20s", nil, nil))
	assert.NoError(t, r.err, "DEL with the netns gone: %s", r.stdout)
	assert.Empty(t, e.ifaceOf("ctr-c"))
	assert.False(t, e.allocated("ctr-c"))
	assert.Empty(t, e.hostLinks())
}

// ADD without a running agent fails after flowWait with an error that names the agent, and
// leaves nothing behind: no port, no veth, no address, no interface in the pod.
func TestCNIAddWithoutAgent(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	require.NoError(t, e.lab.StopAgent(node))
	ns := e.addPod("d", "uid-d")
	r := e.cni("ADD", "ctr-d", netnsPath(ns), "d", "uid-d", e.conf("3s", nil, nil))
	require.Error(t, r.err)
	assert.Contains(t, r.stdout, "srcip-agent did not program pod cni/d")
	assert.Contains(t, r.stdout, "within 3s: is srcip-agent running on this node? see its log")
	assert.Less(t, r.elapsed, 3*time.Second+5*time.Second, "ADD took %s", r.elapsed)
	assert.GreaterOrEqual(t, r.elapsed, 3*time.Second)
	assert.Empty(t, e.ifaceOf("ctr-d"), "a port was left behind")
	assert.Empty(t, e.hostLinks(), "a veth was left behind")
	assert.False(t, e.allocated("ctr-d"), "the address was not released")
	assert.NotContains(t, inNetns(t, ns, "ip", "-o", "link", "show"), "eth0")

	// Once the agent runs, the same ADD works (nothing stale is in the way).
	e.startAgent()
	e.mustAdd("ctr-d", ns, "d", "uid-d")
	assert.True(t, e.allocated("ctr-d"))
	r = e.cni("DEL", "ctr-d", netnsPath(ns), "d", "uid-d", e.conf("20s", nil, nil))
	assert.NoError(t, r.err)

	// ADD for a pod whose Pod object does not exist: the agent does not program it.
	ns2 := e.addPod("e", "uid-e")
	require.NoError(t, os.Remove(filepath.Join(e.manifests, "pod-e.yaml")))
	r = e.cni("ADD", "ctr-e", netnsPath(ns2), "e", "uid-e", e.conf("2s", nil, nil))
	assert.Error(t, r.err)
	assert.Contains(t, r.stdout, "srcip-agent did not program pod cni/e")
	assert.Empty(t, e.ifaceOf("ctr-e"))
}

func mtuOf(t *testing.T, netns, dev string) int64 {
	t.Helper()
	out, err := exec.Command("ip", "-n", netns, "-j", "link", "show", "dev", dev).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var links []struct {
		MTU int64 `json:"mtu"`
	}
	require.NoError(t, json.Unmarshal(out, &links))
	if len(links) == 0 {
		require.Fail(t, "no link "+dev)
	}
	return links[0].MTU
}

func dump(e *env) string {
	f, err := e.lab.DumpFlows(node, "br-int")
	return f + fmt.Sprint(errors.Join(err))
}

// Dual-stack: the node's spec.podCIDRs has an IPv4 and an IPv6 CIDR, and the conflist (as
// node-setup writes it: nodesetup.RenderConflist) a host-local range set per family. ADD gives the
// pod one address of each, a default route of each via that family's gateway, the IPv6 address
// usable at once (accept_dad=0: never tentative) and no router advertisements taken
// (accept_ra=0); the port's external_ids:ip_addresses and the result list both; CHECK passes;
// DEL releases both.
func TestCNIDualStack(t *testing.T) {
	const (
		podCIDR6 = "2001:db8:244:1::/64"
		gateway6 = "2001:db8:244:1::1"
	)
	// The lab takes a Node's IPv6 facts together: an IPv6 pod CIDR with an IPv6 InternalIP.
	dual := strings.Replace(nodeYAML, "podCIDRs: [10.244.1.0/24]", "podCIDRs: [10.244.1.0/24, "+podCIDR6+"]", 1)
	dual = strings.Replace(dual, "    address: 192.0.2.11\n", "    address: 192.0.2.11\n  - type: InternalIP\n    address: 2001:db8:0:2::11\n", 1)
	e := newEnvNode(t, dual)
	e.startAgent()
	ns := e.addPod("ds", "uid-ds")
	// The runtime's pod namespace has IPv6 on (addPod turned it off for the v4 tests).
	inNetns(t, ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.default.disable_ipv6=0")
	ipam := map[string]any{
		"type": "host-local",
		"ranges": [][]map[string]string{
			{{"subnet": podCIDR, "gateway": gateway}},
			{{"subnet": podCIDR6, "gateway": gateway6}},
		},
		"routes":  []map[string]string{{"dst": "0.0.0.0/0"}, {"dst": "::/0"}},
		"dataDir": e.ipamDir,
	}
	conf := func(prev *current.Result) []byte { return e.conf("20s", prev, map[string]any{"ipam": ipam}) }
	r := e.cni("ADD", "ctr-ds", netnsPath(ns), "ds", "uid-ds", conf(nil))
	require.NoError(t, r.err, "ADD: %s %s", r.stdout, r.stderr)
	res := &current.Result{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), res))

	// The result: both addresses with their gateways, both default routes.
	require.Len(t, res.IPs, 2, "one address per family")
	assert.Equal(t, "10.244.1.2/24", res.IPs[0].Address.String())
	assert.Equal(t, gateway, res.IPs[0].Gateway.String())
	assert.Equal(t, "2001:db8:244:1::2/64", res.IPs[1].Address.String())
	assert.Equal(t, gateway6, res.IPs[1].Gateway.String())
	var dsts []string
	for _, rt := range res.Routes {
		dsts = append(dsts, rt.Dst.String())
	}
	assert.ElementsMatch(t, []string{"0.0.0.0/0", "::/0"}, dsts)
	t.Logf("ADD result: %s", strings.TrimSpace(r.stdout))

	// The pod: both addresses, the IPv6 one not tentative; both default routes; DAD and RA off.
	addrs := inNetns(t, ns, "ip", "-o", "addr", "show", "dev", "eth0")
	t.Logf("pod addresses:\n%s", addrs)
	assert.Contains(t, addrs, "inet 10.244.1.2/24")
	assert.Contains(t, addrs, "inet6 2001:db8:244:1::2/64")
	assert.NotContains(t, addrs, "tentative", "DAD off: the address is usable when ADD returns")
	assert.NotContains(t, addrs, "dadfailed")
	assert.Contains(t, inNetns(t, ns, "ip", "-4", "route", "show", "default"), "default via "+gateway+" dev eth0")
	routes6 := inNetns(t, ns, "ip", "-6", "route", "show")
	t.Logf("pod IPv6 routes:\n%s", routes6)
	assert.Contains(t, routes6, "default via "+gateway6+" dev eth0")
	assert.Contains(t, routes6, podCIDR6+" dev eth0")
	assert.NotContains(t, routes6, "proto ra", "no route from a router advertisement")
	for k, want := range map[string]string{"accept_dad": "0", "accept_ra": "0", "disable_ipv6": "0"} {
		assert.Equal(t, want, strings.TrimSpace(inNetns(t, ns, "cat", "/proc/sys/net/ipv6/conf/eth0/"+k)), "net.ipv6.conf.eth0.%s", k)
	}

	// The port: ip_addresses lists both (the agent reads it: agent.LocalPod); the host end of the
	// userspace datapath has IPv6 off (the node's stack keeps out of the pod's IPv6 frames).
	row := e.ifaceOf("ctr-ds")
	t.Logf("Interface of ctr-ds: %s", row)
	assert.Regexp(t, `ip_addresses="?10\.244\.1\.2/24,2001:db8:244:1::2/64"?`, row)
	hostEnd := res.Interfaces[0].Name
	assert.Equal(t, "1", strings.TrimSpace(inNetns(t, e.node.Netns, "cat", "/proc/sys/net/ipv6/conf/"+hostEnd+"/disable_ipv6")))

	// CHECK against the dual-stack result (both addresses, both routes) passes.
	r = e.cni("CHECK", "ctr-ds", netnsPath(ns), "ds", "uid-ds", conf(res))
	assert.NoError(t, r.err, "CHECK: %s", r.stdout)

	// DEL releases both addresses.
	r = e.cni("DEL", "ctr-ds", netnsPath(ns), "ds", "uid-ds", conf(nil))
	assert.NoError(t, r.err, "DEL: %s", r.stdout)
	assert.Empty(t, e.ifaceOf("ctr-ds"))
	assert.False(t, e.allocated("ctr-ds"), "an address is still allocated")
	assert.Empty(t, e.hostLinks())
}
