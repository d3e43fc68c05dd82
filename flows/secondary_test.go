package flows

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A secondary uplink's subnet that would carry the node's own traffic (every address, or one
// holding this node's InternalIP) is ignored with a warning: no LOCAL -> NIC flow, and addresses
// in it are announced on the primary uplink. The NIC's other subnets keep working.
func TestSecondaryUplinkUnsafeSubnetsIgnored(t *testing.T) {
	st := testState()
	st.Ports.Secondary = []SecondaryUplink{{Name: "eth1", OFPort: 5, Subnets: []netip.Prefix{
		pfx("0.0.0.0/0"), pfx("192.0.2.0/24"), pfx("203.0.113.0/24")}}}
	fs, err := BuildExBase(st)
	require.NoError(t, err)
	text := strings.Join(fs.FlowLines(), "\n")
	assert.Contains(t, text, "nw_src=203.0.113.0/24")
	assert.NotContains(t, text, "0.0.0.0/0")
	assert.NotContains(t, text, "192.0.2.0/24")
	assert.Contains(t, text, "priority=500,in_port=5,", "the NIC's own input still goes to LOCAL")
	require.Len(t, fs.Warnings, 2)
	assert.Contains(t, fs.Warnings[0], "secondary uplink eth1: subnet 0.0.0.0/0 ignored (every address)")
	assert.Contains(t, fs.Warnings[1], "subnet 192.0.2.0/24 ignored (contains this node's address 192.0.2.11)")
	assert.Equal(t, 5, st.UplinkFor(ip("203.0.113.50")))
	assert.Equal(t, st.Ports.ExUplink, st.UplinkFor(ip("192.0.2.50")))
}
