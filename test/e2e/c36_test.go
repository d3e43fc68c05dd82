package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// C36 (docs/field-cases.md#c36): a port that carries echo-c's identity (iface-id demo_echo-c, its
// IP) but the UID of a previous pod of that name - a predecessor's port that lingers, or a stale
// or hostile OVSDB writer - is ignored although it is the newest port: the Pod object's UID
// (metadata.uid, on the port as external_ids:iface-id-ver) picks echo-c's own port. Requests keep
// reaching echo-c, the stale port receives nothing, and nothing flaps.
func TestC36PredecessorPortIgnored(t *testing.T) {
	const stale, uid, oldUID = "zzc36", "c36-uid-2", "c36-uid-1"
	addr := "192.0.2.11:30101" // svcLocal: echo-c on node1
	checkReply(t, okNow(t, "tcp", addr), addr, "echo-c")
	pod := theLab.Pod("echo-c")
	require.NotNil(t, pod)
	// echo-c gets a UID in its Pod object and on its port, as srcip-cni would write it.
	pods := filepath.Join(dir, "pods.yaml")
	orig, err := os.ReadFile(pods)
	require.NoError(t, err)
	withUID := strings.Replace(string(orig), "  name: echo-c\n  namespace: demo\n", "  name: echo-c\n  namespace: demo\n  uid: "+uid+"\n", 1)
	require.NotEqual(t, string(orig), withUID)
	_, err = theLab.Vsctl("node1", "set", "interface", pod.HostPort, "external_ids:iface-id-ver="+uid)
	require.NoError(t, err)
	writeManifest(t, "pods.yaml", withUID)
	defer func() {
		writeManifest(t, "pods.yaml", string(orig))
		_, err := theLab.Vsctl("node1", "remove", "interface", pod.HostPort, "external_ids", "iface-id-ver")
		assert.NoError(t, err)
	}()
	off := logSize(t, "node1")
	_, err = theLab.Vsctl("node1", "add-port", "br-int", stale, "--", "set", "Interface", stale, "type=internal",
		"external_ids:iface-id=demo_echo-c", "external_ids:iface-id-ver="+oldUID,
		"external_ids:attached-mac=0a:58:0a:f4:01:66", "external_ids:ip_addresses="+pod.Prefix.String())
	require.NoError(t, err)
	defer func() {
		_, err := theLab.Vsctl("node1", "--if-exists", "del-port", "br-int", stale)
		assert.NoError(t, err)
	}()
	ns, err := theLab.Netns("node1")
	require.NoError(t, err)
	_, err = theLab.Exec("node1", "ip", "link", "set", stale, "up")
	require.NoError(t, err, ns)
	// The agent has seen the new port once it reports a choice between the two.
	require.NoError(t, lab.WaitFor(func() error {
		if !strings.Contains(logSince(t, "node1", off), stale) {
			return fmt.Errorf("the agent has not seen the stale port yet")
		}
		return nil
	}, 15*time.Second))
	time.Sleep(500 * time.Millisecond)
	out, err := theLab.DumpFlows("node1", "br-int", "cookie=0x5c04000000000000/0xffff000000000000")
	require.NoError(t, err)
	assert.NotContains(t, out, "dl_src=0a:58:0a:f4:01:66", "the predecessor's port got flows")
	assert.Contains(t, out, "dl_src="+pod.MAC, "echo-c's own port keeps its flows")
	seen := capture(t, "node1", stale, "ip")
	for i := 0; i < 6; i++ {
		r, err := theLab.RequestWith("", "tcp", addr, lab.RequestOpts{Timeout: "2s"})
		if assert.NoError(t, err, "request %d", i) {
			checkReply(t, r, addr, "echo-c")
		}
	}
	assert.Empty(t, seen(), "the predecessor's port received traffic")
	assert.Contains(t, logSince(t, "node1", off), "belongs to a previous pod (UID "+oldUID+", the Pod's is "+uid+")")
	n, log := steadyBundles(t, "node1", 5*time.Second)
	assert.Zero(t, n, "node1 rewrote flows %d times in steady state:\n%s", n, tail(log, 12))
}
