package main

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --pod-cidr and --cluster-cidrs take both families, IPv4 first; the Node's IPv6 pod CIDR is
// served only with an IPv6 cluster CIDR.
func TestNodeSetupFamilies(t *testing.T) {
	ps, err := parsePrefixes([]string{"2001:db8:244:1::5/64", "10.244.1.0/24"})
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("2001:db8:244:1::/64")}, ps)

	var notes []string
	logf := func(f string, a ...any) { notes = append(notes, fmt.Sprintf(f, a...)) }
	v4cluster := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	assert.Equal(t, ps[:1], familiesServed(ps, v4cluster, logf))
	require.Len(t, notes, 1)
	assert.Contains(t, notes[0], "the Node's IPv6 pod CIDR is not served")
	dual := append(v4cluster, netip.MustParsePrefix("2001:db8:244::/56"))
	assert.Equal(t, ps, familiesServed(ps, dual, logf))
	assert.Len(t, notes, 1)
}

// --node-ip takes the node's InternalIP of either family (IPv6 on an IPv6 underlay); no address
// that another node could not reach the host from.
func TestParseNodeIP(t *testing.T) {
	for in, want := range map[string]string{"192.0.2.11": "192.0.2.11", "2001:db8:0:2::11": "2001:db8:0:2::11", "::ffff:192.0.2.11": "192.0.2.11"} {
		a, err := parseNodeIP(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, a.String())
	}
	for _, in := range []string{"node1", "192.0.2.0/24", "127.0.0.1", "fe80::1", "fe80::1%eth0", "::", "ff02::1", "169.254.1.1"} {
		_, err := parseNodeIP(in)
		assert.Error(t, err, in)
	}
}
