// Package bgp is the node's BGP speaker for routed pod networks (issue 24, docs/routed-pods.md):
// an embedded GoBGP v3 server (github.com/osrg/gobgp/v3/pkg/server) that dials its peers, never
// listens (the node's TCP port 179 stays free for MetalLB's speaker or FRR), and announces only the
// routes it is given: the node's own pod CIDRs, with the node's address of the family as next hop.
//
// Why GoBGP embedded rather than FRR driven (MetalLB's frr-k8s): the agent is already a Go process
// on every node that knows the node's podCIDRs and InternalIPs; the library needs no second daemon
// in the image, no configuration file rendered and reloaded, and its state (sessions, what was
// announced) is read in-process for the status. Cilium's BGP control plane and kube-router make the
// same choice.
//
// Guards (issue 24 "Guards"): the export policy accepts only locally originated routes whose
// prefix is one of Config.Announce (an exact match), everything else is rejected, so a peer cannot
// make the node announce what it does not own (an eBGP speaker otherwise passes on what it learns);
// the import policy rejects every route a peer sends (the node routes by its own tables, never by
// what a peer says; a peer's full table costs no memory). TCP-MD5 (RFC 2385) signs a session
// whose Peer.Password is set.
//
// This package is pure of Kubernetes: the agent turns BGPPeer objects and its Node into a Config.
package bgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/server"
	"google.golang.org/protobuf/types/known/anypb"
)

// DefaultHoldTime is a session's hold time when Peer.HoldTime is zero (RFC 4271 section 10's
// suggested 90 s); the keepalive interval is always a third of the hold time.
const DefaultHoldTime = 90 * time.Second

// DefaultPort is BGP's TCP port (RFC 4271).
const DefaultPort = 179

// Names of the defined set and policies the speaker installs.
const (
	ownedSet     = "srcip-owned"
	exportPolicy = "srcip-export-owned"
	importPolicy = "srcip-import-none"
)

// Peer is one BGP session the node dials.
type Peer struct {
	// Address is the peer's address; its family is the session's only address family (as in
	// MetalLB's native mode): an IPv4 session carries the IPv4 routes of Config.Announce.
	Address netip.Addr
	// Port is the peer's TCP port; 0 is DefaultPort.
	Port uint16
	// PeerASN is the peer's AS; LocalASN the node's AS on this session (0: Config.ASN).
	PeerASN, LocalASN uint32
	// HoldTime is the session's proposed hold time (RFC 4271 4.2): 0 is DefaultHoldTime, else at
	// least 3 s, whole seconds. The keepalive interval is a third of it.
	HoldTime time.Duration
	// Password turns on TCP-MD5 (RFC 2385) for the session; empty: none.
	Password string
	// LocalAddress is the source address of the session (the node's InternalIP of the family);
	// invalid: the kernel's choice.
	LocalAddress netip.Addr
}

// Route is one route the node announces.
type Route struct {
	// Prefix is the announced prefix (a pod CIDR of the node), masked.
	Prefix netip.Prefix
	// NextHop is the node's address of the prefix's family.
	NextHop netip.Addr
}

// Config is what the speaker runs. The zero Config (no peers) stops it.
type Config struct {
	// RouterID is the BGP identifier (an IPv4 address, RFC 6286: any unique 32-bit value).
	RouterID netip.Addr
	// ASN is the node's AS.
	ASN uint32
	// Peers are the sessions, at most one per address.
	Peers []Peer
	// Announce are the routes announced to every peer of their family.
	Announce []Route
}

// Validate returns an error naming the first field that cannot be run.
func (c Config) Validate() error {
	if len(c.Peers) == 0 {
		return nil
	}
	if !c.RouterID.Is4() {
		return fmt.Errorf("bgp: router ID %v: want an IPv4 address", c.RouterID)
	}
	if c.ASN == 0 {
		return errors.New("bgp: ASN 0: want 1..4294967295")
	}
	seen := map[netip.Addr]bool{}
	for _, p := range c.Peers {
		switch {
		case !p.Address.IsValid() || p.Address.IsUnspecified() || p.Address.IsMulticast():
			return fmt.Errorf("bgp: peer address %v: want a unicast address", p.Address)
		case seen[p.Address]:
			return fmt.Errorf("bgp: peer %s listed twice", p.Address)
		case p.PeerASN == 0:
			return fmt.Errorf("bgp: peer %s: peer ASN 0: want 1..4294967295", p.Address)
		case p.HoldTime != 0 && (p.HoldTime < 3*time.Second || p.HoldTime%time.Second != 0 || p.HoldTime > 65535*time.Second):
			return fmt.Errorf("bgp: peer %s: hold time %v: want whole seconds from 3 s to 65535 s (RFC 4271 4.2)", p.Address, p.HoldTime)
		case p.LocalAddress.IsValid() && p.LocalAddress.Is4() != p.Address.Is4():
			return fmt.Errorf("bgp: peer %s: local address %s is of the other family", p.Address, p.LocalAddress)
		case len(p.Password) > 80:
			return fmt.Errorf("bgp: peer %s: password of %d bytes: TCP-MD5 keys are at most 80 bytes", p.Address, len(p.Password))
		}
		seen[p.Address] = true
	}
	for _, r := range c.Announce {
		if !r.Prefix.IsValid() || r.Prefix != r.Prefix.Masked() {
			return fmt.Errorf("bgp: route %v: want a masked prefix", r.Prefix)
		}
		if !r.NextHop.IsValid() || r.NextHop.Is4() != r.Prefix.Addr().Is4() {
			return fmt.Errorf("bgp: route %s: next hop %v: want an address of the prefix's family", r.Prefix, r.NextHop)
		}
	}
	return nil
}

// PeerState is one session as the speaker sees it.
type PeerState struct {
	Address netip.Addr
	// State is the RFC 4271 8.2.2 state: Idle, Connect, Active, OpenSent, OpenConfirm or
	// Established.
	State string
	// Advertised is how many routes the node sent on the session (0 before Established).
	Advertised uint64
	// Received is how many routes the peer sent (all rejected by the import policy).
	Received uint64
}

// Speaker is the node's BGP speaker. Use New, then Apply; Close ends it.
type Speaker struct {
	mu      sync.Mutex
	s       *server.BgpServer
	running bool
	cur     Config
}

// New returns a stopped speaker (nothing dialled until Apply gets a peer). logger may be nil
// (GoBGP's default logger, to stderr).
func New(logger gobgplog.Logger) *Speaker {
	var opts []server.ServerOption
	if logger != nil {
		opts = append(opts, server.LoggerOption(logger))
	}
	s := server.NewBgpServer(opts...)
	go s.Serve()
	return &Speaker{s: s}
}

// Apply makes the speaker run c: peers added, removed or replaced (a changed peer's session is
// reset), routes announced and withdrawn, the export set replaced. A changed RouterID or ASN
// restarts every session. With no peers it stops. On an error the speaker keeps what it had
// applied before the failing step; Apply again to retry.
func (sp *Speaker) Apply(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	c = normalize(c)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.running && (len(c.Peers) == 0 || c.RouterID != sp.cur.RouterID || c.ASN != sp.cur.ASN) {
		if err := sp.s.StopBgp(ctx, &api.StopBgpRequest{}); err != nil {
			return fmt.Errorf("bgp: stop: %w", err)
		}
		sp.running, sp.cur = false, Config{}
	}
	if len(c.Peers) == 0 {
		return nil
	}
	if !sp.running {
		if err := sp.start(ctx, c); err != nil {
			return err
		}
	}
	// The export set first: a route announced below is exported only if the set names it.
	if err := sp.setOwned(ctx, c.Announce); err != nil {
		return err
	}
	for _, r := range sp.cur.Announce {
		if !slices.Contains(c.Announce, r) {
			if err := sp.s.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Family: family(r.Prefix.Addr()), Path: path(r)}); err != nil {
				return fmt.Errorf("bgp: withdraw %s: %w", r.Prefix, err)
			}
		}
	}
	announced := slices.DeleteFunc(slices.Clone(sp.cur.Announce), func(r Route) bool { return !slices.Contains(c.Announce, r) })
	sp.cur.Announce = announced
	for _, r := range c.Announce {
		if !slices.Contains(announced, r) {
			if _, err := sp.s.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: path(r)}); err != nil {
				return fmt.Errorf("bgp: announce %s: %w", r.Prefix, err)
			}
			sp.cur.Announce = append(sp.cur.Announce, r)
		}
	}
	for _, p := range sp.cur.Peers {
		if i := slices.IndexFunc(c.Peers, func(q Peer) bool { return q.Address == p.Address }); i < 0 || c.Peers[i] != p {
			if err := sp.s.DeletePeer(ctx, &api.DeletePeerRequest{Address: p.Address.String()}); err != nil {
				return fmt.Errorf("bgp: remove peer %s: %w", p.Address, err)
			}
			sp.cur.Peers = slices.DeleteFunc(sp.cur.Peers, func(q Peer) bool { return q.Address == p.Address })
		}
	}
	for _, p := range c.Peers {
		if slices.Contains(sp.cur.Peers, p) {
			continue
		}
		if err := sp.s.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p, c.ASN)}); err != nil {
			return fmt.Errorf("bgp: add peer %s: %w", p.Address, err)
		}
		sp.cur.Peers = append(sp.cur.Peers, p)
	}
	return nil
}

func (sp *Speaker) start(ctx context.Context, c Config) error {
	if err := sp.s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: c.ASN, RouterId: c.RouterID.String(),
		ListenPort: -1, // dial only: the node's port 179 is not ours
	}}); err != nil {
		return fmt.Errorf("bgp: start (AS %d, router ID %s): %w", c.ASN, c.RouterID, err)
	}
	sp.running, sp.cur = true, Config{RouterID: c.RouterID, ASN: c.ASN}
	set := &api.DefinedSet{DefinedType: api.DefinedType_PREFIX, Name: ownedSet}
	if err := sp.s.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set}); err != nil {
		return fmt.Errorf("bgp: prefix set: %w", err)
	}
	export := &api.Policy{Name: exportPolicy, Statements: []*api.Statement{{
		Name: exportPolicy + "-accept",
		Conditions: &api.Conditions{
			PrefixSet: &api.MatchSet{Type: api.MatchSet_ANY, Name: ownedSet},
			RouteType: api.Conditions_ROUTE_TYPE_LOCAL,
		},
		Actions: &api.Actions{RouteAction: api.RouteAction_ACCEPT},
	}}}
	if err := sp.s.AddPolicy(ctx, &api.AddPolicyRequest{Policy: export}); err != nil {
		return fmt.Errorf("bgp: export policy: %w", err)
	}
	// The import policy accepts the node's own routes (GoBGP's global import policy also sees
	// locally added paths); its default action rejects every route a peer sends.
	imp := &api.Policy{Name: importPolicy, Statements: []*api.Statement{{
		Name:       importPolicy + "-local",
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ACCEPT},
	}}}
	if err := sp.s.AddPolicy(ctx, &api.AddPolicyRequest{Policy: imp}); err != nil {
		return fmt.Errorf("bgp: import policy: %w", err)
	}
	for _, a := range []*api.PolicyAssignment{
		{Name: "global", Direction: api.PolicyDirection_EXPORT, Policies: []*api.Policy{{Name: exportPolicy}}, DefaultAction: api.RouteAction_REJECT},
		{Name: "global", Direction: api.PolicyDirection_IMPORT, Policies: []*api.Policy{{Name: importPolicy}}, DefaultAction: api.RouteAction_REJECT},
	} {
		if err := sp.s.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: a}); err != nil {
			return fmt.Errorf("bgp: policy assignment %s: %w", a.Direction, err)
		}
	}
	return nil
}

// setOwned makes the export prefix set hold exactly the announced prefixes (exact lengths). The
// set is changed in place (prefixes added, then removed): GoBGP's policy statement keeps the set
// object it was created with, so a replaced set would no longer be the one it matches.
func (sp *Speaker) setOwned(ctx context.Context, routes []Route) error {
	var have, want []netip.Prefix
	for _, r := range sp.cur.Announce {
		have = append(have, r.Prefix)
	}
	for _, r := range routes {
		want = append(want, r.Prefix)
	}
	set := func(ps []netip.Prefix) *api.DefinedSet {
		d := &api.DefinedSet{DefinedType: api.DefinedType_PREFIX, Name: ownedSet}
		for _, p := range ps {
			l := uint32(p.Bits())
			d.Prefixes = append(d.Prefixes, &api.Prefix{IpPrefix: p.String(), MaskLengthMin: l, MaskLengthMax: l})
		}
		return d
	}
	var add, del []netip.Prefix
	for _, p := range want {
		if !slices.Contains(have, p) && !slices.Contains(add, p) {
			add = append(add, p)
		}
	}
	for _, p := range have {
		if !slices.Contains(want, p) && !slices.Contains(del, p) {
			del = append(del, p)
		}
	}
	if len(add) > 0 {
		if err := sp.s.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set(add)}); err != nil {
			return fmt.Errorf("bgp: prefix set: add %v: %w", add, err)
		}
	}
	if len(del) > 0 {
		if err := sp.s.DeleteDefinedSet(ctx, &api.DeleteDefinedSetRequest{DefinedSet: set(del)}); err != nil {
			return fmt.Errorf("bgp: prefix set: remove %v: %w", del, err)
		}
	}
	return nil
}

// Peers returns the sessions' states, by address.
func (sp *Speaker) Peers(ctx context.Context) ([]PeerState, error) {
	sp.mu.Lock()
	running := sp.running
	sp.mu.Unlock()
	if !running {
		return nil, nil
	}
	var out []PeerState
	err := sp.s.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
		if err != nil {
			return
		}
		st := PeerState{Address: a, State: stateName(p.GetState().GetSessionState())}
		for _, af := range p.GetAfiSafis() {
			st.Advertised += af.GetState().GetAdvertised()
			st.Received += af.GetState().GetReceived()
		}
		out = append(out, st)
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Address.Less(out[j].Address) })
	return out, err
}

// Close stops the sessions and the server.
func (sp *Speaker) Close() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.running {
		_ = sp.s.StopBgp(context.Background(), &api.StopBgpRequest{})
		sp.running = false
	}
	sp.s.Stop()
}

func normalize(c Config) Config {
	c.Peers = slices.Clone(c.Peers)
	for i := range c.Peers {
		p := &c.Peers[i]
		if p.Port == 0 {
			p.Port = DefaultPort
		}
		if p.LocalASN == 0 {
			p.LocalASN = c.ASN
		}
		if p.HoldTime == 0 {
			p.HoldTime = DefaultHoldTime
		}
	}
	c.Announce = slices.Clone(c.Announce)
	return c
}

func family(a netip.Addr) *api.Family {
	if a.Is4() {
		return &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	}
	return &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
}

// path is r as a GoBGP path: origin IGP, the next hop (IPv4: NEXT_HOP, RFC 4271; IPv6:
// MP_REACH_NLRI, RFC 4760).
func path(r Route) *api.Path {
	fam := family(r.Prefix.Addr())
	nlri, _ := anypb.New(&api.IPAddressPrefix{Prefix: r.Prefix.Addr().String(), PrefixLen: uint32(r.Prefix.Bits())})
	origin, _ := anypb.New(&api.OriginAttribute{Origin: 0})
	var nh *anypb.Any
	if r.Prefix.Addr().Is4() {
		nh, _ = anypb.New(&api.NextHopAttribute{NextHop: r.NextHop.String()})
	} else {
		nh, _ = anypb.New(&api.MpReachNLRIAttribute{Family: fam, NextHops: []string{r.NextHop.String()}, Nlris: []*anypb.Any{nlri}})
	}
	return &api.Path{Family: fam, Nlri: nlri, Pattrs: []*anypb.Any{origin, nh}}
}

func apiPeer(p Peer, asn uint32) *api.Peer {
	hold := uint64(p.HoldTime / time.Second)
	t := &api.Transport{RemotePort: uint32(p.Port)}
	if p.LocalAddress.IsValid() {
		t.LocalAddress = p.LocalAddress.String()
	}
	local := p.LocalASN
	if local == asn {
		local = 0
	}
	return &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.PeerASN, LocalAsn: local, AuthPassword: p.Password},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: hold, KeepaliveInterval: max(hold/3, 1), ConnectRetry: 5,
		}},
		Transport: t,
		AfiSafis:  []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: family(p.Address), Enabled: true}}},
	}
}

func stateName(s api.PeerState_SessionState) string {
	switch s {
	case api.PeerState_IDLE:
		return "Idle"
	case api.PeerState_CONNECT:
		return "Connect"
	case api.PeerState_ACTIVE:
		return "Active"
	case api.PeerState_OPENSENT:
		return "OpenSent"
	case api.PeerState_OPENCONFIRM:
		return "OpenConfirm"
	case api.PeerState_ESTABLISHED:
		return "Established"
	}
	return "Unknown"
}
