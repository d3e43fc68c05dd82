package kubee2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// TestEgressPortBlocksExhausted: every agent runs with a pool of two blocks
// (--egress-port-range=1024-2047 --egress-port-block-size=512) and the policy selects three
// pods on three nodes (echo-a node2, echo-b node3, echo-c node1). Two get a block; the third
// waits. The test requires: the policy's condition PortBlocksExhausted True (PoolExhausted) and
// a Warning Event PortBlocksExhausted on it; the waiting pod's TCP to the server fails and its
// node counts the drops on the prio 21 egress-no-port-block flow, and neither its TCP nor its UDP
// gets an answer (SNATed to its node's address on the host path it would be answered); the two
// other pods keep working through the egress IP, from ports of their blocks.
func TestEgressPortBlocksExhausted(t *testing.T) {
	for _, n := range theLab.Nodes {
		require.NoError(t, theLab.SetAgentExtraArgs(n.Name, "--egress-port-range=1024-2047", "--egress-port-block-size=512"))
		require.NoError(t, theLab.RestartAgent(n.Name))
	}
	t.Cleanup(func() {
		for _, n := range theLab.Nodes {
			assert.NoError(t, theLab.SetAgentExtraArgs(n.Name))
			assert.NoError(t, theLab.RestartAgent(n.Name))
		}
	})
	serveFromClient(t)
	pods := map[string]string{"echo-a": "node2", "echo-b": "node3", "echo-c": "node1"}
	ensurePolicyFor(t, "echo-a", "echo-b", "echo-c")
	activeGateway(t, "", 30*time.Second)
	ctx := context.Background()

	// Two blocks allocated, the condition set.
	var g *egressv1.EgressGateway
	require.NoError(t, lab.WaitFor(func() error {
		var err error
		g, err = ecs.OvsSrcipV1alpha1().EgressGateways().Get(ctx, egwName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(g.Status.Conditions, egressv1.ConditionPortBlocksExhausted)
		if len(g.Status.PortBlocks) != 2 || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("portBlocks %+v, condition %+v", g.Status.PortBlocks, c)
		}
		return nil
	}, 30*time.Second))
	c := meta.FindStatusCondition(g.Status.Conditions, egressv1.ConditionPortBlocksExhausted)
	assert.Equal(t, egressv1.ReasonPoolExhausted, c.Reason)
	t.Logf("condition %s=%s reason %s: %s", c.Type, c.Status, c.Reason, c.Message)
	blocks := map[string][2]int{}
	for _, b := range g.Status.PortBlocks {
		blocks[b.Pod[strings.LastIndex(b.Pod, "/")+1:]] = [2]int{int(b.First), int(b.Size)}
	}
	waiting := ""
	for p := range pods {
		if _, ok := blocks[p]; !ok {
			waiting = p
		}
	}
	require.NotEmpty(t, waiting, "blocks %v", blocks)
	t.Logf("blocks (first, size) %v; waiting: %s on %s", blocks, waiting, pods[waiting])
	assert.Contains(t, c.Message, "/"+waiting+" (")

	// The Warning Event on the policy.
	require.NoError(t, lab.WaitFor(func() error {
		list, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "EgressGateway", "involvedObject.name": egwName, "reason": "PortBlocksExhausted"}.String()})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return fmt.Errorf("no PortBlocksExhausted Event")
		}
		e := list.Items[0]
		t.Logf("Event %s %s (%s): %s", e.Type, e.Reason, e.Source.Component, e.Message)
		return nil
	}, 20*time.Second))

	// The pods with a block work, from ports of their blocks; the waiting one does not.
	for p, b := range blocks {
		require.Eventually(t, func() bool {
			r, err := theLab.RequestWith(p, "tcp", clientIP+":"+egressPort, lab.RequestOpts{Timeout: "1s"})
			return err == nil && r.ClientIP() == egressIP && inBlock(r.Client, b[0], b[1])
		}, 20*time.Second, 200*time.Millisecond, "%s through the egress IP from its block %v", p, b)
		r, _ := theLab.RequestWith(p, "tcp", clientIP+":"+egressPort, lab.RequestOpts{Timeout: "1s"})
		t.Logf("%s (block %v): the server saw %s", p, b, r.Client)
	}
	for i := range 3 {
		r, err := theLab.RequestWith(waiting, "tcp", clientIP+":"+egressPort, lab.RequestOpts{Timeout: "1s"})
		assert.Error(t, err, "attempt %d: %s has no block, yet the server answered (saw %s)", i, waiting, r.Client)
		t.Logf("%s (no block) attempt %d: err=%v", waiting, i, err)
	}
	dump, err := theLab.DumpFlows(pods[waiting], "br-int")
	require.NoError(t, err)
	// dump-flows prints ct_state and the registers before the protocol.
	re := regexp.MustCompile(`n_packets=(\d+),.*priority=21,.*\btcp\b.*actions=drop`)
	dropped := ""
	var prio21 []string
	for _, l := range strings.Split(dump, "\n") {
		if strings.Contains(l, "priority=21,") {
			prio21 = append(prio21, strings.TrimSpace(l))
		}
		if m := re.FindStringSubmatch(l); m != nil && m[1] != "0" {
			dropped = strings.TrimSpace(l)
		}
	}
	assert.NotEmpty(t, dropped, "no egress-no-port-block drop counted on %s; its priority 21 flows:\n%s", pods[waiting], strings.Join(prio21, "\n"))
	t.Logf("%s: %s", pods[waiting], dropped)
	// UDP: the pods with a block are answered through the egress IP, the waiting one not at all.
	// (UDP may lose a datagram: retried until answered, each answer from the egress IP and the
	// pod's block.)
	for p, b := range blocks {
		var last string
		if !assert.Eventually(t, func() bool {
			r, err := theLab.RequestWith(p, "udp", clientIP+":"+egressPort, lab.RequestOpts{Timeout: "1s"})
			last = fmt.Sprintf("server saw %q, err %v", r.Client, err)
			return err == nil && r.ClientIP() == egressIP && inBlock(r.Client, b[0], b[1])
		}, 20*time.Second, 200*time.Millisecond, "%s UDP through the egress IP from its block %v", p, b) {
			t.Logf("%s UDP, last attempt: %s", p, last)
		}
	}
	out, err := theLab.RequestWith(waiting, "udp", clientIP+":"+egressPort, lab.RequestOpts{Timeout: "1s"})
	assert.Error(t, err, "%s UDP without a block was answered (the server saw %s)", waiting, out.Client)
}
