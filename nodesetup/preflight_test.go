package nodesetup

import (
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A port another process listens on is refused with the port, the flag and the process; a free
// port, "0" and "" pass; a malformed address is refused.
func TestCheckAgentPorts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	busy := fmt.Sprintf("127.0.0.1:%d", port)
	err = checkAgentPorts([]AgentPort{{"--metrics-bind-address", busy}}, t.Logf)
	require.Error(t, err)
	assert.ErrorContains(t, err, fmt.Sprintf("TCP port %d (--metrics-bind-address %s of srcip-agent) is in use by ", port, busy))
	assert.ErrorContains(t, err, fmt.Sprintf("(pid %d: ", os.Getpid()), "names the listening process (this test)")
	assert.ErrorContains(t, err, "nothing was changed")
	// The wildcard address conflicts with a loopback listener on the same port.
	assert.ErrorContains(t, checkAgentPorts([]AgentPort{{"--debug-bind-address", fmt.Sprintf(":%d", port)}}, t.Logf), "--debug-bind-address")

	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	freeAddr := free.Addr().String()
	free.Close()
	assert.NoError(t, checkAgentPorts([]AgentPort{{"--metrics-bind-address", freeAddr}, {"--debug-bind-address", ""}, {"--metrics-bind-address", "0"}}, t.Logf))
	assert.ErrorContains(t, checkAgentPorts([]AgentPort{{"--metrics-bind-address", "9464"}}, t.Logf), `--metrics-bind-address "9464"`)
	assert.ErrorContains(t, checkAgentPorts([]AgentPort{{"--metrics-bind-address", ":x"}}, t.Logf), "not a number")
}

// A Geneve port bound by a process other than ovs-vswitchd is refused with the process; a free one
// and 0 pass.
func TestCheckGenevePort(t *testing.T) {
	pc, err := net.ListenPacket("udp", ":0")
	require.NoError(t, err)
	port := pc.LocalAddr().(*net.UDPAddr).Port
	err = checkGenevePort(port, t.Logf)
	assert.ErrorContains(t, err, fmt.Sprintf("UDP port %d (Geneve between the nodes, srcip-agent's --geneve-port) is in use by ", port))
	assert.ErrorContains(t, err, fmt.Sprintf("(pid %d: ", os.Getpid()))
	pc.Close()
	assert.NoError(t, checkGenevePort(port, t.Logf))
	assert.NoError(t, checkGenevePort(0, t.Logf))
}
