package nodesetup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// State is what the br-ex step moved from the NIC, saved (before anything is moved) in
// StateDir/StateFile for node-teardown.
type State struct {
	NIC      string `json:"nic"`
	BridgeEx string `json:"bridgeEx"`
	// NICMAC is the NIC's MAC, given to br-ex (other_config:hwaddr).
	NICMAC string `json:"nicMAC"`
	// ARPOffSet: node-setup turned ARP off on the NIC (userspace datapath only: the node's
	// kernel still sees the NIC's frames there, docs/lab-facts.md pitfall 2).
	ARPOffSet bool `json:"arpOffSet,omitempty"`
	// RPFilter is the NIC's net.ipv4.conf.<nic>.rp_filter before node-setup set it to 1 (strict),
	// userspace datapath only: the node's kernel also receives the NIC's frames there, and
	// without the reverse-path check it would take every packet to the node twice (once from the
	// NIC, once from br-ex). Empty: not changed.
	RPFilter string `json:"rpFilter,omitempty"`
	// IPv6Disabled is the NIC's net.ipv6.conf.<nic>.disable_ipv6 before node-setup set it to 1,
	// userspace datapath with IPv6 addresses moved only: the node's kernel also receives the
	// NIC's frames there and, IPv6 having no rp_filter, would take every IPv6 packet to the node
	// twice. Empty: not changed.
	IPv6Disabled string `json:"ipv6Disabled,omitempty"`
	// Addrs are the NIC's IPv4 addresses and its global IPv6 addresses (link-local fe80::/10 is
	// the kernel's, on the NIC and on br-ex alike).
	Addrs  []SavedAddr  `json:"addrs"`
	Routes []SavedRoute `json:"routes"`
}

// SavedAddr is one IPv4 or global IPv6 address of the NIC.
type SavedAddr struct {
	CIDR      string `json:"cidr"`
	Broadcast string `json:"broadcast,omitempty"`
	Flags     int    `json:"flags,omitempty"`
	Scope     int    `json:"scope,omitempty"`
	// ValidLft and PreferedLft are the remaining lifetimes in seconds of a dynamic (DHCP)
	// address; 0 for a permanent one. node-setup refuses a NIC with a dynamic address
	// (checkNotDHCP): only state files of older releases carry them.
	ValidLft    int `json:"validLft,omitempty"`
	PreferedLft int `json:"preferedLft,omitempty"`
}

// SavedRoute is one IPv4 or IPv6 route of the main table through the NIC (not the kernel's
// prefix routes, which come back with the addresses).
type SavedRoute struct {
	Dst      string `json:"dst"` // "0.0.0.0/0" or "::/0" for the default route
	Gw       string `json:"gw,omitempty"`
	Src      string `json:"src,omitempty"`
	Metric   int    `json:"metric,omitempty"`
	Scope    int    `json:"scope"`
	Protocol int    `json:"protocol"`
	Type     int    `json:"type,omitempty"`
	Flags    int    `json:"flags,omitempty"`
	MTU      int    `json:"mtu,omitempty"`
	AdvMSS   int    `json:"advmss,omitempty"`
}

const infinityLifetime = 0xFFFFFFFF

func saveAddr(a netlink.Addr) SavedAddr {
	s := SavedAddr{CIDR: a.IPNet.String(), Flags: a.Flags & unix.IFA_F_NOPREFIXROUTE, Scope: a.Scope}
	if a.Broadcast != nil {
		s.Broadcast = a.Broadcast.String()
	}
	if a.ValidLft > 0 && a.ValidLft != infinityLifetime {
		s.ValidLft, s.PreferedLft = a.ValidLft, a.PreferedLft
	}
	return s
}

func (s SavedAddr) addr() (*netlink.Addr, error) {
	ipn, err := netlink.ParseIPNet(s.CIDR)
	if err != nil {
		return nil, err
	}
	a := &netlink.Addr{IPNet: ipn, Flags: s.Flags, Scope: s.Scope, ValidLft: s.ValidLft, PreferedLft: s.PreferedLft}
	if ipn.IP.To4() == nil {
		// Usable at once where it lands (br-ex, or the NIC again): it was the node's address a
		// moment ago, no duplicate to detect.
		a.Flags |= unix.IFA_F_NODAD
	}
	if s.Broadcast != "" {
		a.Broadcast = net.ParseIP(s.Broadcast)
	}
	return a, nil
}

func saveRoute(r netlink.Route) SavedRoute {
	s := SavedRoute{Dst: "0.0.0.0/0", Metric: r.Priority, Scope: int(r.Scope), Protocol: int(r.Protocol),
		Type: r.Type, Flags: r.Flags, MTU: r.MTU, AdvMSS: r.AdvMSS}
	if r.Family == unix.AF_INET6 {
		s.Dst = "::/0"
	}
	if r.Dst != nil {
		s.Dst = r.Dst.String()
	}
	if r.Gw != nil {
		s.Gw = r.Gw.String()
	}
	if r.Src != nil {
		s.Src = r.Src.String()
	}
	return s
}

func (s SavedRoute) route(link int) (*netlink.Route, error) {
	_, dst, err := net.ParseCIDR(s.Dst)
	if err != nil {
		return nil, err
	}
	r := &netlink.Route{LinkIndex: link, Dst: dst, Priority: s.Metric, Scope: netlink.Scope(s.Scope),
		Protocol: netlink.RouteProtocol(s.Protocol), Type: s.Type, Flags: s.Flags, MTU: s.MTU, AdvMSS: s.AdvMSS,
		Table: unix.RT_TABLE_MAIN, Family: unix.AF_INET}
	if dst.IP.To4() == nil {
		r.Family = unix.AF_INET6
	}
	if s.Gw != "" {
		r.Gw = net.ParseIP(s.Gw)
	}
	if s.Src != "" {
		r.Src = net.ParseIP(s.Src)
	}
	return r, nil
}

func (c *Config) statePath() string { return filepath.Join(c.StateDir, StateFile) }

func (c *Config) readState() (*State, error) {
	b, err := os.ReadFile(c.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st := &State{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("state file %s: %w (fix or remove it)", c.statePath(), err)
	}
	return st, nil
}

func (c *Config) writeState(st *State) error {
	if err := os.MkdirAll(c.StateDir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w (--state-dir must be writable, a hostPath in the DaemonSet)", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := c.statePath() + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	f, err := os.Open(tmp)
	if err == nil {
		_ = f.Sync()
		f.Close()
	}
	return os.Rename(tmp, c.statePath())
}

// nicAddrsRoutes returns the NIC's IPv4 addresses and its main-table IPv4 routes other than the
// kernel's prefix routes; with v6 also its IPv6 addresses other than link-local ones (fe80::/10,
// the kernel's) and its main-table IPv6 routes other than the kernel's (prefix routes,
// fe80::/64).
func nicAddrsRoutes(link netlink.Link, v6 bool) ([]netlink.Addr, []netlink.Route, error) {
	fams := []int{unix.AF_INET}
	if v6 {
		fams = append(fams, unix.AF_INET6)
	}
	var addrs []netlink.Addr
	var routes []netlink.Route
	for _, fam := range fams {
		as, err := netlink.AddrList(link, fam)
		if err != nil {
			return nil, nil, fmt.Errorf("addresses of %s: %w", link.Attrs().Name, err)
		}
		for _, a := range as {
			if fam == unix.AF_INET6 && (a.IP.IsLinkLocalUnicast() || a.IP.To4() != nil) {
				continue
			}
			addrs = append(addrs, a)
		}
		rs, err := netlink.RouteListFiltered(fam, &netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, nil, fmt.Errorf("routes of %s: %w", link.Attrs().Name, err)
		}
		routes = append(routes, rs...)
	}
	var out []netlink.Route
	for _, r := range routes {
		if r.Protocol == unix.RTPROT_KERNEL || len(r.MultiPath) > 0 || r.Type != unix.RTN_UNICAST {
			continue
		}
		out = append(out, r)
	}
	return addrs, out, nil
}

// withoutDynamicIPv6 returns addrs and routes without any IPv6 one when the NIC has dynamic IPv6
// configuration (an IPv6 address without IFA_F_PERMANENT or with a finite valid lifetime, a
// route from a router advertisement: the static IPv6 routes may need the dynamic address's
// prefix), and the dynamic parts, described; unchanged when the IPv6 configuration is static.
func withoutDynamicIPv6(addrs []netlink.Addr, routes []netlink.Route) ([]netlink.Addr, []netlink.Route, []string) {
	var dyn []string
	for _, a := range addrs {
		if a.IP.To4() == nil && (a.Flags&unix.IFA_F_PERMANENT == 0 || (a.ValidLft > 0 && a.ValidLft != infinityLifetime)) {
			dyn = append(dyn, "address "+a.IPNet.String())
		}
	}
	for _, r := range routes {
		if r.Protocol == unix.RTPROT_RA {
			dst := "default"
			if r.Dst != nil {
				dst = r.Dst.String()
			}
			dyn = append(dyn, "route "+dst+" (proto ra)")
		}
	}
	if len(dyn) == 0 {
		return addrs, routes, nil
	}
	addrs = slices.DeleteFunc(addrs, func(a netlink.Addr) bool { return a.IP.To4() == nil })
	routes = slices.DeleteFunc(routes, func(r netlink.Route) bool { return r.Family == unix.AF_INET6 })
	return addrs, routes, dyn
}

// defaultRouteLink returns the name of the interface of the IPv4 default route of the main
// table (the one with the lowest metric).
func defaultRouteLink() (string, error) {
	routes, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return "", err
	}
	best, name := -1, ""
	for _, r := range routes {
		if (r.Dst != nil && r.Dst.IP != nil && !r.Dst.IP.IsUnspecified()) || (r.Dst != nil && maskBits(r.Dst) != 0) || r.LinkIndex == 0 {
			continue
		}
		if best >= 0 && r.Priority >= best {
			continue
		}
		l, err := netlink.LinkByIndex(r.LinkIndex)
		if err != nil {
			continue
		}
		best, name = r.Priority, l.Attrs().Name
	}
	if name == "" {
		return "", errors.New("--nic=auto: no IPv4 default route on this node; name the NIC (--nic)")
	}
	return name, nil
}

func maskBits(n *net.IPNet) int { b, _ := n.Mask.Size(); return b }

// setupBrEx builds br-ex from the NIC and returns the underlay MTU (br-ex's).
func (r *run) setupBrEx(ctx context.Context) (int, error) {
	c := r.cfg
	nic := c.NIC
	if nic == NICAuto {
		var err error
		if nic, err = defaultRouteLink(); err != nil {
			return 0, err
		}
		if nic == c.BridgeEx {
			nic = ""
		}
	}
	ports, dpType, brErr := r.db.Bridge(ctx, c.BridgeEx)
	if brErr != nil && !errors.Is(brErr, ofctl.ErrBridgeNotFound) {
		return 0, brErr
	}
	if nic == "" {
		if brErr != nil {
			return 0, fmt.Errorf("%s does not exist and no NIC to build it from: give --nic (the node's uplink, or auto)", c.BridgeEx)
		}
		r.unchanged("%s exists (no NIC to move)", c.BridgeEx)
		return linkMTU(c.BridgeEx)
	}
	link, err := netlink.LinkByName(nic)
	if err != nil {
		return 0, fmt.Errorf("NIC %s: %w (check --nic)", nic, err)
	}
	addrs, routes, err := nicAddrsRoutes(link, true)
	if err != nil {
		return 0, err
	}
	if !hasV6(c.PodCIDRs) {
		// A node without an IPv6 pod CIDR is set up as before IPv6 when the NIC's IPv6 is
		// dynamic (SLAAC, DHCPv6, router advertisements): no reason to refuse, and all of its
		// IPv6 addresses and routes are left on the NIC.
		var left []string
		addrs, routes, left = withoutDynamicIPv6(addrs, routes)
		if len(left) > 0 {
			c.Logf("note: %s's IPv6 configuration is dynamic and stays on it, not moved to %s (the node has no IPv6 pod CIDR; IPv6 through %s stops once it is a port of %s): %s",
				nic, c.BridgeEx, nic, c.BridgeEx, strings.Join(left, ", "))
		}
	}
	if brErr == nil && slices.Contains(ports, nic) && len(addrs) == 0 {
		r.unchanged("%s holds %s, whose addresses are on %s", c.BridgeEx, nic, c.BridgeEx)
		return linkMTU(c.BridgeEx)
	}
	// Before anything moves: a NIC whose addresses come from DHCP stays unchanged.
	if err := checkNotDHCP("NIC "+nic, link, addrs, routes); err != nil {
		return 0, err
	}
	if brErr == nil {
		if dpType != c.DatapathType && (dpType != "" || c.DatapathType != "system") {
			c.Logf("note: %s exists with datapath_type %q; keeping it (--datapath-type %q ignored)", c.BridgeEx, dpType, c.DatapathType)
		}
		c.DatapathType = dpType
	}
	dpType = c.DatapathType

	// Save what will move, before anything moves. A state file of an interrupted run that had
	// already moved some addresses is merged, not replaced.
	st, err := c.readState()
	if err != nil {
		return 0, err
	}
	if st == nil || st.NIC != nic {
		st = &State{NIC: nic, BridgeEx: c.BridgeEx}
	}
	st.NICMAC = link.Attrs().HardwareAddr.String()
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
	if err := c.writeState(st); err != nil {
		return 0, err
	}
	r.changed("saved %s's %d addresses and %d routes in %s", nic, len(st.Addrs), len(st.Routes), c.statePath())

	// br-ex without the NIC first: its internal port must exist and be up before the move.
	changes, err := r.db.EnsureBridge(ctx, ofctl.BridgeSpec{Name: c.BridgeEx, DatapathType: c.DatapathType, HWAddr: st.NICMAC})
	if err != nil {
		return 0, err
	}
	for _, ch := range changes {
		r.changed("%s", ch)
	}
	if _, _, err := r.db.WaitInterface(ctx, c.BridgeEx, true, 30*time.Second); err != nil {
		return 0, err
	}
	br, err := waitLink(ctx, c.BridgeEx, 10*time.Second)
	if err != nil {
		return 0, err
	}
	mtu := link.Attrs().MTU
	if br.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(br, mtu); err != nil {
			return 0, fmt.Errorf("MTU %d on %s: %w", mtu, c.BridgeEx, err)
		}
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return 0, fmt.Errorf("set %s up: %w", c.BridgeEx, err)
	}
	if st.hasIPv6() {
		// br-ex's device is new and takes net.ipv6.conf.default: IPv6 may be off on it.
		if err := ensureIPv6On(c.BridgeEx); err != nil {
			return 0, err
		}
	}
	// br-ex is fail_mode=secure: without a flow it forwards nothing, and the agent that writes
	// its flows is not running yet. Until it is, br-ex forwards with NORMAL: the agent's own
	// table-0 NORMAL flow has the same match and replaces this one.
	of := ofctl.NewOpenFlow(c.BridgeEx, ofctl.MgmtTarget(c.OVSRunDir, c.BridgeEx))
	if err := bootstrapNormal(ctx, of); err != nil {
		return 0, err
	}
	if dpType == "netdev" && link.Attrs().RawFlags&unix.IFF_NOARP == 0 {
		if err := netlink.LinkSetARPOff(link); err != nil {
			return 0, fmt.Errorf("arp off on %s: %w", nic, err)
		}
		st.ARPOffSet = true
		if err := c.writeState(st); err != nil {
			return 0, err
		}
		r.changed("ARP off on %s (userspace datapath: the kernel still sees its frames)", nic)
	}
	if dpType == "netdev" {
		old, err := readSysctl(rpFilterPath(nic))
		if err != nil {
			return 0, err
		}
		if old != "1" {
			if st.RPFilter == "" {
				st.RPFilter = old
				if err := c.writeState(st); err != nil {
					return 0, err
				}
			}
			if err := writeSysctl(rpFilterPath(nic), "1"); err != nil {
				return 0, err
			}
			r.changed("net.ipv4.conf.%s.rp_filter=1 (userspace datapath: the kernel would take the NIC's copy of each packet too)", nic)
		}
	}

	// The quick sequence: the NIC into br-ex, the addresses onto br-ex, the routes replaced
	// (same destination and metric: the kernel moves them), the addresses off the NIC.
	start := time.Now()
	if _, err := r.db.EnsureBridge(ctx, ofctl.BridgeSpec{Name: c.BridgeEx, DatapathType: c.DatapathType, HWAddr: st.NICMAC, Ports: []string{nic}}); err != nil {
		return 0, err
	}
	moveErr := moveAddrsRoutes(link, br, st)
	moved := time.Since(start)
	if moveErr == nil && dpType == "netdev" && st.hasIPv6() {
		moveErr = r.nicIPv6Off(st)
	}
	if moveErr == nil {
		if _, _, err := r.db.WaitInterface(ctx, nic, false, 30*time.Second); err != nil {
			moveErr = err
		}
	}
	if moveErr == nil {
		moveErr = verifyGateways(ctx, br, st, c.VerifyTimeout)
	}
	if moveErr != nil {
		c.Logf("the move failed (%v): rolling back", moveErr)
		if err := r.restoreNIC(ctx, st); err != nil {
			return 0, fmt.Errorf("%w; the roll-back failed too: %w (run srcip-agent node-teardown on the node's console)", moveErr, err)
		}
		return 0, fmt.Errorf("%w; rolled back: %s has its addresses and routes again", moveErr, nic)
	}
	r.changed("moved %s into %s with %d addresses and %d routes in %s; the gateway answers through %s",
		nic, c.BridgeEx, len(st.Addrs), len(st.Routes), moved.Round(time.Millisecond), c.BridgeEx)
	return mtu, nil
}

func bootstrapNormal(ctx context.Context, of *ofctl.OpenFlow) error {
	out, err := of.DumpFlows(ctx, "table=0")
	if err != nil {
		return err
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "actions=") {
			return nil // the agent's flows (or ours) are there
		}
	}
	return of.BundleText(ctx, []string{"flow add table=0,priority=0,actions=NORMAL"})
}

func moveAddrsRoutes(nic, br netlink.Link, st *State) error {
	for _, sa := range st.Addrs {
		a, err := sa.addr()
		if err != nil {
			return err
		}
		if err := netlink.AddrReplace(br, a); err != nil {
			return fmt.Errorf("address %s on %s: %w", sa.CIDR, br.Attrs().Name, err)
		}
	}
	for _, sr := range st.Routes {
		rt, err := sr.route(br.Attrs().Index)
		if err != nil {
			return err
		}
		if err := netlink.RouteReplace(rt); err != nil {
			return fmt.Errorf("route %s on %s: %w", sr.Dst, br.Attrs().Name, err)
		}
	}
	for _, sa := range st.Addrs {
		a, err := sa.addr()
		if err != nil {
			return err
		}
		if err := netlink.AddrDel(nic, a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("remove address %s from %s: %w", sa.CIDR, nic.Attrs().Name, err)
		}
	}
	return nil
}

// verifyGateways checks that every gateway of the saved routes answers ARP (IPv4) or neighbour
// solicitations (IPv6, a link-local gateway through link's zone) through link: one UDP datagram
// to its discard port makes the kernel resolve it, then its neighbour entry on link must become
// reachable.
func verifyGateways(ctx context.Context, link netlink.Link, st *State, timeout time.Duration) error {
	var gws []net.IP
	for _, sr := range st.Routes {
		if ip := net.ParseIP(sr.Gw); ip != nil && !slices.ContainsFunc(gws, ip.Equal) {
			gws = append(gws, ip)
		}
	}
	for _, gw := range gws {
		fam, network, host := unix.AF_INET, "udp4", gw.String()
		if gw.To4() == nil {
			fam, network = unix.AF_INET6, "udp6"
			if gw.IsLinkLocalUnicast() {
				host += "%" + link.Attrs().Name
			}
		}
		// A fresh resolution, not an entry left from before the move.
		_ = netlink.NeighDel(&netlink.Neigh{LinkIndex: link.Attrs().Index, IP: gw, Family: fam})
		deadline := time.Now().Add(timeout)
		for {
			if c, err := net.Dial(network, net.JoinHostPort(host, "9")); err == nil {
				_, _ = c.Write([]byte{0})
				c.Close()
			}
			if neighReachable(link, gw) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("gateway %s does not answer ARP (IPv4) or neighbour solicitations (IPv6) through %s within %s", gw, link.Attrs().Name, timeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

func neighReachable(link netlink.Link, ip net.IP) bool {
	fam := unix.AF_INET
	if ip.To4() == nil {
		fam = unix.AF_INET6
	}
	ns, err := netlink.NeighList(link.Attrs().Index, fam)
	if err != nil {
		return false
	}
	for _, n := range ns {
		if n.IP.Equal(ip) && n.HardwareAddr != nil &&
			n.State&(netlink.NUD_REACHABLE|netlink.NUD_PERMANENT) != 0 {
			return true
		}
	}
	return false
}

func waitLink(ctx context.Context, name string, timeout time.Duration) (netlink.Link, error) {
	deadline := time.Now().Add(timeout)
	for {
		l, err := netlink.LinkByName(name)
		if err == nil {
			return l, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no network device %s after %s: %w (ovs-vswitchd creates it; see its log)", name, timeout, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func linkMTU(name string) (int, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, fmt.Errorf("network device %s: %w", name, err)
	}
	return l.Attrs().MTU, nil
}

// restoreNIC deletes br-ex and puts the saved addresses and routes back on the NIC, then
// checks that the gateways answer there.
func (r *run) restoreNIC(ctx context.Context, st *State) error {
	c := r.cfg
	nic, err := netlink.LinkByName(st.NIC)
	if err != nil {
		return fmt.Errorf("NIC %s: %w", st.NIC, err)
	}
	deleted, err := r.db.DeleteBridge(ctx, st.BridgeEx)
	if err != nil {
		return err
	}
	if deleted {
		r.changed("deleted %s", st.BridgeEx)
	}
	if st.IPv6Disabled != "" {
		if err := writeSysctl(disableIPv6Path(st.NIC), st.IPv6Disabled); err != nil {
			return err
		}
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
	if err := netlink.LinkSetUp(nic); err != nil {
		return fmt.Errorf("set %s up: %w", st.NIC, err)
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
	if deleted {
		if _, err := waitLinkGone(ctx, st.BridgeEx, 10*time.Second); err != nil {
			return err
		}
	}
	if st.RPFilter != "" {
		if err := writeSysctl(rpFilterPath(st.NIC), st.RPFilter); err != nil {
			return err
		}
	}
	// ARP back on only once ovs-vswitchd has let the NIC go: when it closes the NIC it writes
	// back the interface flags it read when it opened it (NOARP included), in the same
	// reconfiguration that deletes br-ex's device, in no fixed order. So: set, verify through the
	// gateway, and set again if the flag came back meanwhile.
	for try := 0; ; try++ {
		if st.ARPOffSet {
			if err := ensureARPOn(st.NIC); err != nil {
				return err
			}
		}
		err := verifyGateways(ctx, nic, st, c.VerifyTimeout)
		if st.ARPOffSet && try < 3 {
			time.Sleep(200 * time.Millisecond)
			if l, lerr := netlink.LinkByName(st.NIC); lerr == nil && l.Attrs().RawFlags&unix.IFF_NOARP != 0 {
				continue
			}
		}
		if err != nil {
			return err
		}
		break
	}
	r.changed("%s has its %d addresses and %d routes back; the gateway answers", st.NIC, len(st.Addrs), len(st.Routes))
	return nil
}

func waitLinkGone(ctx context.Context, name string, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := netlink.LinkByName(name); err != nil {
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				return true, nil
			}
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("network device %s still there %s after its bridge was deleted", name, timeout)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (r *run) teardownBrEx(ctx context.Context) error {
	c := r.cfg
	st, err := c.readState()
	if err != nil {
		return err
	}
	if st == nil {
		r.unchanged("no state file %s: %s was not built by node-setup, left alone", c.statePath(), c.BridgeEx)
		return nil
	}
	if err := r.restoreNIC(ctx, st); err != nil {
		return err
	}
	if err := r.removeBootScript(); err != nil {
		return err
	}
	if err := os.Remove(c.statePath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	r.changed("removed %s", c.statePath())
	return nil
}

func rpFilterPath(nic string) string { return "/proc/sys/net/ipv4/conf/" + nic + "/rp_filter" }

func disableIPv6Path(nic string) string { return "/proc/sys/net/ipv6/conf/" + nic + "/disable_ipv6" }

// hasIPv6 reports whether st moved an IPv6 address.
func (st *State) hasIPv6() bool {
	return slices.ContainsFunc(st.Addrs, func(a SavedAddr) bool { return strings.Contains(a.CIDR, ":") })
}

// nicIPv6Off sets net.ipv6.conf.<nic>.disable_ipv6=1 on the userspace datapath once the NIC's
// IPv6 addresses are on br-ex (State.IPv6Disabled: the old value, saved first for teardown).
func (r *run) nicIPv6Off(st *State) error {
	old, err := readSysctl(disableIPv6Path(st.NIC))
	if err != nil {
		return err
	}
	if old == "1" {
		return nil
	}
	if st.IPv6Disabled == "" {
		st.IPv6Disabled = old
		if err := r.cfg.writeState(st); err != nil {
			return err
		}
	}
	if err := writeSysctl(disableIPv6Path(st.NIC), "1"); err != nil {
		return err
	}
	r.changed("net.ipv6.conf.%s.disable_ipv6=1 (userspace datapath: the kernel would take the NIC's copy of each IPv6 packet too)", st.NIC)
	return nil
}

func readSysctl(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func writeSysctl(path, v string) error {
	if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w (node-setup must run privileged: /proc/sys is read-only otherwise)", path, err)
	}
	return nil
}

func ensureARPOn(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("NIC %s: %w", name, err)
	}
	if l.Attrs().RawFlags&unix.IFF_NOARP == 0 {
		return nil
	}
	if err := netlink.LinkSetARPOn(l); err != nil {
		return fmt.Errorf("arp on %s: %w", name, err)
	}
	return nil
}
