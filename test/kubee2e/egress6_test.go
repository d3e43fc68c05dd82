package kubee2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// IPv6 egress gateways (issue 22, docs/egress.md "IPv6") against the live API server: the twin
// of TestEgressFailoverSessions for the IPv6 egress IP of a dual-stack policy.

const (
	egressIP6 = "2001:db8:0:2::50"
	client6IP = "2001:db8:0:100::10"
	egw6Name  = "job6"
)

// TestEgressFailoverSessionsIPv6: a policy with an IPv4 and an IPv6 egress IP selects echo-a
// (node1 and node3 eligible); echo-a's IPv6 leaves as the IPv6 egress IP, its IPv4 as the IPv4
// one. The IPv6 egress IP's active gateway dies hard (agent and ovs-vswitchd SIGKILLed) while 5
// TCP connections and one UDP stream over IPv6 run: figures printed; required: new IPv6
// connections leave with the IPv6 egress IP again, and the server never saw another source.
func TestEgressFailoverSessionsIPv6(t *testing.T) {
	const nTCP = 5
	ctx := context.Background()
	serveFromClient(t)
	egw := &egressv1.EgressGateway{
		ObjectMeta: metav1.ObjectMeta{Name: egw6Name},
		Spec: egressv1.EgressGatewaySpec{
			EgressIPs: []string{egressIP6},
			GatewayNodeSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpIn, Values: gatewayCandidates}}},
			PodSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"pod": "echo-a"}},
			Destinations: []string{"2001:db8:0:100::/64"},
		},
	}
	_, err := ecs.OvsSrcipV1alpha1().EgressGateways().Create(ctx, egw, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, ecs.OvsSrcipV1alpha1().EgressGateways().Delete(ctx, egw6Name, metav1.DeleteOptions{}))
		time.Sleep(2 * time.Second)
	})
	target := net.JoinHostPort(client6IP, egressPort)
	newConn := func() (string, error) {
		r, err := theLab.RequestWith("echo-a", "tcp", target, lab.RequestOpts{Timeout: "1s"})
		if err != nil {
			return "", err
		}
		return r.ClientIP(), nil
	}
	waitNew := func(start time.Time, timeout time.Duration) time.Duration {
		t.Helper()
		var took time.Duration
		require.NoError(t, lab.WaitFor(func() error {
			src, err := newConn()
			if err != nil {
				return err
			}
			if src != egressIP6 {
				return fmt.Errorf("the server saw %s", src)
			}
			took = time.Since(start)
			return nil
		}, timeout), "new IPv6 connections from echo-a through the IPv6 egress IP")
		return took
	}
	active := activeGatewayOf(t, egw6Name, egressIP6, "", 30*time.Second)
	waitNew(time.Now(), 20*time.Second)
	// The policy governs IPv6 only: echo-a's IPv4 keeps node2's address.
	r, err := theLab.RequestWith("echo-a", "tcp", clientIP+":"+egressPort, lab.RequestOpts{Timeout: "2s"})
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.12", r.ClientIP(), "IPv4 of echo-a under an IPv6-only policy")

	var streams []*tcpStream
	for range nTCP {
		streams = append(streams, startTCPStreamTo(t, target))
	}
	ns, err := theLab.Netns("echo-a")
	require.NoError(t, err)
	udp := exec.Command("ip", "netns", "exec", ns, theLab.EchoBin(), "udpstream", "--addr", target, "--every", "50ms")
	udpIn, err := udp.StdinPipe()
	require.NoError(t, err)
	var udpOut bytes.Buffer
	udp.Stdout = &udpOut
	require.NoError(t, udp.Start())
	t.Cleanup(func() { udpIn.Close(); _ = udp.Wait() })
	time.Sleep(2 * time.Second)

	// The new gateway's unsolicited Neighbor Advertisement, as the router sees it.
	na := exec.Command("ip", "netns", "exec", theLab.RouterNetns, "tcpdump", "-l", "-n", "-e", "-v", "-c", "1", "-i", "br0",
		"icmp6 and ip6[40] == 136 and ip6 dst ff02::1")
	var naOut bytes.Buffer
	na.Stdout = &naOut
	require.NoError(t, na.Start())
	t.Cleanup(func() { _ = na.Process.Kill(); _ = na.Wait() })
	time.Sleep(500 * time.Millisecond)

	start := time.Now()
	require.NoError(t, theLab.KillAgent(active))
	require.NoError(t, theLab.KillVswitchd(active))
	t.Cleanup(func() {
		assert.NoError(t, theLab.RestartVswitchd(active))
		assert.NoError(t, theLab.StartAgent(active))
	})
	took := waitNew(start, 60*time.Second)
	newGW := activeGatewayOf(t, egw6Name, egressIP6, active, 20*time.Second)
	time.Sleep(12 * time.Second)

	alive := 0
	for i, s := range streams {
		ok, gap, srcs, err := s.result(start)
		if ok {
			alive++
		}
		t.Logf("TCP6 #%d alive=%v longest-gap=%v sources=%v err=%v", i, ok, gap.Round(time.Millisecond), srcs, err)
		for _, src := range srcs {
			assert.Equal(t, egressIP6, src, "TCP stream %d: the server saw another source", i)
		}
	}
	udpIn.Close()
	require.NoError(t, udp.Wait())
	var u struct {
		Sent, Received int
		MaxGapMs       int64
		Clients        []string
	}
	require.NoError(t, json.Unmarshal(udpOut.Bytes(), &u), "udpstream printed %q", udpOut.String())
	for _, c := range u.Clients {
		assert.Equal(t, egressIP6, c, "UDP: the server saw another source")
	}
	naLine := strings.TrimSpace(naOut.String())
	assert.Contains(t, naLine, "tgt is "+egressIP6, "the router saw the new gateway's NA")
	t.Logf("unsolicited NA seen by the router: %s", strings.ReplaceAll(naLine, "\n", " "))
	t.Logf("FAILOVER IPv6 (agent and ovs-vswitchd of %s SIGKILLed; new gateway %s; lease duration 3s, renew deadline 2s, retry 500ms): "+
		"new connections work after %v; TCP sessions kept: %d/%d; UDP stream: %d sent, %d answered, longest silence %d ms, sources %v",
		active, newGW, took.Round(time.Millisecond), alive, nTCP, u.Sent, u.Received, u.MaxGapMs, u.Clients)
}
