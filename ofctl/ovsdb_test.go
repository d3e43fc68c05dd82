package ofctl_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ovstest"
)

// testContext returns a context with a per-test logger at verbosity 2 and a one minute deadline.
func testContext(t *testing.T) context.Context {
	ctx := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))))
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startNode starts a sandbox with br-ex (uplink eth0), connects a DB and returns both.
func startNode(t *testing.T) (context.Context, *ovstest.Sandbox, *ofctl.DB) {
	t.Helper()
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br-ex", "eth0")
	db, err := ofctl.Connect(ctx, sb.Endpoint())
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return ctx, sb, db
}

var integration = ofctl.IntegrationConfig{BrEx: "br-ex", BrInt: "br-int", Uplink: "eth0"}

// rows returns the uuids and the columns EnsureIntegration owns of every Bridge, Port and
// Interface row: equal snapshots mean no churn.
func rows(t *testing.T, sb *ovstest.Sandbox) string {
	var b strings.Builder
	b.WriteString(sb.Vsctl(t, "--bare", "--columns=_uuid,name,datapath_type,fail_mode,protocols,ports,flow_tables", "list", "Bridge"))
	b.WriteString(sb.Vsctl(t, "--bare", "--columns=_uuid,name,interfaces", "list", "Port"))
	b.WriteString(sb.Vsctl(t, "--bare", "--columns=_uuid,name,type,options", "list", "Interface"))
	return b.String()
}

func vsGet(t *testing.T, sb *ovstest.Sandbox, args ...string) string {
	return strings.Trim(strings.TrimSpace(sb.Vsctl(t, append([]string{"get"}, args...)...)), `"`)
}

func TestEnsureIntegration(t *testing.T) {
	ctx, sb, db := startNode(t)

	ports, err := db.EnsureIntegration(ctx, integration)
	require.NoError(t, err)
	for name, got := range map[string]int{"eth0": ports.ExUplink, "patch-ex-to-int": ports.ExPatch,
		"patch-int-to-ex": ports.IntPatch, "srcip-geneve0": ports.IntTunnel} {
		assert.Equal(t, vsGet(t, sb, "Interface", name, "ofport"), strconv.Itoa(got), name)
		assert.Positive(t, got, name)
	}
	mac, err := net.ParseMAC(vsGet(t, sb, "Interface", "br-ex", "mac_in_use"))
	require.NoError(t, err)
	assert.Equal(t, mac, ports.ExMAC)

	assert.Equal(t, "dummy", vsGet(t, sb, "Bridge", "br-int", "datapath_type"))
	assert.Equal(t, "secure", vsGet(t, sb, "Bridge", "br-int", "fail_mode"))
	assert.Equal(t, `[OpenFlow10, OpenFlow13, OpenFlow15]`, vsGet(t, sb, "Bridge", "br-int", "protocols"))
	assert.Equal(t, "patch", vsGet(t, sb, "Interface", "patch-int-to-ex", "type"))
	assert.Equal(t, "patch-ex-to-int", vsGet(t, sb, "Interface", "patch-int-to-ex", "options:peer"))
	assert.Equal(t, "patch-int-to-ex", vsGet(t, sb, "Interface", "patch-ex-to-int", "options:peer"))
	assert.Equal(t, "geneve", vsGet(t, sb, "Interface", "srcip-geneve0", "type"))
	assert.Equal(t, `{dst_port="6081", key=flow, remote_ip=flow}`, vsGet(t, sb, "Interface", "srcip-geneve0", "options"))
	assert.Contains(t, sb.Vsctl(t, "list-ports", "br-int"), "srcip-geneve0")

	// Run twice: not one row written.
	before := rows(t, sb)
	again, err := db.EnsureIntegration(ctx, integration)
	require.NoError(t, err)
	assert.Equal(t, ports, again)
	assert.Equal(t, before, rows(t, sb))

	// A wrong option and type are corrected; foreign options are kept.
	sb.Vsctl(t, "set", "Interface", "srcip-geneve0", "options:dst_port=1234", "options:csum=true")
	sb.Vsctl(t, "set", "Interface", "patch-ex-to-int", "options:peer=elsewhere")
	sb.Vsctl(t, "set", "Bridge", "br-int", "fail_mode=standalone", "protocols=OpenFlow13")
	require.Eventually(t, func() bool {
		_, err := db.EnsureIntegration(ctx, integration)
		require.NoError(t, err)
		return vsGet(t, sb, "Interface", "srcip-geneve0", "options:dst_port") == "6081"
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, "true", vsGet(t, sb, "Interface", "srcip-geneve0", "options:csum"))
	assert.Equal(t, "patch-int-to-ex", vsGet(t, sb, "Interface", "patch-ex-to-int", "options:peer"))
	assert.Equal(t, "secure", vsGet(t, sb, "Bridge", "br-int", "fail_mode"))
	assert.Equal(t, `[OpenFlow10, OpenFlow13, OpenFlow15]`, vsGet(t, sb, "Bridge", "br-int", "protocols"))
}

func TestEnsureIntegrationErrors(t *testing.T) {
	ctx, _, db := startNode(t)
	c := integration
	c.BrEx = "br-nope"
	_, err := db.EnsureIntegration(ctx, c)
	require.ErrorIs(t, err, ofctl.ErrBridgeNotFound)
	assert.Contains(t, err.Error(), "br-nope")
	assert.Contains(t, err.Error(), "srcip-agent node-setup", "says what to do")

	c = integration
	c.Uplink = "eth9"
	_, err = db.EnsureIntegration(ctx, c)
	require.ErrorIs(t, err, ofctl.ErrPortNotFound)
	assert.Contains(t, err.Error(), "eth9")
}

func TestEnsureIntegrationExistingBrInt(t *testing.T) {
	ctx, sb, db := startNode(t)
	sb.AddBridge(t, "br-int")
	sb.Vsctl(t, "set", "Bridge", "br-int", "protocols=OpenFlow14")
	c := integration
	c.GeneveUDPPort = 6082
	c.GenevePort = "gnv1"
	ports, err := db.EnsureIntegration(ctx, c)
	require.NoError(t, err)
	assert.Positive(t, ports.IntTunnel)
	assert.Equal(t, "6082", vsGet(t, sb, "Interface", "gnv1", "options:dst_port"))
	assert.Equal(t, `[OpenFlow10, OpenFlow13, OpenFlow14, OpenFlow15]`, vsGet(t, sb, "Bridge", "br-int", "protocols"))
}

func TestNameTables(t *testing.T) {
	ctx, sb, db := startNode(t)
	require.NoError(t, db.NameTables(ctx, "br-ex", map[int]string{0: "ExClassifier", 40: "ExServiceLB"}))
	of := ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex"))
	require.NoError(t, of.BundleText(ctx, []string{"flow add cookie=0x5c01000000000001,table=40,priority=10,ip,actions=drop"}))
	require.Eventually(t, func() bool {
		out, err := of.DumpFlows(ctx, "")
		require.NoError(t, err)
		return strings.Contains(out, "table=ExServiceLB")
	}, 5*time.Second, 20*time.Millisecond)

	// Unchanged names write nothing; a new name renames in place.
	before := sb.Vsctl(t, "--bare", "--columns=_uuid,name", "list", "Flow_Table")
	require.NoError(t, db.NameTables(ctx, "br-ex", map[int]string{0: "ExClassifier", 40: "ExServiceLB"}))
	assert.Equal(t, before, sb.Vsctl(t, "--bare", "--columns=_uuid,name", "list", "Flow_Table"))
	require.NoError(t, db.NameTables(ctx, "br-ex", map[int]string{40: "Renamed"}))
	assert.Equal(t, "Renamed", vsGet(t, sb, "Flow_Table", vsGet(t, sb, "Bridge", "br-ex", "flow_tables:40"), "name"))

	require.ErrorIs(t, db.NameTables(ctx, "br-nope", map[int]string{1: "x"}), ofctl.ErrBridgeNotFound)
}

func TestPodPorts(t *testing.T) {
	ctx, sb, db := startNode(t)
	_, err := db.EnsureIntegration(ctx, integration)
	require.NoError(t, err)
	add := func(name string, ids ...string) {
		args := []string{"add-port", "br-int", name, "--", "set", "Interface", name, "type=dummy"}
		for _, id := range ids {
			args = append(args, "external_ids:"+id)
		}
		sb.Vsctl(t, args...)
	}
	add("ovn1", "iface-id=ns-a_pod-1", "attached-mac=0a:58:0a:f4:00:05", `ip_addresses="10.244.0.5/24,fd00::5/64"`)
	add("antrea1", "pod-namespace=ns-b", "pod-name=pod-2", "attached-mac=0a:58:0a:f4:00:06", "ip=10.244.0.6")
	add("chained1", "pod-namespace=ns-b", "pod-name=pod-5", "attached-mac=0a:58:0a:58:00:05", `ip_addresses="10.88.0.5/24"`, "srcip-cni-mode=chained")
	add("noip", "iface-id=ns-c_pod_3", "attached-mac=0a:58:0a:f4:00:07")
	add("nomac", "iface-id=ns-d_pod-4")
	add("plain")

	want := []flows.PodPort{
		{Namespace: "ns-a", Name: "pod-1", Interface: "ovn1", MAC: mustMAC("0a:58:0a:f4:00:05"),
			IPs: []netip.Addr{netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("fd00::5")}},
		{Namespace: "ns-b", Name: "pod-2", Interface: "antrea1", MAC: mustMAC("0a:58:0a:f4:00:06"),
			IPs: []netip.Addr{netip.MustParseAddr("10.244.0.6")}},
		{Namespace: "ns-b", Name: "pod-5", Interface: "chained1", MAC: mustMAC("0a:58:0a:58:00:05"),
			IPs: []netip.Addr{netip.MustParseAddr("10.88.0.5")}, Chained: true},
		{Namespace: "ns-c", Name: "pod_3", Interface: "noip", MAC: mustMAC("0a:58:0a:f4:00:07")},
	}
	for i := range want {
		p, err := strconv.Atoi(vsGet(t, sb, "Interface", want[i].Interface, "ofport"))
		require.NoError(t, err)
		want[i].OFPort = p
	}
	var got []flows.PodPort
	require.Eventually(t, func() bool {
		got, err = db.PodPorts(ctx, "br-int")
		require.NoError(t, err)
		return len(got) == len(want) && got[0].OFPort > 0
	}, 5*time.Second, 20*time.Millisecond, "got %+v", got)
	assert.Equal(t, want, got)

	_, err = db.PodPorts(ctx, "br-nope")
	require.ErrorIs(t, err, ofctl.ErrBridgeNotFound)
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func TestChangesAndReconnect(t *testing.T) {
	ctx, sb, db := startNode(t)
	_, err := db.EnsureIntegration(ctx, integration)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	drain(db.Changes())

	sb.Vsctl(t, "set", "Interface", "eth0", "external_ids:x=y")
	select {
	case <-db.Changes():
	case <-time.After(5 * time.Second):
		t.Fatal("no change notification after an Interface update")
	}

	// Interface statistics (updated every few seconds) are not monitored: no notification.
	drain(db.Changes())
	select {
	case <-db.Changes():
		t.Fatal("change notification without a change")
	case <-time.After(6 * time.Second):
	}

	// The client reconnects by itself after an ovsdb-server restart and repopulates its cache,
	// which Changes reports.
	drain(db.Changes())
	sb.StopOVSDB(t)
	sb.StartOVSDB(t)
	require.Eventually(t, db.Connected, 15*time.Second, 20*time.Millisecond)
	select {
	case <-db.Changes():
	case <-time.After(15 * time.Second):
		t.Fatal("no change notification after an ovsdb-server restart")
	}
	// The connection works again: a new pod port is seen.
	sb.Vsctl(t, "add-port", "br-int", "p1", "--", "set", "Interface", "p1", "type=dummy",
		"external_ids:iface-id=ns_p1", "external_ids:attached-mac=02:00:00:00:00:01")
	require.Eventually(t, func() bool {
		pods, err := db.PodPorts(ctx, "br-int")
		require.NoError(t, err)
		return len(pods) == 1
	}, 5*time.Second, 20*time.Millisecond)
	_, err = db.EnsureIntegration(ctx, integration)
	require.NoError(t, err)
}

func TestConnectFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(testContext(t), 2*time.Second)
	defer cancel()
	_, err := ofctl.Connect(ctx, "unix:/nonexistent/db.sock")
	require.Error(t, err)
	assert.False(t, errors.Is(err, ofctl.ErrBridgeNotFound))
}

// Without a configured uplink, the only non-internal, non-patch, non-tunnel port of br-ex is used;
// the patch port the agent adds does not make it ambiguous on the next run; a second candidate
// does, with an error that names both.
func TestEnsureIntegrationFindsUplink(t *testing.T) {
	ctx, sb, db := startNode(t)
	c := integration
	c.Uplink = ""
	ports, err := db.EnsureIntegration(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, vsGet(t, sb, "Interface", "eth0", "ofport"), strconv.Itoa(ports.ExUplink))
	_, err = db.EnsureIntegration(ctx, c) // again, now with the patch port on br-ex
	require.NoError(t, err)

	sb.Vsctl(t, "add-port", "br-ex", "eth1", "--", "set", "interface", "eth1", "type=dummy")
	require.Eventually(t, func() bool {
		_, err = db.EnsureIntegration(ctx, c)
		return err != nil
	}, 5*time.Second, 50*time.Millisecond)
	require.ErrorIs(t, err, ofctl.ErrUplinkAmbiguous)
	assert.Contains(t, err.Error(), "[eth0 eth1]")
}

// br-ex's fail mode belongs to the installer; EnsureIntegration leaves it alone but warns, once
// per mode, when it is not secure (docs/field-cases.md#c19: a standalone br-ex forwards with
// NORMAL after an ovs-vswitchd restart until the agent's flows are back).
func TestEnsureIntegrationWarnsWhenBrExNotSecure(t *testing.T) {
	_, sb, db := startNode(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	buf := logger.GetSink().(ktesting.Underlier).GetBuffer()
	const warning = "not fail_mode=secure"

	_, err := db.EnsureIntegration(ctx, integration)
	require.NoError(t, err)
	assert.NotContains(t, buf.String(), warning, "the sandbox's br-ex is secure")

	sb.Vsctl(t, "set", "Bridge", "br-ex", "fail_mode=standalone")
	require.Eventually(t, func() bool {
		_, err := db.EnsureIntegration(ctx, integration)
		require.NoError(t, err)
		return strings.Contains(buf.String(), warning)
	}, 10*time.Second, 50*time.Millisecond)
	_, err = db.EnsureIntegration(ctx, integration)
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(buf.String(), warning), "warned more than once for one mode")
	assert.Contains(t, buf.String(), `failMode="standalone"`)
	assert.Equal(t, "standalone", vsGet(t, sb, "Bridge", "br-ex", "fail_mode"), "br-ex's fail mode is the installer's")
}

// The gateway port (issue 8: created by the node set-up step) is optional: without it Ports has
// no IntGateway and the absence is logged once; once it exists on br-int its ofport and
// mac_in_use are returned; an internal port of that name on another bridge does not count.
func TestEnsureIntegrationGatewayPort(t *testing.T) {
	_, sb, db := startNode(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	buf := logger.GetSink().(ktesting.Underlier).GetBuffer()
	const absent = "No gateway port on the integration bridge"

	for range 2 {
		ports, err := db.EnsureIntegration(ctx, integration)
		require.NoError(t, err)
		assert.False(t, ports.HasGateway())
		assert.Zero(t, ports.IntGateway)
	}
	assert.Equal(t, 1, strings.Count(buf.String(), absent), "the absence is logged once")

	sb.Vsctl(t, "add-port", "br-int", ofctl.DefaultGatewayPort, "--", "set", "Interface", ofctl.DefaultGatewayPort, "type=internal")
	var ports flows.Ports
	require.Eventually(t, func() bool {
		var err error
		ports, err = db.EnsureIntegration(ctx, integration)
		require.NoError(t, err)
		return ports.HasGateway()
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, vsGet(t, sb, "Interface", ofctl.DefaultGatewayPort, "ofport"), strconv.Itoa(ports.IntGateway))
	mac, err := net.ParseMAC(vsGet(t, sb, "Interface", ofctl.DefaultGatewayPort, "mac_in_use"))
	require.NoError(t, err)
	assert.Equal(t, mac, ports.GatewayMAC)
	assert.Contains(t, buf.String(), "Found the gateway port")

	// Moved to br-ex: not a gateway port of br-int.
	sb.Vsctl(t, "del-port", ofctl.DefaultGatewayPort, "--", "add-port", "br-ex", ofctl.DefaultGatewayPort,
		"--", "set", "Interface", ofctl.DefaultGatewayPort, "type=internal")
	require.Eventually(t, func() bool {
		ports, err := db.EnsureIntegration(ctx, integration)
		require.NoError(t, err)
		return !ports.HasGateway()
	}, 10*time.Second, 50*time.Millisecond)
	assert.Contains(t, buf.String(), `state="on bridge br-ex"`)
}

// TestEndpointErrorsSayWhatToDo: a bare socket path is taken as unix:PATH; anything else that is
// no endpoint says what to write; a missing socket asks whether Open vSwitch runs.
func TestEndpointErrorsSayWhatToDo(t *testing.T) {
	e, err := ofctl.NormalizeEndpoint("/var/run/openvswitch/db.sock")
	require.NoError(t, err)
	assert.Equal(t, "unix:/var/run/openvswitch/db.sock", e)
	for _, ok := range []string{"unix:/x/db.sock", "tcp:127.0.0.1:6640", "ssl:10.0.0.1:6640"} {
		e, err := ofctl.NormalizeEndpoint(ok)
		require.NoError(t, err)
		assert.Equal(t, ok, e)
	}
	_, err = ofctl.NormalizeEndpoint("db.sock")
	assert.ErrorContains(t, err, "want unix:PATH")

	ctx, cancel := context.WithTimeout(testContext(t), 10*time.Second)
	defer cancel()
	_, err = ofctl.Connect(ctx, "unix:"+t.TempDir()+"/db.sock")
	assert.ErrorContains(t, err, "is Open vSwitch running on this node?")
	// Connect takes a bare path too (node-setup, node-teardown and srcip-cni connect through it).
	_, err = ofctl.Connect(ctx, t.TempDir()+"/db.sock")
	assert.ErrorContains(t, err, "is Open vSwitch running on this node?")
	_, err = ofctl.Connect(ctx, "db.sock")
	assert.ErrorContains(t, err, "want unix:PATH")
}

// A pod port's add, acknowledgement and delete are PodPortChanges only; a port without a pod
// identity is a Changes (a full sync in the agent).
func TestPodPortChangesAreNotFullChanges(t *testing.T) {
	ctx, sb, db := startNode(t)
	_, err := db.EnsureIntegration(ctx, integration)
	require.NoError(t, err)
	full, pods := db.Changes(), db.PodPortChanges()
	time.Sleep(300 * time.Millisecond)
	drain(full)
	drain(pods)
	expect := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no notification after %s", what)
		}
	}
	none := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
			t.Fatalf("full change notification after %s", what)
		case <-time.After(500 * time.Millisecond):
		}
	}

	sb.Vsctl(t, "add-port", "br-int", "pod1", "--", "set", "Interface", "pod1", "type=dummy",
		"external_ids:pod-namespace=ns1", "external_ids:pod-name=web-0", "external_ids:attached-mac=02:00:00:00:00:01")
	expect("a pod port's add", pods)
	none("a pod port's add", full)
	require.Eventually(t, func() bool {
		pps, err := db.PodPorts(ctx, "br-int")
		require.NoError(t, err)
		return len(pps) == 1
	}, 5*time.Second, 20*time.Millisecond, "the pod port gets its ofport")
	none("the pod port's ofport", full)
	drain(pods)

	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = db.WaitExternalID(wctx, "pod1", ofctl.ExtIDAgentFlows)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "interface pod1 has no external_ids:"+ofctl.ExtIDAgentFlows)
	got := make(chan string, 1)
	go func() {
		v, err := db.WaitExternalID(ctx, "pod1", ofctl.ExtIDAgentFlows)
		assert.NoError(t, err)
		got <- v
	}()
	require.NoError(t, db.AckPodFlows(ctx, map[string]flows.Cookie{"pod1": 0x5c04000000000001, "gone": 1}))
	select {
	case v := <-got:
		assert.Equal(t, "0x5c04000000000001", v)
	case <-time.After(5 * time.Second):
		t.Fatal("WaitExternalID did not see the acknowledgement")
	}
	assert.Equal(t, "0x5c04000000000001", vsGet(t, sb, "Interface", "pod1", "external_ids:"+ofctl.ExtIDAgentFlows))
	expect("the acknowledgement", pods)
	none("the acknowledgement", full)

	sb.Vsctl(t, "del-port", "br-int", "pod1")
	expect("a pod port's delete", pods)
	none("a pod port's delete", full)

	sb.Vsctl(t, "add-port", "br-int", "other0", "--", "set", "Interface", "other0", "type=dummy")
	expect("a port without a pod identity", full)
}
