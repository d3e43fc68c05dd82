package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// Field case C16 (docs/field-cases.md#c16): the host of the ingress node opens its own TCP
// connection from local port 30100, which is also an opted-in Service's NodePort. The SYN-ACK and the rest of that connection must
// reach the host stack and never be DNATed to the Service's pod; the Service keeps working.
func TestHostConnectionFromNodePortSourcePort(t *testing.T) {
	addr := "192.0.2.11:30100"
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")

	clientNS, err := theLab.Netns("client")
	require.NoError(t, err)
	echoBin := os.Getenv("SRCIP_ECHO")
	if echoBin == "" {
		echoBin = theLab.EchoBin()
	}
	// A server on the external client, answering as "external-server".
	srv := exec.Command("ip", "netns", "exec", clientNS, echoBin, "serve", "--tcp", ":9000", "--name", "external-server", "--node", "outside")
	require.NoError(t, srv.Start())
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		_, _ = srv.Process.Wait()
	})
	time.Sleep(300 * time.Millisecond)

	// 30100's endpoint is on node2, 30101's on node1 itself.
	for _, port := range []int{30100, 30101} {
		r, err := theLab.RequestWith("node1", "tcp", "198.51.100.10:9000", lab.RequestOpts{LocalPort: port})
		require.NoError(t, err, "the host's own connection from local port %d failed", port)
		assert.Equal(t, "external-server", r.Pod)
		assert.Equal(t, fmt.Sprintf("192.0.2.11:%d", port), r.Client, "the external server must see the host's address and port")
	}
	// The Service keeps working: answered at the first try.
	checkReply(t, okNow(t, "tcp", addr), addr, "echo-a")
}
