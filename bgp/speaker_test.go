package bgp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/server"
	"github.com/stretchr/testify/require"
)

// The tests run real BGP sessions over loopback: the speaker under test (the node, 127.0.0.2)
// dials GoBGP servers standing in for the upstream routers, which listen on their own loopback
// addresses and ports.

const nodeASN, routerASN, watcherASN = 64513, 64500, 64501

var (
	nodeAddr = netip.MustParseAddr("127.0.0.2")
	podCIDR  = netip.MustParsePrefix("10.244.1.0/24")
	foreign  = netip.MustParsePrefix("203.0.113.0/24")
)

type quiet struct{ t *testing.T }

func (q quiet) Panic(msg string, f gobgplog.Fields) { q.t.Errorf("gobgp panic: %s %v", msg, f) }
func (q quiet) Fatal(msg string, f gobgplog.Fields) { q.t.Errorf("gobgp fatal: %s %v", msg, f) }
func (q quiet) Error(msg string, f gobgplog.Fields) { q.t.Logf("gobgp error: %s %v", msg, f) }
func (q quiet) Warn(msg string, f gobgplog.Fields)  { q.t.Logf("gobgp warn: %s %v", msg, f) }
func (quiet) Info(string, gobgplog.Fields)          {}
func (quiet) Debug(string, gobgplog.Fields)         {}
func (quiet) SetLevel(gobgplog.LogLevel)            {}
func (quiet) GetLevel() gobgplog.LogLevel           { return gobgplog.InfoLevel }

func freePort(t *testing.T, addr string) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", addr+":0")
	require.NoError(t, err)
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// router starts a GoBGP server on addr:port in asn with one passive neighbour, the node.
func router(t *testing.T, addr string, port uint16, asn uint32, password string) *server.BgpServer {
	t.Helper()
	ctx := context.Background()
	s := server.NewBgpServer(server.LoggerOption(quiet{t}))
	go s.Serve()
	t.Cleanup(s.Stop)
	require.NoError(t, s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: asn, RouterId: addr, ListenPort: int32(port), ListenAddresses: []string{addr},
	}}))
	require.NoError(t, s.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: nodeAddr.String(), PeerAsn: nodeASN, AuthPassword: password},
		Timers:    &api.Timers{Config: &api.TimersConfig{HoldTime: 3, KeepaliveInterval: 1}},
		Transport: &api.Transport{PassiveMode: true, LocalAddress: addr},
	}}))
	return s
}

// routes returns the prefixes of s's global IPv4 table with their first next hop.
func routes(t *testing.T, s *server.BgpServer) map[netip.Prefix]string {
	t.Helper()
	out := map[netip.Prefix]string{}
	err := s.ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: family(podCIDR.Addr())}, func(d *api.Destination) {
		p := netip.MustParsePrefix(d.Prefix)
		nh := ""
		for _, pa := range d.Paths {
			for _, a := range pa.Pattrs {
				var n api.NextHopAttribute
				if a.UnmarshalTo(&n) == nil {
					nh = n.NextHop
				}
			}
		}
		out[p] = nh
	})
	require.NoError(t, err)
	return out
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func state(t *testing.T, sp *Speaker, a netip.Addr) PeerState {
	t.Helper()
	ps, err := sp.Peers(context.Background())
	require.NoError(t, err)
	for _, p := range ps {
		if p.Address == a {
			return p
		}
	}
	return PeerState{}
}

// TestAnnouncesOnlyOwned: the node announces its pod CIDR to both peers; the route the router
// announces to the node reaches neither the node's table (import rejects everything) nor the
// other peer (export accepts only the node's own routes); a withdrawn pod CIDR leaves the peers.
func TestAnnouncesOnlyOwned(t *testing.T) {
	ctx := context.Background()
	rPort, wPort := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.3")
	r := router(t, "127.0.0.1", rPort, routerASN, "")
	w := router(t, "127.0.0.3", wPort, watcherASN, "")
	// The router announces a prefix the node does not own: an eBGP speaker without the export
	// guard would pass it on to the watcher.
	for _, p := range []netip.Prefix{foreign} {
		_, err := r.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: path(Route{Prefix: p, NextHop: netip.MustParseAddr("127.0.0.1")})})
		require.NoError(t, err)
	}

	sp := New(quiet{t})
	t.Cleanup(sp.Close)
	cfg := Config{RouterID: netip.MustParseAddr("10.89.0.12"), ASN: nodeASN,
		Peers: []Peer{
			{Address: netip.MustParseAddr("127.0.0.1"), Port: rPort, PeerASN: routerASN, HoldTime: 3 * time.Second, LocalAddress: nodeAddr},
			{Address: netip.MustParseAddr("127.0.0.3"), Port: wPort, PeerASN: watcherASN, HoldTime: 3 * time.Second, LocalAddress: nodeAddr},
		},
		Announce: []Route{{Prefix: podCIDR, NextHop: nodeAddr}},
	}
	require.NoError(t, sp.Apply(ctx, cfg))
	t0 := time.Now()
	waitFor(t, "both sessions Established", 30*time.Second, func() bool {
		return state(t, sp, netip.MustParseAddr("127.0.0.1")).State == "Established" && state(t, sp, netip.MustParseAddr("127.0.0.3")).State == "Established"
	})
	waitFor(t, "the router's and the watcher's tables hold the pod CIDR", 10*time.Second, func() bool {
		return routes(t, r)[podCIDR] == nodeAddr.String() && routes(t, w)[podCIDR] == nodeAddr.String()
	})
	waitFor(t, "the node received the router's route", 10*time.Second, func() bool {
		return state(t, sp, netip.MustParseAddr("127.0.0.1")).Received == 1
	})
	t.Logf("sessions Established and %s via %s on both peers %v after Apply", podCIDR, nodeAddr, time.Since(t0).Round(time.Millisecond))
	// Give a passed-on route time to arrive (the sessions' updates are immediate in GoBGP).
	time.Sleep(2 * time.Second)
	if _, ok := routes(t, sp.s)[foreign]; ok {
		t.Errorf("the node's table holds %s from the router: the import policy let it in", foreign)
	}
	if nh, ok := routes(t, w)[foreign]; ok {
		t.Errorf("the watcher learned %s (next hop %s) from the node: the node announced what it does not own", foreign, nh)
	}
	ws := state(t, sp, netip.MustParseAddr("127.0.0.3"))
	require.Equal(t, uint64(1), ws.Advertised, "the node advertised only its pod CIDR to the watcher: %+v", ws)
	t.Logf("router sent %d route(s), the node's table kept none; advertised to the watcher: %d (%s only)", state(t, sp, netip.MustParseAddr("127.0.0.1")).Received, ws.Advertised, podCIDR)

	// Withdraw: no route announced.
	cfg.Announce = nil
	require.NoError(t, sp.Apply(ctx, cfg))
	waitFor(t, "the peers withdrew the pod CIDR", 10*time.Second, func() bool {
		_, a := routes(t, r)[podCIDR]
		_, b := routes(t, w)[podCIDR]
		return !a && !b
	})
	// No peers: stopped; Peers reports none.
	require.NoError(t, sp.Apply(ctx, Config{}))
	ps, err := sp.Peers(ctx)
	require.NoError(t, err)
	require.Empty(t, ps)
}

func TestValidate(t *testing.T) {
	ok := Config{RouterID: netip.MustParseAddr("10.0.0.1"), ASN: 64512, Peers: []Peer{{Address: netip.MustParseAddr("10.0.0.254"), PeerASN: 64500}}}
	require.NoError(t, ok.Validate())
	for name, mut := range map[string]func(*Config){
		"router ID v6": func(c *Config) { c.RouterID = netip.MustParseAddr("2001:db8::1") },
		"ASN 0":        func(c *Config) { c.ASN = 0 },
		"peer twice":   func(c *Config) { c.Peers = append(c.Peers, c.Peers[0]) },
		"peer ASN 0":   func(c *Config) { c.Peers[0].PeerASN = 0 },
		"hold 2s":      func(c *Config) { c.Peers[0].HoldTime = 2 * time.Second },
		"hold 3.5s":    func(c *Config) { c.Peers[0].HoldTime = 3500 * time.Millisecond },
		"local v6":     func(c *Config) { c.Peers[0].LocalAddress = netip.MustParseAddr("2001:db8::1") },
		"unmasked route": func(c *Config) {
			c.Announce = []Route{{netip.MustParsePrefix("10.244.1.1/24"), netip.MustParseAddr("10.0.0.1")}}
		},
		"route nh v6":    func(c *Config) { c.Announce = []Route{{podCIDR, netip.MustParseAddr("2001:db8::1")}} },
		"long password":  func(c *Config) { c.Peers[0].Password = fmt.Sprintf("%081d", 0) },
		"multicast peer": func(c *Config) { c.Peers[0].Address = netip.MustParseAddr("224.0.0.5") },
	} {
		c := ok
		c.Peers = append([]Peer(nil), ok.Peers...)
		mut(&c)
		require.Error(t, c.Validate(), name)
	}
	require.NoError(t, Config{}.Validate(), "no peers: nothing to run")
}
