package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// Field case C34 (docs/field-cases.md#c34): a Service whose endpoint is a node address (a
// hostNetwork pod on node2, 192.0.2.12:8080) - alone or next to a pod endpoint - is declined:
// node1 writes no entry flow and no group for it (never a group that silently misses the
// endpoint) and logs a warning (in a cluster: a SourceIPDeclined Event); once the endpoint is gone
// the port is served again, with the client IP kept.
func TestC34HostNetworkEndpointDeclined(t *testing.T) {
	const file = "c34.yaml"
	hostEP := ep{"", "192.0.2.12", "node2"}
	ports := []pspec{{"http", "TCP", 80, 30130}}
	defer removeAndWait(t, file, "tp_dst=30130")

	serviceFlows := func() string {
		out, err := theLab.DumpFlows("node1", "br-ex", "cookie=0x5c10000000000000/0xffff000000000000,tcp,tp_dst=30130")
		require.NoError(t, err)
		return out
	}
	for _, tc := range []struct {
		name string
		eps  []ep
	}{{"hostNetwork only", []ep{hostEP}}, {"mixed", []ep{echoA, hostEP}}} {
		off := logSize(t, "node1")
		writeManifest(t, file, rawService("hostnet", true, "NodePort", nil, "", ports, tc.eps))
		err := lab.WaitFor(func() error {
			s := logSince(t, "node1", off)
			for _, l := range strings.Split(s, "\n") {
				if strings.Contains(l, "service-port/e2e/hostnet:http/TCP") && strings.Contains(l, "declined") &&
					strings.Contains(l, "192.0.2.12:8080") && strings.Contains(l, fmt.Sprintf("of %d endpoint", len(tc.eps))) {
					return nil
				}
			}
			return fmt.Errorf("node1 logged no decline of hostnet (%s)", tc.name)
		}, 20*time.Second)
		require.NoError(t, err)
		// A full sync or two later (--full-sync-period=2s) there is still no entry flow.
		time.Sleep(2500 * time.Millisecond)
		assert.NotContains(t, serviceFlows(), "tp_dst=30130", "%s: node1 must not serve a port with a hostNetwork endpoint", tc.name)
	}

	// The hostNetwork endpoint goes: served again through node1, client IP kept.
	writeManifest(t, file, rawService("hostnet", true, "NodePort", nil, "", ports, []ep{echoA}))
	addr := "192.0.2.11:30130"
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")
	assert.Contains(t, serviceFlows(), "tp_dst=30130")
}
