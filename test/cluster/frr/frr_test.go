package frr

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// The router of test/cluster/metallb: AS 64500 at 10.89.0.1, the three nodes in AS 64512 (passive,
// one with a TCP-MD5 password), an IPv6 neighbour in its own family, ECMP over 8 paths.
func TestBGPDConf(t *testing.T) {
	c := Config{ASN: 64500, RouterID: netip.MustParseAddr("10.89.0.1"), Neighbors: []Neighbor{
		{Addr: netip.MustParseAddr("10.89.0.11"), ASN: 64512},
		{Addr: netip.MustParseAddr("10.89.0.12"), ASN: 64512, Password: "s3cret"},
		{Addr: netip.MustParseAddr("10.89.0.13"), ASN: 64512, Active: true},
		{Addr: netip.MustParseAddr("2001:db8:0:2::11"), ASN: 64512},
	}}
	got, err := c.BGPDConf()
	require.NoError(t, err)
	assert.Equal(t, `frr defaults traditional
!
router bgp 64500
 bgp router-id 10.89.0.1
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 timers bgp 1 3
 neighbor 10.89.0.11 remote-as 64512
 neighbor 10.89.0.11 passive
 neighbor 10.89.0.12 remote-as 64512
 neighbor 10.89.0.12 passive
 neighbor 10.89.0.12 password s3cret
 neighbor 10.89.0.13 remote-as 64512
 neighbor 2001:db8:0:2::11 remote-as 64512
 neighbor 2001:db8:0:2::11 passive
 !
 address-family ipv4 unicast
  neighbor 10.89.0.11 activate
  neighbor 10.89.0.12 activate
  neighbor 10.89.0.13 activate
  maximum-paths 8
 exit-address-family
 !
 address-family ipv6 unicast
  neighbor 2001:db8:0:2::11 activate
  maximum-paths 8
 exit-address-family
exit
!
`, got)

	// A peer announcing prefixes of its own, with other timers and ECMP width.
	c = Config{ASN: 64512, RouterID: netip.MustParseAddr("198.51.100.10"), Keepalive: 3 * time.Second, Hold: 9 * time.Second,
		MaximumPaths: 1, Networks: []netip.Prefix{netip.MustParsePrefix("203.0.113.201/24")},
		Neighbors: []Neighbor{{Addr: netip.MustParseAddr("198.51.100.1"), ASN: 64500, Active: true}}}
	got, err = c.BGPDConf()
	require.NoError(t, err)
	assert.Equal(t, `frr defaults traditional
!
router bgp 64512
 bgp router-id 198.51.100.10
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 timers bgp 3 9
 no bgp network import-check
 neighbor 198.51.100.1 remote-as 64500
 !
 address-family ipv4 unicast
  network 203.0.113.0/24
  neighbor 198.51.100.1 activate
  maximum-paths 1
 exit-address-family
exit
!
`, got)
}

// Bad configurations are refused with the reason, never rendered.
func TestBGPDConfRefuses(t *testing.T) {
	id := netip.MustParseAddr("10.89.0.1")
	n := Neighbor{Addr: netip.MustParseAddr("10.89.0.11"), ASN: 64512}
	for _, tc := range []struct {
		name string
		c    Config
		want string
	}{
		{"no ASN", Config{RouterID: id}, "Config.ASN is required"},
		{"IPv6 router-id", Config{ASN: 1, RouterID: netip.MustParseAddr("2001:db8::1")}, "want an IPv4 address"},
		{"hold below 3 s", Config{ASN: 1, RouterID: id, Hold: 2 * time.Second}, "hold at least 3 s"},
		{"keepalive above hold/3", Config{ASN: 1, RouterID: id, Keepalive: 2 * time.Second, Hold: 3 * time.Second}, "at least 3 keepalives"},
		{"fractional timer", Config{ASN: 1, RouterID: id, Hold: 3500 * time.Millisecond}, "whole seconds"},
		{"neighbour twice", Config{ASN: 1, RouterID: id, Neighbors: []Neighbor{n, n}}, "listed twice"},
		{"neighbour without ASN", Config{ASN: 1, RouterID: id, Neighbors: []Neighbor{{Addr: n.Addr}}}, "address and ASN are required"},
		{"password with a space", Config{ASN: 1, RouterID: id, Neighbors: []Neighbor{{Addr: n.Addr, ASN: 2, Password: "a b"}}}, "one word"},
	} {
		_, err := tc.c.BGPDConf()
		if assert.Error(t, err, tc.name) {
			assert.Contains(t, err.Error(), tc.want, tc.name)
		}
	}
}

// The lab's router runs FRR (zebra and bgpd in its netns, pathspace = the lab's prefix) and
// learns a /32 from two eBGP peers (FRR again, in the two client netns, announcing the same
// prefix): both sessions Established in `show bgp summary json`, zebra selects a bgp route with the
// two next hops and installs it into the router's kernel table as a multipath route. Close leaves
// no daemon and no pathspace directory, and CleanupStale removes what a dead lab left.
func TestRouterInLab(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root, network namespaces and Open vSwitch (the lab)")
	}
	l, err := lab.New(lab.Config{ManifestsDir: "../testdata/nodes", RouterCIDR: "10.89.0.1/24", NoGateway: true,
		Routes: map[string]string{}, Clients: []lab.ClientSpec{{Name: "peer1", IP: "198.51.100.10"}, {Name: "peer2", IP: "198.51.100.11"}}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Close()) })
	t0 := time.Now()
	lb := netip.MustParsePrefix("203.0.113.200/32")
	r, err := StartInLab(l, Config{ASN: 64500, RouterID: netip.MustParseAddr("10.89.0.1"), Neighbors: []Neighbor{
		{Addr: netip.MustParseAddr("198.51.100.10"), ASN: 64512},
		{Addr: netip.MustParseAddr("198.51.100.11"), ASN: 64512},
	}}, t.Logf)
	require.NoError(t, err)
	tRouter := time.Since(t0)
	closed := false
	t.Cleanup(func() {
		if !closed {
			assert.NoError(t, r.Close())
		}
	})
	var peers []*Router
	for i, c := range l.Clients {
		p, err := Start(Options{Netns: c.Netns, Pathspace: l.Prefix + string(rune('1'+i)), Dir: filepath.Join(l.Dir, "frr-"+c.Name), Logf: t.Logf},
			Config{ASN: 64512, RouterID: c.IP, Networks: []netip.Prefix{lb},
				Neighbors: []Neighbor{{Addr: netip.MustParseAddr("198.51.100.1"), ASN: 64500, Active: true}}})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, p.Close()) })
		peers = append(peers, p)
	}
	pids := r.Pids()
	require.Len(t, pids, 2, "zebra and bgpd running")
	for name, pid := range pids {
		assert.True(t, strings.HasPrefix(cmdline(pid), filepath.Join("/usr/lib/frr", name)+" -N "+l.Prefix+" "), "pid %d: %s", pid, cmdline(pid))
		_, err := os.Stat(filepath.Join(RunDir, l.Prefix, name+".vty"))
		assert.NoError(t, err, "%s's vty socket in the pathspace", name)
	}

	var sum map[netip.Addr]Peer
	require.NoError(t, lab.WaitFor(func() error {
		if sum, err = r.Summary(); err != nil {
			return err
		}
		for _, c := range l.Clients {
			if p := sum[c.IP]; p.State != "Established" || p.PfxRcd != 1 {
				return fmt.Errorf("peer %s: %+v, want Established with 1 prefix", c.IP, p)
			}
		}
		return nil
	}, 30*time.Second))
	tEst := time.Since(t0)
	var rt Route
	var kernel []netip.Addr
	var proto string
	require.NoError(t, lab.WaitFor(func() error {
		var ok bool
		if rt, ok, err = r.Route(lb); err != nil || !ok {
			return fmt.Errorf("zebra: route %s: %v %v", lb, ok, err)
		}
		if len(rt.NextHops) != 2 || !rt.Installed {
			return fmt.Errorf("zebra: %s: %+v, want 2 next hops, installed", lb, rt)
		}
		if kernel, proto, err = r.KernelNextHops(lb); err != nil || len(kernel) != 2 {
			return fmt.Errorf("kernel: %s: %v (%s) %v, want 2 next hops", lb, kernel, proto, err)
		}
		return nil
	}, 20*time.Second))
	want := []netip.Addr{l.Clients[0].IP, l.Clients[1].IP}
	assert.Equal(t, "bgp", rt.Protocol)
	assert.Equal(t, want, rt.NextHops)
	assert.Equal(t, want, kernel)
	assert.Equal(t, "bgp", proto)
	// No route for a prefix nobody announces.
	_, ok, err := r.Route(netip.MustParsePrefix("203.0.113.199/32"))
	require.NoError(t, err)
	assert.False(t, ok)
	t.Logf("router up %v after the start; sessions %v Established %v after it; %s via %v (zebra %s, kernel %s)",
		tRouter.Round(time.Millisecond), want, tEst.Round(time.Millisecond), lb, rt.NextHops, rt.Protocol, proto)

	// Close: no daemon left, no pathspace.
	require.NoError(t, r.Close())
	closed = true
	for name, pid := range pids {
		assert.False(t, lab.PidAlive(pid), "%s pid %d still alive after Close", name, pid)
	}
	_, err = os.Stat(filepath.Join(RunDir, l.Prefix))
	assert.True(t, os.IsNotExist(err), "pathspace directory after Close: %v", err)
	require.NoError(t, r.Close(), "Close twice")

	// CleanupStale leaves a live lab's pathspaces alone, and removes a dead lab's (its daemons by
	// pid).
	removed, err := CleanupStale("", t.Logf)
	require.NoError(t, err)
	assert.NotContains(t, removed, l.Prefix+"1")
	for _, p := range peers {
		assert.Len(t, p.Pids(), 2, "peer %s after CleanupStale", p.Pathspace)
	}
	stale := filepath.Join(RunDir, "sl0000")
	require.NoError(t, os.MkdirAll(stale, 0o755))
	removed, err = CleanupStale("", t.Logf)
	require.NoError(t, err)
	assert.Contains(t, removed, "sl0000")
	_, err = os.Stat(stale)
	assert.True(t, os.IsNotExist(err), "stale pathspace after CleanupStale: %v", err)
}
