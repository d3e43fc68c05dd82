package ofctl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// srcip-cni's port plumbing on a dummy-datapath OVS: attach with external_ids and an ofport,
// list, detach by container id (idempotent), and the pod-kind flow wait.
func TestAttachDetachContainerPort(t *testing.T) {
	ctx, sb, db := startNode(t)
	_, err := db.EnsureIntegration(ctx, integration)
	require.NoError(t, err)

	dp, err := db.BridgeDatapathType(ctx, "br-int")
	require.NoError(t, err)
	assert.Equal(t, "dummy", dp)
	_, err = db.BridgeDatapathType(ctx, "br-none")
	assert.ErrorIs(t, err, ofctl.ErrBridgeNotFound)

	ids := map[string]string{ofctl.ExtIDPodNamespace: "ns1", ofctl.ExtIDPodName: "web-0", ofctl.ExtIDPodUID: "uid-1",
		ofctl.ExtIDAttachedMAC: "0a:58:0a:f4:01:05", ofctl.ExtIDIPAddresses: "10.244.1.5/24",
		ofctl.ExtIDContainer: "ctr1", ofctl.ExtIDIfName: "eth0"}
	ofport, err := db.AttachPort(ctx, "br-int", "srcipaaaa", ids, 10*time.Second)
	require.NoError(t, err)
	assert.Positive(t, ofport)
	assert.Equal(t, "10.244.1.5/24", vsGet(t, sb, "Interface", "srcipaaaa", "external_ids:ip_addresses"))
	assert.Equal(t, "ctr1", vsGet(t, sb, "Interface", "srcipaaaa", "external_ids:srcip-cni-container"))
	assert.Contains(t, sb.Vsctl(t, "list-ports", "br-int"), "srcipaaaa")

	// Again: same port, same ofport, no error.
	again, err := db.AttachPort(ctx, "br-int", "srcipaaaa", ids, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ofport, again)
	// A port of another bridge is refused.
	_, err = db.AttachPort(ctx, "br-int", "eth0", ids, time.Second)
	assert.ErrorContains(t, err, "is on bridge br-ex")
	_, err = db.AttachPort(ctx, "br-none", "x", ids, time.Second)
	assert.ErrorIs(t, err, ofctl.ErrBridgeNotFound)

	// The agent's PodPorts sees it with the identity srcip-cni wrote.
	pps, err := db.PodPorts(ctx, "br-int")
	require.NoError(t, err)
	require.Len(t, pps, 1)
	assert.Equal(t, "web-0", pps[0].Name)
	assert.Equal(t, "uid-1", pps[0].UID)
	assert.Equal(t, "10.244.1.5", pps[0].IPs[0].String())

	_, err = db.AttachPort(ctx, "br-int", "srcipbbbb", map[string]string{ofctl.ExtIDContainer: "ctr2"}, 10*time.Second)
	require.NoError(t, err)
	ports, err := db.ContainerPorts(ctx, "br-int")
	require.NoError(t, err)
	require.Len(t, ports, 2)
	assert.Equal(t, "srcipaaaa", ports[0].Name)
	assert.Equal(t, "ctr1", ports[0].ContainerID)
	assert.Equal(t, "eth0", ports[0].IfName)
	assert.Equal(t, ofport, ports[0].OFPort)
	assert.Equal(t, "ctr2", ports[1].ContainerID)

	// The agent's acknowledgement: srcip-cni waits for it; a new attachment of the same port
	// drops it (it waits for a new one).
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = db.WaitExternalID(wctx, "srcipaaaa", ofctl.ExtIDAgentFlows)
	cancel()
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	pod := flows.NewCookie(flows.KindPod, 7)
	require.NoError(t, db.AckPodFlows(ctx, map[string]flows.Cookie{"srcipaaaa": pod}))
	wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	v, err := db.WaitExternalID(wctx, "srcipaaaa", ofctl.ExtIDAgentFlows)
	cancel()
	require.NoError(t, err)
	assert.Equal(t, pod.String(), v)
	require.Eventually(t, func() bool {
		pps, err := db.PodPorts(ctx, "br-int")
		require.NoError(t, err)
		return len(pps) == 1 && pps[0].Acked == pod
	}, 5*time.Second, 10*time.Millisecond, "PodPort.Acked")
	_, err = db.AttachPort(ctx, "br-int", "srcipaaaa", ids, 10*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return !strings.Contains(sb.Vsctl(t, "get", "Interface", "srcipaaaa", "external_ids"), ofctl.ExtIDAgentFlows)
	}, 5*time.Second, 10*time.Millisecond, "a new attachment drops the acknowledgement")

	// Detach by container id; again is a no-op; a missing bridge is no error.
	names, err := db.DetachContainer(ctx, "br-int", "ctr1", "eth0")
	require.NoError(t, err)
	assert.Equal(t, []string{"srcipaaaa"}, names)
	assert.NotContains(t, sb.Vsctl(t, "list-ports", "br-int"), "srcipaaaa")
	assert.Empty(t, sb.Vsctl(t, "--bare", "--columns=name", "find", "Interface", "name=srcipaaaa"), "the Interface row is gone too")
	names, err = db.DetachContainer(ctx, "br-int", "ctr1", "eth0")
	require.NoError(t, err)
	assert.Empty(t, names)
	names, err = db.DetachContainer(ctx, "br-none", "ctr1", "eth0")
	require.NoError(t, err)
	assert.Empty(t, names)
	// ctr2's port has no ifname: it matches any.
	names, err = db.DetachContainer(ctx, "br-int", "ctr2", "eth0")
	require.NoError(t, err)
	assert.Equal(t, []string{"srcipbbbb"}, names)
	require.NoError(t, db.DetachPorts(ctx, "br-int", "no-such-port"))
}

// srcip-cni's narrow client (OnlyPorts): its own port is attached, acknowledged and detached as
// through a full client; another port's rows never reach its cache; a port of another bridge
// under its name is still refused.
func TestOnlyPortsClient(t *testing.T) {
	ctx, sb, db := startNode(t)
	_, err := db.EnsureIntegration(ctx, integration)
	require.NoError(t, err)
	_, err = db.AttachPort(ctx, "br-int", "srcipother", map[string]string{ofctl.ExtIDContainer: "ctr0"}, 10*time.Second)
	require.NoError(t, err)

	narrow, err := ofctl.Connect(ctx, sb.Endpoint(), ofctl.OnlyPorts("srcipaaaa", "eth0"))
	require.NoError(t, err)
	t.Cleanup(narrow.Close)
	dp, err := narrow.BridgeDatapathType(ctx, "br-int")
	require.NoError(t, err)
	assert.Equal(t, "dummy", dp)
	_, err = narrow.BridgeDatapathType(ctx, "br-none")
	assert.ErrorIs(t, err, ofctl.ErrBridgeNotFound)

	ids := map[string]string{ofctl.ExtIDPodNamespace: "ns1", ofctl.ExtIDPodName: "web-0",
		ofctl.ExtIDAttachedMAC: "0a:58:0a:f4:01:05", ofctl.ExtIDIPAddresses: "10.244.1.5/24",
		ofctl.ExtIDContainer: "ctr1", ofctl.ExtIDIfName: "eth0"}
	require.NoError(t, narrow.DetachPorts(ctx, "br-int", "srcipaaaa"), "no leftover: no-op")
	ofport, err := narrow.AttachPort(ctx, "br-int", "srcipaaaa", ids, 10*time.Second)
	require.NoError(t, err)
	assert.Positive(t, ofport)
	_, err = narrow.AttachPort(ctx, "br-int", "eth0", ids, time.Second)
	assert.ErrorContains(t, err, "is on bridge br-ex", "the second name's rows are monitored too")

	// The full client sees both pods' ports; the narrow one only its own.
	_, err = db.AttachPort(ctx, "br-int", "srcipbbbb", map[string]string{ofctl.ExtIDContainer: "ctr2"}, 10*time.Second)
	require.NoError(t, err)
	ports, err := narrow.ContainerPorts(ctx, "br-int")
	require.NoError(t, err)
	require.Len(t, ports, 1)
	assert.Equal(t, "srcipaaaa", ports[0].Name)
	assert.Equal(t, ofport, ports[0].OFPort)
	ports, err = db.ContainerPorts(ctx, "br-int")
	require.NoError(t, err)
	assert.Len(t, ports, 3)

	pod := flows.NewCookie(flows.KindPod, 9)
	require.NoError(t, db.AckPodFlows(ctx, map[string]flows.Cookie{"srcipaaaa": pod}))
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	v, err := narrow.WaitExternalID(wctx, "srcipaaaa", ofctl.ExtIDAgentFlows)
	cancel()
	require.NoError(t, err)
	assert.Equal(t, pod.String(), v)

	require.NoError(t, narrow.DetachPorts(ctx, "br-int", "srcipaaaa", "srcipbbbb"))
	assert.NotContains(t, sb.Vsctl(t, "list-ports", "br-int"), "srcipaaaa")
	assert.Contains(t, sb.Vsctl(t, "list-ports", "br-int"), "srcipbbbb", "a port outside the monitor is not seen, so not removed")

	// No names: bridges only.
	bare, err := ofctl.Connect(ctx, sb.Endpoint(), ofctl.OnlyPorts())
	require.NoError(t, err)
	t.Cleanup(bare.Close)
	ports, err = bare.ContainerPorts(ctx, "br-int")
	require.NoError(t, err)
	assert.Empty(t, ports)
}
