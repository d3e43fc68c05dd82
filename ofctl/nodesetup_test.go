package ofctl_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ovstest"
)

// EnsureBridge creates a bridge with its NIC and an internal port, then changes nothing; a
// changed MTU is one update; DeleteBridge removes the bridge with its ports, once.
func TestEnsureBridgeAndDeleteBridge(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	db, err := ofctl.Connect(ctx, sb.Endpoint())
	require.NoError(t, err)
	t.Cleanup(db.Close)

	spec := ofctl.BridgeSpec{Name: "br-x", DatapathType: "dummy", HWAddr: "02:00:00:00:00:42",
		Ports: []string{"nic0"}, InternalPorts: map[string]int{"gw0": 1450}}
	changes, err := db.EnsureBridge(ctx, spec)
	require.NoError(t, err)
	assert.Len(t, changes, 3, "%v", changes)
	_, mac, err := db.WaitInterface(ctx, "br-x", true, 10*time.Second)
	require.NoError(t, err)
	require.NotNil(t, mac)
	// ovs-vswitchd may report the bridge's first, random MAC before other_config:hwaddr takes
	// effect: mac_in_use converges to the one asked for.
	require.Eventually(t, func() bool {
		return vsGet(t, sb, "Interface", "br-x", "mac_in_use") == "02:00:00:00:00:42"
	}, 10*time.Second, 20*time.Millisecond, "mac_in_use of br-x")
	ofport, _, err := db.WaitInterface(ctx, "gw0", false, 10*time.Second)
	require.NoError(t, err)
	assert.Positive(t, ofport)
	assert.Equal(t, "secure", vsGet(t, sb, "Bridge", "br-x", "fail_mode"))
	assert.Equal(t, "dummy", vsGet(t, sb, "Bridge", "br-x", "datapath_type"))
	assert.Equal(t, "internal", vsGet(t, sb, "Interface", "gw0", "type"))
	assert.Equal(t, "1450", vsGet(t, sb, "Interface", "gw0", "mtu_request"))
	ports, dp, err := db.Bridge(ctx, "br-x")
	require.NoError(t, err)
	assert.Equal(t, []string{"br-x", "gw0", "nic0"}, ports)
	assert.Equal(t, "dummy", dp)

	before := rows(t, sb)
	require.Eventually(t, func() bool {
		changes, err = db.EnsureBridge(ctx, spec)
		return err == nil && len(changes) == 0
	}, 5*time.Second, 50*time.Millisecond, "second EnsureBridge: %v %v", changes, err)
	assert.Equal(t, before, rows(t, sb), "no write the second time")

	spec.InternalPorts["gw0"] = 1400
	changes, err = db.EnsureBridge(ctx, spec)
	require.NoError(t, err)
	assert.Equal(t, []string{"set mtu_request 1400 on gw0"}, changes)

	// A port on another bridge is refused.
	_, err = db.EnsureBridge(ctx, ofctl.BridgeSpec{Name: "br-y", DatapathType: "dummy", Ports: []string{"nic0"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "port nic0 is on bridge br-x")

	deleted, err := db.DeleteBridge(ctx, "br-x")
	require.NoError(t, err)
	assert.True(t, deleted)
	require.NoError(t, db.WaitBridgeGone(ctx, "br-x", 5*time.Second))
	assert.NotContains(t, sb.Vsctl(t, "list-br"), "br-x")
	assert.NotContains(t, strings.Fields(sb.Vsctl(t, "--bare", "--columns=name", "list", "Interface")), "gw0")
	deleted, err = db.DeleteBridge(ctx, "br-x")
	require.NoError(t, err)
	assert.False(t, deleted)
}
