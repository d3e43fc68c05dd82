package nodesetup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// Secondary NICs for egress IPs (--egress-interface; docs/egress.md "Secondary NICs", field case
// C38). Each NIC becomes a second uplink of br-ex: its IPv4 addresses and main-table routes move
// to br-ex like the primary NIC's, the port is isolated from br-ex's NORMAL (Port.tag
// ofctl.SecondaryUplinkTag) and marked for the agent (Interface.external_ids
// ofctl.ExternalIDEgressSubnets = the NIC's subnets; its global IPv6 addresses stay on the NIC
// and their networks go to ofctl.ExternalIDEgressSubnets6, recorded, not routed: the agent
// declines an IPv6 egress IP inside them), and static source routing makes the host
// send whatever is sourced in those subnets (an egress IP's SNATed packets, the host's own
// address there) to the NIC's router:
//
//	ip rule add from SUBNET lookup TABLE priority PRIO
//	ip route add SUBNET dev br-ex scope link src ADDR table TABLE
//	ip route add default via ROUTER dev br-ex table TABLE
//
// All of it is static per NIC: the agent (no capability) only writes flows.

// EgressStateFile is the file in StateDir that records what --egress-interface changed, for
// node-teardown.
const EgressStateFile = "egress-interfaces.json"

// EgressRouteTableBase is the routing table (and ip rule priority) of the first
// --egress-interface; the next ones take the following numbers.
const EgressRouteTableBase = 7100

// EgressInterface is one --egress-interface value, NIC[=ROUTER].
type EgressInterface struct {
	// NIC is the secondary NIC (e.g. "eth1").
	NIC string
	// Router is the next hop of what is sourced in the NIC's subnets; zero: the gateway of the
	// NIC's own main-table routes (an error when it has none).
	Router netip.Addr
}

// ParseEgressInterface parses "NIC" or "NIC=ROUTER" (an IPv4 address).
func ParseEgressInterface(s string) (EgressInterface, error) {
	nic, router, hasRouter := strings.Cut(strings.TrimSpace(s), "=")
	if nic == "" || strings.ContainsAny(nic, " /,") {
		return EgressInterface{}, fmt.Errorf("--egress-interface %q: want NIC or NIC=ROUTER (e.g. eth1=203.0.113.1)", s)
	}
	e := EgressInterface{NIC: nic}
	if hasRouter {
		a, err := netip.ParseAddr(router)
		if err != nil || !a.Is4() {
			return EgressInterface{}, fmt.Errorf("--egress-interface %q: router %q is not an IPv4 address", s, router)
		}
		e.Router = a
	}
	return e, nil
}

// EgressNICState is what --egress-interface changed for one NIC, saved before the change.
type EgressNICState struct {
	NIC      string   `json:"nic"`
	BridgeEx string   `json:"bridgeEx"`
	Subnets  []string `json:"subnets"`
	// Subnets6 are the NIC's IPv6 subnets (its global IPv6 addresses' networks, which stay on
	// the NIC), recorded for the agent (ofctl.ExternalIDEgressSubnets6), which declines an IPv6
	// egress IP inside one: there is no IPv6 source routing for the NIC yet.
	Subnets6 []string `json:"subnets6,omitempty"`
	Router   string   `json:"router"`
	// RouterGiven: Router came from --egress-interface NIC=ROUTER; it then replaces a default
	// route of the NIC's own in the NIC's table.
	RouterGiven bool         `json:"routerGiven,omitempty"`
	Table       int          `json:"table"`
	Addrs       []SavedAddr  `json:"addrs"`
	Routes      []SavedRoute `json:"routes"`
	// ARPOffSet and RPFilter: as State's (userspace datapath only).
	ARPOffSet bool   `json:"arpOffSet,omitempty"`
	RPFilter  string `json:"rpFilter,omitempty"`
}

func (c *Config) egressStatePath() string { return filepath.Join(c.StateDir, EgressStateFile) }

func (c *Config) readEgressState() ([]EgressNICState, error) {
	b, err := os.ReadFile(c.egressStatePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st []EgressNICState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("state file %s: %w (fix or remove it)", c.egressStatePath(), err)
	}
	return st, nil
}

func (c *Config) writeEgressState(st []EgressNICState) error {
	if err := os.MkdirAll(c.StateDir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := c.egressStatePath() + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.egressStatePath())
}

// SetupEgressInterfaces does the --egress-interface part of Setup alone (Setup calls it after
// br-ex is built): each of cfg.EgressInterfaces becomes a secondary uplink of br-ex, with source
// routing for its subnets. Idempotent. br-ex must exist. Errors name the NIC and what to fix.
func SetupEgressInterfaces(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	if err := checkEgressInterfaces(cfg); err != nil {
		return Result{}, err
	}
	db, err := ofctl.Connect(ctx, cfg.OVSDB)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	r := &run{cfg: &cfg, db: db}
	if err := r.preflightEgressInterfaces(ctx); err != nil {
		return r.res, err
	}
	err = r.setupEgressNICs(ctx)
	return r.res, err
}

// TeardownEgressInterfaces undoes SetupEgressInterfaces from its state file (Teardown calls it
// before br-ex goes): the rules and tables, the port, the NIC's addresses and routes back on the
// NIC, ARP and rp_filter as they were.
func TeardownEgressInterfaces(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	db, err := ofctl.Connect(ctx, cfg.OVSDB)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	r := &run{cfg: &cfg, db: db}
	err = r.teardownEgressNICs(ctx)
	return r.res, err
}

// checkEgressInterfaces refuses, before anything changes, an --egress-interface that names no
// network device, the primary NIC (also the one --nic=auto picks: the interface of the default
// route) or br-ex.
func checkEgressInterfaces(c Config) error {
	primary := c.NIC
	if primary == NICAuto && len(c.EgressInterfaces) > 0 {
		primary, _ = defaultRouteLink() // none: the br-ex step says so
	}
	for _, ei := range c.EgressInterfaces {
		if ei.NIC == primary || ei.NIC == c.BridgeEx || (c.BridgeEx == "" && ei.NIC == DefaultBridgeEx) {
			return fmt.Errorf("--egress-interface %s: that is the primary NIC or br-ex; name a secondary NIC", ei.NIC)
		}
		if _, err := netlink.LinkByName(ei.NIC); err != nil {
			return fmt.Errorf("--egress-interface %s: %w (no such network device on this node)", ei.NIC, err)
		}
	}
	return nil
}

// preflightEgressInterfaces refuses, before anything on the node changes (Setup calls it before
// the br-ex step), an --egress-interface that cannot work: a port OVS already has that is not a
// secondary uplink (the primary uplink, srcip-gw0, a pod's veth), a NIC without an IPv4 address
// (neither now nor recorded by an earlier run), a ROUTER that is not a host of the NIC's
// subnets, and a subnet that overlaps an address of another interface (the primary NIC's,
// another secondary NIC's, the pod gateway's): its ip rule and br-ex's flows would take that
// interface's traffic to the secondary segment.
func (r *run) preflightEgressInterfaces(ctx context.Context) error {
	c := r.cfg
	if len(c.EgressInterfaces) == 0 {
		return nil
	}
	saved, err := c.readEgressState()
	if err != nil {
		return err
	}
	all, err := netlink.AddrList(nil, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("list addresses: %w", err)
	}
	for _, ei := range c.EgressInterfaces {
		bridge, secondary, err := r.db.PortBridge(ctx, ei.NIC)
		if err != nil {
			return fmt.Errorf("--egress-interface %s: %w", ei.NIC, err)
		}
		if bridge != "" && !secondary {
			return fmt.Errorf("--egress-interface %s: already a port of OVS bridge %s (the primary uplink, the gateway port or a pod's port?); name a secondary NIC that is in no bridge", ei.NIC, bridge)
		}
		link, err := netlink.LinkByName(ei.NIC)
		if err != nil {
			return fmt.Errorf("--egress-interface %s: %w (no such network device on this node)", ei.NIC, err)
		}
		if bridge == "" {
			addrs, routes, err := nicAddrsRoutes(link, false)
			if err != nil {
				return err
			}
			if err := checkNotDHCP("--egress-interface "+ei.NIC, link, addrs, routes); err != nil {
				return err
			}
		}
		own := map[netip.Addr]bool{}
		var subnets []netip.Prefix
		addPrefix := func(p netip.Prefix) {
			if !p.Addr().Is4() {
				return
			}
			own[p.Addr()] = true
			if !slices.Contains(subnets, p.Masked()) {
				subnets = append(subnets, p.Masked())
			}
		}
		for _, a := range all {
			if a.LinkIndex == link.Attrs().Index {
				if p, ok := addrPrefix(a); ok {
					addPrefix(p)
				}
			}
		}
		if i := slices.IndexFunc(saved, func(s EgressNICState) bool { return s.NIC == ei.NIC }); i >= 0 {
			for _, sa := range saved[i].Addrs {
				if p, err := netip.ParsePrefix(sa.CIDR); err == nil {
					addPrefix(p)
				}
			}
		}
		if len(subnets) == 0 {
			return fmt.Errorf("--egress-interface %s: %s has no IPv4 address: the egress IPs' subnet is the NIC's (give it its address first)", ei.NIC, ei.NIC)
		}
		if ei.Router.IsValid() {
			if err := checkRouter(ei.Router, subnets, own); err != nil {
				return fmt.Errorf("--egress-interface %s: %w", ei.NIC, err)
			}
		}
		for _, a := range all {
			p, ok := addrPrefix(a)
			if !ok || a.LinkIndex == link.Attrs().Index || own[p.Addr()] || p.Addr().IsLoopback() {
				continue
			}
			for _, s := range subnets {
				if s.Overlaps(p.Masked()) {
					name := fmt.Sprint(a.LinkIndex)
					if l, err := netlink.LinkByIndex(a.LinkIndex); err == nil {
						name = l.Attrs().Name
					}
					return fmt.Errorf("--egress-interface %s: its subnet %s overlaps %s on %s (the primary NIC's, another secondary NIC's or the pod gateway's): its source routing would take that traffic to the secondary segment; give the NIC an address in a subnet of its own", ei.NIC, s, p, name)
				}
			}
		}
	}
	return nil
}

// addrPrefix is a's IPv4 address with its prefix length.
func addrPrefix(a netlink.Addr) (netip.Prefix, bool) {
	if a.IPNet == nil {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(a.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	bits, _ := a.Mask.Size()
	return netip.PrefixFrom(ip, bits), true
}

// globalIPv6Subnets are the networks of the global unicast IPv6 addresses among addrs (no
// link-local, no IPv4-mapped one), masked and without repeats, in order. node-setup records them
// for a secondary NIC (EgressNICState.Subnets6) but does not route them: the agent declines an
// IPv6 egress IP inside one instead of serving it on the primary uplink.
func globalIPv6Subnets(addrs []netlink.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range addrs {
		if a.IPNet == nil || a.IP.To4() != nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || !ip.Is6() || !ip.IsGlobalUnicast() {
			continue
		}
		bits, _ := a.Mask.Size()
		if p := netip.PrefixFrom(ip, bits).Masked(); p.IsValid() && p.Bits() > 0 && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// checkRouter refuses a router outside subnets, or that is a subnet's network or broadcast
// address (below /31) or one of the NIC's own addresses (own).
func checkRouter(router netip.Addr, subnets []netip.Prefix, own map[netip.Addr]bool) error {
	i := slices.IndexFunc(subnets, func(p netip.Prefix) bool { return p.Contains(router) })
	if i < 0 {
		return fmt.Errorf("router %s is not inside the NIC's subnets %v", router, subnets)
	}
	if own[router] {
		return fmt.Errorf("router %s is the NIC's own address; give the next hop's address", router)
	}
	if p := subnets[i]; p.Bits() < 31 {
		a := p.Masked().Addr().As4()
		host := ^uint32(0) >> p.Bits()
		bcast := netip.AddrFrom4([4]byte{a[0] | byte(host>>24), a[1] | byte(host>>16), a[2] | byte(host>>8), a[3] | byte(host)})
		if router == p.Masked().Addr() || router == bcast {
			return fmt.Errorf("router %s is the network or broadcast address of %s; give the next hop's address", router, p)
		}
	}
	return nil
}

func (r *run) setupEgressNICs(ctx context.Context) error {
	c := r.cfg
	if len(c.EgressInterfaces) == 0 {
		return nil
	}
	saved, err := c.readEgressState()
	if err != nil {
		return err
	}
	_, dpType, err := r.db.Bridge(ctx, c.BridgeEx)
	if err != nil {
		return fmt.Errorf("--egress-interface needs %s: %w", c.BridgeEx, err)
	}
	brLink, err := netlink.LinkByName(c.BridgeEx)
	if err != nil {
		return fmt.Errorf("network device %s: %w", c.BridgeEx, err)
	}
	for i, ei := range c.EgressInterfaces {
		if ei.NIC == c.BridgeEx {
			return fmt.Errorf("--egress-interface %s: that is br-ex itself", ei.NIC)
		}
		idx := slices.IndexFunc(saved, func(s EgressNICState) bool { return s.NIC == ei.NIC })
		var st EgressNICState
		if idx >= 0 {
			st = saved[idx]
		} else {
			st = EgressNICState{NIC: ei.NIC, BridgeEx: c.BridgeEx, Table: EgressRouteTableBase + i}
			for slices.ContainsFunc(saved, func(s EgressNICState) bool { return s.Table == st.Table }) {
				st.Table++
			}
		}
		if err := r.setupEgressNIC(ctx, ei, &st, brLink, dpType, func() error {
			if idx >= 0 {
				saved[idx] = st
			} else {
				saved = append(saved, st)
				idx = len(saved) - 1
			}
			return c.writeEgressState(saved)
		}); err != nil {
			return fmt.Errorf("--egress-interface %s: %w", ei.NIC, err)
		}
	}
	return nil
}

func (r *run) setupEgressNIC(ctx context.Context, ei EgressInterface, st *EgressNICState, br netlink.Link, dpType string, save func() error) error {
	c := r.cfg
	link, err := netlink.LinkByName(ei.NIC)
	if err != nil {
		return fmt.Errorf("%w (check --egress-interface)", err)
	}
	addrs, routes, err := nicAddrsRoutes(link, false)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		sa := saveAddr(a)
		if !slices.ContainsFunc(st.Addrs, func(x SavedAddr) bool { return x.CIDR == sa.CIDR }) {
			st.Addrs = append(st.Addrs, sa)
		}
	}
	for _, rt := range routes {
		sr := saveRoute(rt)
		if !slices.ContainsFunc(st.Routes, func(x SavedRoute) bool { return x.Dst == sr.Dst && x.Metric == sr.Metric }) {
			st.Routes = append(st.Routes, sr)
		}
	}
	var subnets []netip.Prefix
	var srcs []netip.Addr
	for _, sa := range st.Addrs {
		p, err := netip.ParsePrefix(sa.CIDR)
		if err != nil || !p.Addr().Is4() {
			continue
		}
		if !slices.Contains(subnets, p.Masked()) {
			subnets = append(subnets, p.Masked())
			srcs = append(srcs, p.Addr())
		}
	}
	if len(subnets) == 0 {
		return fmt.Errorf("%s has no IPv4 address: the egress IPs' subnet is the NIC's (give it its address first)", ei.NIC)
	}
	router := ei.Router
	if router.IsValid() {
		st.RouterGiven = true
	}
	if !router.IsValid() && st.Router != "" {
		router, _ = netip.ParseAddr(st.Router)
	}
	if !router.IsValid() {
		// The gateway of the NIC's own default route, else of any of its routes.
		for _, dflt := range []bool{true, false} {
			for _, sr := range st.Routes {
				if a, err := netip.ParseAddr(sr.Gw); err == nil && a.Is4() && (!dflt || sr.Dst == "0.0.0.0/0") && !router.IsValid() {
					router = a
				}
			}
		}
	}
	if !router.IsValid() {
		return fmt.Errorf("no router known for %s (no route through it has a gateway): give --egress-interface %s=ROUTER", ei.NIC, ei.NIC)
	}
	own := map[netip.Addr]bool{}
	for _, a := range srcs {
		own[a] = true
	}
	for _, sa := range st.Addrs {
		if p, err := netip.ParsePrefix(sa.CIDR); err == nil {
			own[p.Addr()] = true
		}
	}
	if err := checkRouter(router, subnets, own); err != nil {
		return err
	}
	st.Router = router.String()
	st.Subnets = nil
	for _, p := range subnets {
		st.Subnets = append(st.Subnets, p.String())
	}
	if err := save(); err != nil {
		return err
	}

	if dpType == "netdev" {
		// The node's kernel still sees the NIC's frames (docs/lab-facts.md pitfalls 2): no ARP
		// answers from the NIC itself, and strict reverse-path filtering drops the kernel's copy
		// of every packet (its route back goes through br-ex, not the NIC).
		// Before the NIC goes into OVS: ovs-vswitchd writes back the interface flags it read when
		// it opened the NIC, which would undo an ARP off set meanwhile.
		if link.Attrs().RawFlags&unix.IFF_NOARP == 0 {
			if err := netlink.LinkSetARPOff(link); err != nil {
				return fmt.Errorf("arp off: %w", err)
			}
			st.ARPOffSet = true
			if err := save(); err != nil {
				return err
			}
			r.changed("ARP off on %s (userspace datapath)", ei.NIC)
		}
		old, err := readSysctl(rpFilterPath(ei.NIC))
		if err != nil {
			return err
		}
		if old != "1" {
			if st.RPFilter == "" {
				st.RPFilter = old
				if err := save(); err != nil {
					return err
				}
			}
			if err := writeSysctl(rpFilterPath(ei.NIC), "1"); err != nil {
				return err
			}
			r.changed("net.ipv4.conf.%s.rp_filter=1 (userspace datapath)", ei.NIC)
		}
	}
	as6, err := netlink.AddrList(link, unix.AF_INET6)
	if err != nil {
		return fmt.Errorf("IPv6 addresses of %s: %w", ei.NIC, err)
	}
	subnets6 := globalIPv6Subnets(as6)
	st.Subnets6 = nil
	for _, p := range subnets6 {
		st.Subnets6 = append(st.Subnets6, p.String())
	}
	if err := save(); err != nil {
		return err
	}
	changes, err := r.db.EnsureSecondaryUplink(ctx, c.BridgeEx, ei.NIC, append(slices.Clone(subnets), subnets6...))
	if err != nil {
		return err
	}
	for _, ch := range changes {
		r.changed("%s", ch)
	}
	if _, _, err := r.db.WaitInterface(ctx, ei.NIC, false, 30*time.Second); err != nil {
		return err
	}
	if st.ARPOffSet {
		if l, err := netlink.LinkByName(ei.NIC); err == nil && l.Attrs().RawFlags&unix.IFF_NOARP == 0 {
			if err := netlink.LinkSetARPOff(l); err != nil {
				return fmt.Errorf("arp off: %w", err)
			}
		}
	}
	if len(addrs) > 0 {
		// The NIC's default route (if any) goes to its own table only: in the main table it would
		// compete with (or replace) the primary NIC's.
		if err := moveAddrsRoutes(link, br, &State{Addrs: st.Addrs, Routes: st.mainRoutes()}); err != nil {
			return err
		}
		r.changed("moved %s's %d addresses and %d routes to %s", ei.NIC, len(st.Addrs), len(st.Routes), c.BridgeEx)
	}
	// Source routing: table st.Table holds the subnets (on-link through br-ex), the NIC's own
	// routes through a gateway and the default route via the NIC's router; one rule per subnet
	// sends its sources there.
	// The table is the NIC's alone: what is not wanted there goes, what is missing or differs is
	// written (and reported).
	want := egressTableRoutes(*st)
	gw := router.String()
	var wantRoutes []*netlink.Route
	for _, sr := range want {
		rt, err := sr.route(br.Attrs().Index)
		if err != nil {
			return err
		}
		rt.Table = st.Table
		wantRoutes = append(wantRoutes, rt)
		if sr.Dst == "0.0.0.0/0" {
			gw = sr.Gw
		}
	}
	have, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: st.Table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("routes of table %d: %w", st.Table, err)
	}
	for i := range have {
		if !slices.ContainsFunc(wantRoutes, func(w *netlink.Route) bool { return sameTableRoute(&have[i], w) }) {
			if err := netlink.RouteDel(&have[i]); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delete route %s table %d: %w", have[i].Dst, st.Table, err)
			}
			r.changed("deleted route %s via %s from table %d", have[i].Dst, have[i].Gw, st.Table)
		}
	}
	for _, rt := range wantRoutes {
		if slices.ContainsFunc(have, func(h netlink.Route) bool { return sameTableRoute(&h, rt) }) {
			continue
		}
		if err := netlink.RouteReplace(rt); err != nil {
			return fmt.Errorf("route %s table %d: %w", rt.Dst, st.Table, err)
		}
		r.changed("route %s via %s dev %s table %d", rt.Dst, rt.Gw, c.BridgeEx, st.Table)
	}
	for _, p := range subnets {
		added, err := ensureRule(p, st.Table)
		if err != nil {
			return err
		}
		if added {
			r.changed("ip rule from %s lookup %d (default via %s dev %s)", p, st.Table, gw, c.BridgeEx)
		} else {
			r.unchanged("ip rule from %s lookup %d", p, st.Table)
		}
	}
	return nil
}

// mainRoutes are the NIC's saved routes that go to br-ex in the main table: all but a default
// route.
func (st EgressNICState) mainRoutes() []SavedRoute {
	var out []SavedRoute
	for _, r := range st.Routes {
		if r.Dst != "0.0.0.0/0" {
			out = append(out, r)
		}
	}
	return out
}

// egressTableRoutes are the routes of st's table: each subnet on-link (source: the NIC's
// address in it), the NIC's saved routes through a gateway inside its subnets (so a destination
// the NIC's network routes elsewhere keeps that next hop), and the default route via st.Router.
func egressTableRoutes(st EgressNICState) []SavedRoute {
	var out []SavedRoute
	var subnets []netip.Prefix
	for _, s := range st.Subnets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			continue
		}
		subnets = append(subnets, p)
		src := ""
		for _, a := range st.Addrs {
			if ap, err := netip.ParsePrefix(a.CIDR); err == nil && ap.Masked() == p {
				src = ap.Addr().String()
				break
			}
		}
		out = append(out, SavedRoute{Dst: p.String(), Src: src, Scope: int(netlink.SCOPE_LINK), Protocol: unix.RTPROT_STATIC})
	}
	hasDefault := false
	for _, r := range st.Routes {
		gw, err := netip.ParseAddr(r.Gw)
		if err != nil || !slices.ContainsFunc(subnets, func(p netip.Prefix) bool { return p.Contains(gw) }) {
			continue
		}
		if r.Dst == "0.0.0.0/0" && st.RouterGiven {
			continue // NIC=ROUTER replaces the NIC's own default route
		}
		hasDefault = hasDefault || r.Dst == "0.0.0.0/0"
		out = append(out, SavedRoute{Dst: r.Dst, Gw: r.Gw, Metric: r.Metric, Scope: int(netlink.SCOPE_UNIVERSE), Protocol: unix.RTPROT_STATIC})
	}
	if !hasDefault && st.Router != "" {
		out = append(out, SavedRoute{Dst: "0.0.0.0/0", Gw: st.Router, Scope: int(netlink.SCOPE_UNIVERSE), Protocol: unix.RTPROT_STATIC})
	}
	return out
}

// sameTableRoute reports whether route a of the NIC's table is b (destination, gateway,
// source, device, metric).
func sameTableRoute(a, b *netlink.Route) bool {
	dst := func(r *netlink.Route) string {
		if r.Dst == nil {
			return "0.0.0.0/0"
		}
		return r.Dst.String()
	}
	return dst(a) == dst(b) && a.Gw.Equal(b.Gw) && a.Src.Equal(b.Src) && a.LinkIndex == b.LinkIndex && a.Priority == b.Priority
}

// egressRule is the ip rule "from p lookup table priority table".
func egressRule(p netip.Prefix, table int) *netlink.Rule {
	rule := netlink.NewRule()
	_, src, _ := net.ParseCIDR(p.String())
	rule.Src = src
	rule.Table = table
	rule.Priority = table
	rule.Family = unix.AF_INET
	return rule
}

// ensureRule adds egressRule(p, table) when no such rule exists; added reports whether it did.
func ensureRule(p netip.Prefix, table int) (added bool, err error) {
	want := egressRule(p, table)
	rules, err := netlink.RuleListFiltered(unix.AF_INET, want, netlink.RT_FILTER_SRC|netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, fmt.Errorf("list ip rules: %w", err)
	}
	for _, r := range rules {
		if r.Priority == table {
			return false, nil
		}
	}
	if err := netlink.RuleAdd(want); err != nil {
		return false, fmt.Errorf("ip rule from %s lookup %d: %w", p, table, err)
	}
	return true, nil
}

func (r *run) teardownEgressNICs(ctx context.Context) error {
	c := r.cfg
	saved, err := c.readEgressState()
	if err != nil {
		return err
	}
	if saved == nil {
		r.unchanged("no state file %s: no secondary NIC to put back", c.egressStatePath())
		return nil
	}
	var errs []error
	for _, st := range saved {
		if err := r.teardownEgressNIC(ctx, st); err != nil {
			errs = append(errs, fmt.Errorf("secondary NIC %s: %w", st.NIC, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := os.Remove(c.egressStatePath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	r.changed("removed %s", c.egressStatePath())
	return nil
}

func (r *run) teardownEgressNIC(ctx context.Context, st EgressNICState) error {
	removed := 0
	for _, s := range st.Subnets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			continue
		}
		if err := netlink.RuleDel(egressRule(p, st.Table)); err == nil {
			removed++
		} else if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("delete ip rule from %s lookup %d: %w", p, st.Table, err)
		}
	}
	routes, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: st.Table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("routes of table %d: %w", st.Table, err)
	}
	for _, rt := range routes {
		if err := netlink.RouteDel(&rt); err == nil {
			removed++
		} else if !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("delete route %s table %d: %w", rt.Dst, st.Table, err)
		}
	}
	if removed > 0 {
		r.changed("removed the ip rules and table %d of %s", st.Table, st.NIC)
	} else {
		r.unchanged("no ip rule or route of table %d (%s)", st.Table, st.NIC)
	}
	if err := r.db.DetachPorts(ctx, st.BridgeEx, st.NIC); err != nil {
		return err
	}
	if br, err := netlink.LinkByName(st.BridgeEx); err == nil {
		for _, sa := range st.Addrs {
			if a, err := sa.addr(); err == nil {
				_ = netlink.AddrDel(br, a)
			}
		}
	}
	nic, err := netlink.LinkByName(st.NIC)
	if nf := (netlink.LinkNotFoundError{}); errors.As(err, &nf) {
		// The NIC is gone (unplugged, renamed): its addresses are off br-ex, there is nothing
		// to put them back on. Done, so that the state file goes and a second run is clean.
		r.changed("%s is gone: its %d addresses taken off %s, nothing to put back", st.NIC, len(st.Addrs), st.BridgeEx)
		return nil
	}
	if err != nil {
		return fmt.Errorf("NIC %s: %w", st.NIC, err)
	}
	for _, sa := range st.Addrs {
		a, err := sa.addr()
		if err != nil {
			return err
		}
		if err := netlink.AddrReplace(nic, a); err != nil {
			return fmt.Errorf("address %s on %s: %w", sa.CIDR, st.NIC, err)
		}
	}
	for _, sr := range st.Routes {
		rt, err := sr.route(nic.Attrs().Index)
		if err != nil {
			return err
		}
		if err := netlink.RouteReplace(rt); err != nil {
			return fmt.Errorf("route %s on %s: %w", sr.Dst, st.NIC, err)
		}
	}
	if st.RPFilter != "" {
		if err := writeSysctl(rpFilterPath(st.NIC), st.RPFilter); err != nil {
			return err
		}
	}
	if st.ARPOffSet {
		// ovs-vswitchd writes back the flags it read when it let the NIC go (brex.go's
		// restoreNIC): wait for it to have closed the NIC, then set ARP on.
		for try := 0; try < 10; try++ {
			if err := ensureARPOn(st.NIC); err != nil {
				return err
			}
			if try >= 2 {
				if l, err := netlink.LinkByName(st.NIC); err == nil && l.Attrs().RawFlags&unix.IFF_NOARP == 0 {
					break
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timeAfter200ms():
			}
		}
	}
	r.changed("%s has its %d addresses and %d routes back, out of %s", st.NIC, len(st.Addrs), len(st.Routes), st.BridgeEx)
	return nil
}

func timeAfter200ms() <-chan time.Time { return time.After(200 * time.Millisecond) }
