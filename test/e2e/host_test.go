package e2e

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// Host connectivity (issue 8 point 2) through each node's gateway port srcip-gw0, which the lab
// sets up as the node set-up step will (lab.SetupGateway: the gateway address 10.244.N.1/24 on
// srcip-gw0, the route of 10.244.0.0/16 into it, forwarding, masquerade of pod traffic leaving
// the cluster in nft table ip ovs-srcip). Real packets, replies checked by the echo client.

// echoDPod is a second pod on node1 (the same-node endpoint of a ClusterIP).
const echoDPod = `apiVersion: v1
kind: Pod
metadata:
  name: echo-d
  namespace: demo
  labels: {app: echo, pod: echo-d}
spec:
  nodeName: node1
  containers:
  - name: echo
    image: ovs-srcip/echo:lab
    ports:
    - {name: http, containerPort: 8080, protocol: TCP}
    - {name: dns, containerPort: 8080, protocol: UDP}
status:
  phase: Running
  hostIP: 192.0.2.11
  podIP: 10.244.1.6
  podIPs:
  - ip: 10.244.1.6
  - ip: 2001:db8:244:1::6
  conditions:
  - {type: Ready, status: "True"}
`

var echoD = ep{"echo-d", "10.244.1.6", "node1"}

// hostPort is where host_test.go's echo servers listen on nodes and the client.
const hostPort = "18080"

// gatewayIP is node's pod gateway address, held by its host on srcip-gw0.
func gatewayIP(t *testing.T, node string) string {
	t.Helper()
	n := theLab.Node(node)
	require.NotNil(t, n)
	return n.Gateway.String()
}

// hostEcho runs an echo server in the netns of name (a node or a client) for the test's duration:
// TCP on hostPort, UDP on hostPort of each of udpAddrs (a UDP socket bound to the wildcard
// address answers from the address the route to the client prefers, e.g. the gateway address
// for a local pod, whatever address the client sent to; "" is the wildcard).
func hostEcho(t *testing.T, name string, udpAddrs ...string) {
	t.Helper()
	ns, err := theLab.Netns(name)
	require.NoError(t, err)
	args := []string{"ip", "netns", "exec", ns, theLab.EchoBin(), "serve", "--name", name, "--node", name, "--tcp", ":" + hostPort}
	for _, a := range udpAddrs {
		args = append(args, "--udp", a+":"+hostPort)
	}
	cmd := exec.Command(args[0], args[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		_ = cmd.Wait()
	})
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "ready") }, 5*time.Second, 20*time.Millisecond,
		"echo server in %s did not start: %s", name, stderr.String())
}

// request retries from (a pod, node or client netns) until the request is answered (the agents
// program the gateway flows asynchronously) and checks who answered and what each side saw.
func request(t *testing.T, from, proto, addr, wantServer, wantClientIP string) lab.Reply {
	t.Helper()
	var r lab.Reply
	require.NoError(t, lab.WaitFor(func() error {
		var err error
		r, err = theLab.Request(from, proto, addr)
		return err
	}, 20*time.Second), "%s %s from %s", proto, addr, from)
	assert.Equal(t, wantServer, r.Pod, "%s %s from %s: answered by", proto, addr, from)
	assert.Equal(t, wantClientIP, r.ClientIP(), "%s %s from %s: the server saw", proto, addr, from)
	assert.Equal(t, addr, r.From, "%s %s from %s: the answer came from", proto, addr, from)
	t.Logf("%s %s from %s: server %s saw %s, answer from %s", proto, addr, from, r.Pod, r.Client, r.From)
	return r
}

func ping(t *testing.T, from, dst string) {
	t.Helper()
	var out string
	require.NoError(t, lab.WaitFor(func() error {
		var err error
		out, err = theLab.Exec(from, "ping", "-c", "2", "-i", "0.2", "-W", "2", dst)
		return err
	}, 20*time.Second), "ping %s from %s: %s", dst, from, out)
	t.Logf("ping %s from %s: %s", dst, from, lastLine(out))
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}

// The host reaches a local pod (kubelet probes) from its gateway address (the kernel's route of
// its own pod CIDR) and a pod on another node (over Geneve, VNI 1) from its node IP (the route of
// the cluster CIDR has the node IP as source, as node-setup writes it): the remote pod sees the
// client node's InternalIP and its answers come back over the tunnel (OriginNode on the pod's
// node), not masqueraded. ARP for pod addresses is answered by br-int.
func TestHostToPods(t *testing.T) {
	gw1 := gatewayIP(t, "node1")
	for _, proto := range []string{"tcp", "udp"} {
		request(t, "node1", proto, echoC.ip+":8080", "echo-c", gw1)
		request(t, "node1", proto, echoA.ip+":8080", "echo-a", "192.0.2.11")
		request(t, "node3", proto, echoC.ip+":8080", "echo-c", "192.0.2.13")
	}
	ping(t, "node1", echoC.ip)
	ping(t, "node1", echoA.ip)
	// The connection the host opened is committed in node1's ZonePod with OriginGateway (4).
	ct, err := theLab.Appctl("node1", "dpctl/dump-conntrack", "zone="+zonePod)
	require.NoError(t, err)
	assert.Regexp(t, `src=192\.0\.2\.11,dst=10\.244\.2\.5,sport=\d+,dport=8080.*mark=4`, ct)
	// On the pod's node the connection of node3's host is committed with OriginNode (8).
	ct, err = theLab.Appctl("node1", "dpctl/dump-conntrack", "zone="+zonePod)
	require.NoError(t, err)
	assert.Regexp(t, `src=192\.0\.2\.13,dst=10\.244\.1\.5,sport=\d+,dport=8080.*mark=8`, ct)
}

// A pod reaches its own node's host (node address and gateway address: no NAT, the host sees the
// pod), another node's host (masqueraded to the node address) and the outside world (the client
// netns behind the router: masqueraded to the node address).
func TestPodToHostsAndOutside(t *testing.T) {
	hostEcho(t, "node1", "192.0.2.11", gatewayIP(t, "node1"))
	hostEcho(t, "node2", "192.0.2.12")
	hostEcho(t, "client", "")
	for _, proto := range []string{"tcp", "udp"} {
		request(t, "echo-c", proto, "192.0.2.11:"+hostPort, "node1", echoC.ip)
		request(t, "echo-c", proto, gatewayIP(t, "node1")+":"+hostPort, "node1", echoC.ip)
		request(t, "echo-c", proto, "192.0.2.12:"+hostPort, "node2", "192.0.2.11")
		request(t, "echo-a", proto, "192.0.2.11:"+hostPort, "node1", "192.0.2.12")
		request(t, "echo-c", proto, clientIP+":"+hostPort, "client", "192.0.2.11")
		request(t, "echo-a", proto, clientIP+":"+hostPort, "client", "192.0.2.12")
	}
	ping(t, "echo-c", "192.0.2.11")
	ping(t, "echo-c", gatewayIP(t, "node1"))
	ping(t, "echo-a", "192.0.2.11")
	ping(t, "echo-c", clientIP)
	// A pod on another node reaches this node's gateway address (over Geneve, then the gateway).
	request(t, "echo-a", "tcp", gatewayIP(t, "node1")+":"+hostPort, "node1", echoA.ip)
}

// kubeProxyDNAT emulates kube-proxy's ClusterIP rules on node's host: vip:80 (TCP and UDP) ->
// ep:8080, in its own nft table, removed at the end of the test.
func kubeProxyDNAT(t *testing.T, node string, rules map[string]string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("table ip e2e-kube-proxy {\n\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n")
	for vip, ep := range rules {
		for _, proto := range []string{"tcp", "udp"} {
			fmt.Fprintf(&b, "\t\tip daddr %s %s dport 80 dnat to %s:8080\n", vip, proto, ep)
		}
	}
	b.WriteString("\t}\n}\n")
	ns, err := theLab.Netns(node)
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "ip", "e2e-kube-proxy").CombinedOutput(); err != nil {
			t.Errorf("delete nft table on %s: %v %s", node, err, out)
		}
	})
}

// A pod reaches a "ClusterIP" that its node's host DNATs (as kube-proxy does) to an endpoint pod
// on the same node and on another node; the answer comes from the ClusterIP (the host undid the
// DNAT: the replies went back out srcip-gw0, also those that came back over the tunnel), and the
// endpoint sees the client pod's own address.
func TestPodToClusterIP(t *testing.T) {
	const vipLocal, vipRemote = "10.96.5.1", "10.96.5.2"
	kubeProxyDNAT(t, "node1", map[string]string{vipLocal: echoD.ip, vipRemote: echoA.ip})
	kubeProxyDNAT(t, "node2", map[string]string{vipRemote: echoC.ip})
	for _, proto := range []string{"tcp", "udp"} {
		request(t, "echo-c", proto, vipLocal+":80", "echo-d", echoC.ip)
		request(t, "echo-c", proto, vipRemote+":80", "echo-a", echoC.ip)
		request(t, "echo-a", proto, vipRemote+":80", "echo-c", echoA.ip)
	}
	// node1 committed the DNATed connection to the remote endpoint with OriginGateway (4).
	ct, err := theLab.Appctl("node1", "dpctl/dump-conntrack", "zone="+zonePod)
	require.NoError(t, err)
	assert.Regexp(t, `tcp,orig=\(src=10\.244\.1\.5,dst=10\.244\.2\.5,sport=\d+,dport=8080\).*mark=4`, ct)
}
