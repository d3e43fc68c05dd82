package main

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/spf13/pflag"
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

// The routed pods' flags as the DaemonSet passes them from its ConfigMap: empty values are off,
// a list gets 169.254.0.0/16 unless --masquerade-link-local, a bad CIDR is an error naming the
// flag, and --masquerade-link-local alone is refused (it would do nothing).
func TestRoutedFlags(t *testing.T) {
	parse := func(args ...string) ([]netip.Prefix, error) {
		var o routedOptions
		f := pflag.NewFlagSet("t", pflag.ContinueOnError)
		routedFlags(f, &o)
		require.NoError(t, f.Parse(args))
		return o.set()
	}
	set, err := parse("--non-masquerade-cidrs=", "--masquerade-link-local=false")
	require.NoError(t, err)
	assert.Nil(t, set)
	set, err = parse("--non-masquerade-cidrs=192.168.10.7/24,2001:db8:10::/64", "--masquerade-link-local=false")
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("192.168.10.0/24"), netip.MustParsePrefix("2001:db8:10::/64"),
		netip.MustParsePrefix("169.254.0.0/16")}, set)
	set, err = parse("--non-masquerade-cidrs=192.168.10.0/24", "--masquerade-link-local=true")
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("192.168.10.0/24")}, set)
	_, err = parse("--non-masquerade-cidrs=192.168.10.0/33")
	assert.ErrorContains(t, err, "--non-masquerade-cidrs")
	_, err = parse("--masquerade-link-local=true")
	assert.ErrorContains(t, err, "needs --non-masquerade-cidrs")
	// The DaemonSet's way: the environment is the flags' default.
	t.Setenv("NON_MASQUERADE_CIDRS", "192.168.10.0/24, 2001:db8:10::/64")
	t.Setenv("MASQUERADE_LINK_LOCAL", "true")
	set, err = parse()
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("192.168.10.0/24"), netip.MustParsePrefix("2001:db8:10::/64")}, set)
	t.Setenv("MASQUERADE_LINK_LOCAL", "yes please")
	_, err = parse()
	assert.ErrorContains(t, err, "MASQUERADE_LINK_LOCAL")
	t.Setenv("NON_MASQUERADE_CIDRS", "")
	t.Setenv("MASQUERADE_LINK_LOCAL", "")
	for _, bad := range []string{"0.0.0.0/0", "::/0", "fe80::/10", "224.0.0.0/4"} {
		_, err = parse("--non-masquerade-cidrs=" + bad)
		assert.ErrorContains(t, err, "--non-masquerade-cidrs "+bad, bad)
	}
	set, err = parse("--non-masquerade-cidrs=10.0.0.0/8")
	require.NoError(t, err)
	assert.ErrorContains(t, checkNonMasquerade(set, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}), "overlaps the cluster CIDR 10.244.0.0/16")
	assert.NoError(t, checkNonMasquerade(set, []netip.Prefix{netip.MustParsePrefix("172.16.0.0/16")}))
}
