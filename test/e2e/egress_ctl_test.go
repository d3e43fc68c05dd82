package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// srcipctlBin returns $SRCIPCTL, or srcipctl built into a temporary directory.
func srcipctlBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SRCIPCTL"); p != "" {
		return p
	}
	out := filepath.Join(t.TempDir(), "srcipctl")
	b, err := exec.Command("go", "build", "-o", out, "github.com/ovs-srcip/ovs-srcip/cmd/srcipctl").CombinedOutput()
	require.NoError(t, err, "%s", b)
	return out
}

// srcipctl runs the CLI against node's agent and bridges (OVS_RUNDIR = the node's run directory).
func srcipctl(t *testing.T, bin, node string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+theLab.Node(node).Dir)
	out, err := cmd.CombinedOutput()
	t.Logf("%s: $ srcipctl %s\n%s", node, strings.Join(args, " "), out)
	require.NoError(t, err, "srcipctl %s on %s", strings.Join(args, " "), node)
	return string(out)
}

// ctlEgress is the part of `srcipctl get egress -o json` the test reads.
type ctlEgress struct {
	Name    string `json:"name"`
	Gateway bool   `json:"gateway"`
	IPs     []struct {
		IP, Gateway, ThisNode string
	} `json:"ips"`
	Pods []struct {
		Namespace, Name, EgressIP string
	} `json:"pods"`
	Flows []struct {
		Bridge, Table string
		Packets       uint64
	} `json:"flows"`
	Conditions []struct {
		Type, Status, Reason string
	} `json:"conditions"`
}

// TestEgressSrcipctl: `srcipctl get egress` (and `status`) on the pod's node and on the gateway
// after real egress traffic: roles, active gateway, selected pods, flows whose counters moved,
// conditions.
func TestEgressSrcipctl(t *testing.T) {
	bin := srcipctlBin(t)
	hostEcho(t, "client", "")
	target := clientIP + ":" + hostPort

	withEgressPolicy(t)
	require.NoError(t, lab.WaitFor(func() error {
		r, err := theLab.Request("echo-a", "tcp", target)
		if err != nil {
			return err
		}
		if r.ClientIP() != egressIP {
			return fmt.Errorf("server saw %s", r.Client)
		}
		return nil
	}, 30*time.Second), "echo-a never left as %s", egressIP)

	get := func(node string) ctlEgress {
		var v []ctlEgress
		require.NoError(t, json.Unmarshal([]byte(srcipctl(t, bin, node, "get", "egress", "-o", "json")), &v))
		require.Len(t, v, 1)
		return v[0]
	}
	packets := func(e ctlEgress, bridge, table string) uint64 {
		var n uint64
		for _, f := range e.Flows {
			if f.Bridge == bridge && f.Table == table {
				n += f.Packets
			}
		}
		return n
	}
	ready := func(e ctlEgress) string {
		for _, c := range e.Conditions {
			if c.Type == "Ready" {
				return c.Status + "/" + c.Reason
			}
		}
		return ""
	}

	gw := get("node3")
	assert.Equal(t, "job", gw.Name)
	assert.True(t, gw.Gateway, "node3 is the gateway")
	require.Len(t, gw.IPs, 1)
	assert.Equal(t, egressIP, gw.IPs[0].IP)
	assert.Equal(t, "node3", gw.IPs[0].Gateway)
	assert.Equal(t, "gateway", gw.IPs[0].ThisNode)
	assert.Empty(t, gw.Pods, "echo-a is not on node3")
	assert.NotZero(t, packets(gw, "br-int", "IntEgressSNAT"), "node3's SNAT flow counted echo-a's packets")
	assert.NotZero(t, packets(gw, "br-ex", "ExClassifier"), "node3's br-ex egress flows counted packets")
	assert.Equal(t, "True/GatewaysActive", ready(gw))

	pn := get("node2")
	assert.False(t, pn.Gateway, "node2 is not a gateway")
	require.Len(t, pn.IPs, 1)
	assert.Equal(t, "node3", pn.IPs[0].Gateway)
	assert.Equal(t, "none", pn.IPs[0].ThisNode)
	require.Len(t, pn.Pods, 1)
	assert.Equal(t, "echo-a", pn.Pods[0].Name)
	assert.Equal(t, egressIP, pn.Pods[0].EgressIP)
	assert.NotZero(t, packets(pn, "br-int", "IntL3Forwarding"), "echo-a's egress flow counted its first packets")
	assert.NotZero(t, packets(pn, "br-int", "IntEgressOut"), "node2's tunnel flow to node3 counted packets")
	assert.Equal(t, "True/GatewaysActive", ready(pn))

	txt := srcipctl(t, bin, "node2", "get", "egress")
	assert.Contains(t, txt, "EGRESSGATEWAY")
	assert.Regexp(t, `job\s+`+strings.ReplaceAll(egressIP, ".", `\.`)+`\s+node3\s+none\s+\S*/echo-a`, txt)
	assert.Contains(t, txt, "Ready=True(GatewaysActive)")
	st := srcipctl(t, bin, "node3", "status")
	assert.Contains(t, st, "egressgateway job (generation 1): this node gateway")
	assert.Contains(t, st, "egress IP "+egressIP+": active gateway node3, eligible node3, this node gateway")
}

// withEgressPolicy writes the policy selecting echo-a with gateway node3 and, at cleanup,
// removes it and waits until echo-a leaves with node2's address again (so the next test starts
// without egress). The client's echo server (hostEcho) must be started before.
func withEgressPolicy(t *testing.T) {
	t.Helper()
	writeManifest(t, "egress.yaml", egressPolicy("job", egressIP, "node3", ""))
	t.Cleanup(func() {
		writeManifest(t, "egress.yaml", "")
		assert.NoError(t, lab.WaitFor(func() error {
			r, err := theLab.Request("echo-a", "tcp", clientIP+":"+hostPort)
			if err != nil {
				return err
			}
			if r.ClientIP() != "192.0.2.12" {
				return fmt.Errorf("server saw %s", r.Client)
			}
			return nil
		}, 20*time.Second), "echo-a still leaves with the egress IP after the policy was removed")
	})
}
