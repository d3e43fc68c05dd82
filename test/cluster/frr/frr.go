// Package frr runs FRR (Debian's frr package: zebra and bgpd, read with vtysh) in a lab's router
// netns, as the upstream BGP router of MetalLB's BGP mode (issue 24, test/cluster/metallb).
//
// Nothing of the package's own set-up is used: no systemd unit, no /etc/frr, no watchfrr. Each
// daemon runs in the foreground under `ip netns exec <router netns>` (so its pid is the one the
// harness started, and it is stopped by that pid), with the lab's prefix as FRR pathspace (-N):
// its vty sockets, zserv socket and pid files are under /var/run/frr/<prefix>/, where
// `vtysh -N <prefix>` finds them, apart from any other lab's and from a system FRR. The rendered
// configuration, the daemons' logs and stdout go under <lab dir>/frr. CleanupStale removes the
// pathspaces of labs whose owner is gone (and ends their daemons by pid).
//
// It is its own package, not part of test/cluster, so that the rendering test is pure: a test in
// package cluster would start a whole cluster (its TestMain).
package frr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// The daemons (lab.RouterPrograms) and where FRR keeps a pathspace's sockets and pid files.
const (
	ZebraBin = "/usr/lib/frr/zebra"
	BGPDBin  = "/usr/lib/frr/bgpd"
	RunDir   = "/var/run/frr"
)

// Neighbor is one BGP neighbour of the router.
type Neighbor struct {
	// Addr is the neighbour's address (a node's InternalIP); its family picks the address family
	// the session is activated in (MetalLB's native BGP runs one family per session).
	Addr netip.Addr
	// ASN is the neighbour's AS (MetalLB's BGPPeer myASN).
	ASN uint32
	// Password turns on TCP-MD5 for the session; empty: none.
	Password string
	// Active makes the router dial the neighbour too; default passive (MetalLB's native speakers
	// dial out and listen on nothing).
	Active bool
}

// Config is the router's BGP configuration.
type Config struct {
	// ASN is the router's AS (MetalLB's BGPPeer peerASN).
	ASN uint32
	// RouterID is bgpd's router-id (the router's underlay address).
	RouterID netip.Addr
	// Neighbors are the sessions, one per node address.
	Neighbors []Neighbor
	// Keepalive and Hold are the router's BGP timers; default 1 s and 3 s (MetalLB native mode's
	// smallest hold time is 3 s; the session uses the smaller of the two sides' hold times).
	Keepalive, Hold time.Duration
	// MaximumPaths is the ECMP width for eBGP paths; default 8.
	MaximumPaths int
	// Networks are prefixes the router announces itself, whether or not its table has them (no
	// import check): a peer standing in for a node in the smoke test, or a hostile announcement.
	Networks []netip.Prefix
}

// BGPDConf renders bgpd's configuration file: one eBGP instance, no policy needed for eBGP
// (MetalLB's announcements are accepted as they come), no IPv4 unicast by default (each neighbour
// is activated in its own family only), ECMP over up to MaximumPaths next hops.
func (c Config) BGPDConf() (string, error) {
	if c.ASN == 0 {
		return "", errors.New("frr: Config.ASN is required")
	}
	if !c.RouterID.Is4() {
		return "", fmt.Errorf("frr: Config.RouterID %v: want an IPv4 address", c.RouterID)
	}
	ka, hold := c.Keepalive, c.Hold
	if ka == 0 {
		ka = time.Second
	}
	if hold == 0 {
		hold = 3 * time.Second
	}
	if ka%time.Second != 0 || hold%time.Second != 0 || hold < 3*time.Second || ka > hold/3 {
		return "", fmt.Errorf("frr: timers keepalive %v hold %v: want whole seconds, hold at least 3 s and at least 3 keepalives", ka, hold)
	}
	paths := c.MaximumPaths
	if paths == 0 {
		paths = 8
	}
	var b strings.Builder
	fmt.Fprintf(&b, "frr defaults traditional\n!\nrouter bgp %d\n", c.ASN)
	fmt.Fprintf(&b, " bgp router-id %s\n no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n", c.RouterID)
	fmt.Fprintf(&b, " timers bgp %d %d\n", int(ka/time.Second), int(hold/time.Second))
	if len(c.Networks) > 0 {
		b.WriteString(" no bgp network import-check\n")
	}
	var v4, v6 []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, n := range c.Neighbors {
		if !n.Addr.IsValid() || n.ASN == 0 {
			return "", fmt.Errorf("frr: neighbor %+v: address and ASN are required", n)
		}
		if seen[n.Addr] {
			return "", fmt.Errorf("frr: neighbor %s listed twice", n.Addr)
		}
		if strings.ContainsAny(n.Password, " \t\n!#") {
			return "", fmt.Errorf("frr: neighbor %s: the password must be one word without '!' or '#'", n.Addr)
		}
		seen[n.Addr] = true
		fmt.Fprintf(&b, " neighbor %s remote-as %d\n", n.Addr, n.ASN)
		if !n.Active {
			fmt.Fprintf(&b, " neighbor %s passive\n", n.Addr)
		}
		if n.Password != "" {
			fmt.Fprintf(&b, " neighbor %s password %s\n", n.Addr, n.Password)
		}
		if n.Addr.Is4() {
			v4 = append(v4, n.Addr)
		} else {
			v6 = append(v6, n.Addr)
		}
	}
	var nets4, nets6 []netip.Prefix
	for _, p := range c.Networks {
		if !p.IsValid() {
			return "", fmt.Errorf("frr: network %v: not a prefix", p)
		}
		if p.Addr().Is4() {
			nets4 = append(nets4, p.Masked())
		} else {
			nets6 = append(nets6, p.Masked())
		}
	}
	for _, af := range []struct {
		name  string
		addrs []netip.Addr
		nets  []netip.Prefix
	}{{"ipv4 unicast", v4, nets4}, {"ipv6 unicast", v6, nets6}} {
		if len(af.addrs) == 0 {
			continue
		}
		fmt.Fprintf(&b, " !\n address-family %s\n", af.name)
		for _, p := range af.nets {
			fmt.Fprintf(&b, "  network %s\n", p)
		}
		for _, a := range af.addrs {
			fmt.Fprintf(&b, "  neighbor %s activate\n", a)
		}
		fmt.Fprintf(&b, "  maximum-paths %d\n exit-address-family\n", paths)
	}
	b.WriteString("exit\n!\n")
	return b.String(), nil
}

// zebraConf is zebra's configuration: nothing but a hostname (zebra installs what bgpd selects
// into the router netns' kernel table, and tells bgpd the connected routes).
func zebraConf(hostname string) string { return "hostname " + hostname + "\n!\n" }

// Router is FRR running in a lab's router netns. Start it with Start, end it with Close.
type Router struct {
	// Netns is the router netns; Pathspace the FRR pathspace (-N); Dir holds the configuration
	// files, the daemons' logs and their stdout.
	Netns, Pathspace, Dir string
	// Config is what bgpd was started with.
	Config Config

	logf  func(string, ...any)
	procs []*proc // zebra, bgpd
}

type proc struct {
	name string
	pid  int
	done chan struct{}
	err  error
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Options say where the router runs.
type Options struct {
	// Netns is the router netns (lab.Lab.RouterNetns).
	Netns string
	// Pathspace is the FRR pathspace (lab.Lab.Prefix): ^[a-z][a-z0-9]{1,6}$.
	Pathspace string
	// Dir is created and receives the configuration and logs (<lab dir>/frr).
	Dir string
	// Logf receives what the router runs (nil: silent).
	Logf func(string, ...any)
}

var pathspaceRE = regexp.MustCompile(`^[a-z][a-z0-9]{1,6}$`)

// StartInLab starts the router in l's router netns, with l's prefix as pathspace and <l.Dir>/frr
// as directory.
func StartInLab(l *lab.Lab, c Config, logf func(string, ...any)) (*Router, error) {
	return Start(Options{Netns: l.RouterNetns, Pathspace: l.Prefix, Dir: filepath.Join(l.Dir, "frr"), Logf: logf}, c)
}

// Start renders the configuration and starts zebra, then bgpd, and returns once vtysh reaches
// both. On error whatever started is stopped.
func Start(o Options, c Config) (r *Router, err error) {
	if err := lab.CheckPrograms(lab.RouterPrograms); err != nil {
		return nil, fmt.Errorf("frr: %w", err)
	}
	if !pathspaceRE.MatchString(o.Pathspace) || o.Netns == "" || o.Dir == "" {
		return nil, fmt.Errorf("frr: options %+v: want a netns, a directory and a pathspace matching %s", o, pathspaceRE)
	}
	bgpd, err := c.BGPDConf()
	if err != nil {
		return nil, err
	}
	r = &Router{Netns: o.Netns, Pathspace: o.Pathspace, Dir: o.Dir, Config: c, logf: o.Logf}
	run := filepath.Join(RunDir, o.Pathspace)
	if _, err := os.Stat(run); err == nil {
		return nil, fmt.Errorf("frr: %s exists: pathspace %s in use (CleanupStale removes a dead lab's)", run, o.Pathspace)
	}
	if err := os.MkdirAll(run, 0o755); err != nil {
		return nil, fmt.Errorf("frr: %w", err)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		os.RemoveAll(run)
		return nil, fmt.Errorf("frr: %w", err)
	}
	defer func() {
		if err != nil {
			if cerr := r.Close(); cerr != nil {
				r.log("frr: cleanup after a failed start: %v", cerr)
			}
			r = nil
		}
	}()
	// The daemons run as the package's user frr (group frr): FRR refuses a user that is not in
	// its vty group (frrvty; "privs_init: user(root) is not part of vty group"), which frr is. They
	// keep the capabilities they need (NET_ADMIN, NET_RAW, ...) and write their sockets, pid
	// files and logs into directories frr owns.
	uid, gid, err := frrIDs()
	if err != nil {
		return r, err
	}
	files := map[string]string{"zebra.conf": zebraConf(o.Netns), "bgpd.conf": bgpd}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(o.Dir, name), []byte(body), 0o640); err != nil {
			return r, fmt.Errorf("frr: %w", err)
		}
	}
	for _, p := range []string{run, o.Dir, filepath.Join(o.Dir, "zebra.conf"), filepath.Join(o.Dir, "bgpd.conf")} {
		if err := os.Chown(p, uid, gid); err != nil {
			return r, fmt.Errorf("frr: %w", err)
		}
	}
	for _, d := range []struct{ name, bin string }{{"zebra", ZebraBin}, {"bgpd", BGPDBin}} {
		argv := []string{"ip", "netns", "exec", o.Netns, d.bin, "-N", o.Pathspace, "-u", "frr", "-g", "frr", "-P", "0",
			"-f", filepath.Join(o.Dir, d.name+".conf"), "-i", filepath.Join(run, d.name+".pid"),
			"--log", "file:" + filepath.Join(o.Dir, d.name+".log"), "--log-level", "info"}
		p, err := r.start(d.name, argv)
		if err != nil {
			return r, err
		}
		r.procs = append(r.procs, p)
		if err := lab.WaitFor(func() error {
			if !p.running() {
				b, _ := os.ReadFile(filepath.Join(o.Dir, d.name+".out"))
				return fmt.Errorf("%s exited: %v: %s", d.name, p.err, strings.TrimSpace(string(b)))
			}
			_, err := r.vtysh(d.name, "show version")
			return err
		}, 20*time.Second); err != nil {
			return r, fmt.Errorf("frr: %s in %s: %w", d.name, o.Netns, err)
		}
	}
	return r, nil
}

// frrIDs are the uid and gid of the user and group frr, which Debian's frr package creates.
func frrIDs() (uid, gid int, err error) {
	u, err := user.Lookup("frr")
	if err != nil {
		return 0, 0, fmt.Errorf("frr: the user frr (Debian's frr package creates it): %w", err)
	}
	g, err := user.LookupGroup("frr")
	if err != nil {
		return 0, 0, fmt.Errorf("frr: the group frr: %w", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(g.Gid)
	return uid, gid, nil
}

func (r *Router) log(format string, args ...any) {
	if r.logf != nil {
		r.logf(format, args...)
	}
}

func (r *Router) start(name string, argv []string) (*proc, error) {
	out := filepath.Join(r.Dir, name+".out")
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== %s start %s: %s\n", name, time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group; killed if the test binary dies without Close (CleanupStale then removes
	// the pathspace).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("frr: start %s: %w", name, err)
	}
	p := &proc{name: name, pid: cmd.Process.Pid, done: make(chan struct{})}
	r.log("frr: started %s pid %d: %s", name, p.pid, strings.Join(argv, " "))
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pids are the daemons' pids by name (zebra, bgpd), while they run.
func (r *Router) Pids() map[string]int {
	m := map[string]int{}
	for _, p := range r.procs {
		if p.running() {
			m[p.name] = p.pid
		}
	}
	return m
}

// Close stops bgpd, then zebra (SIGTERM by pid, SIGKILL after 5 s) and removes the pathspace's
// run directory. Idempotent.
func (r *Router) Close() error {
	var errs []error
	for i := len(r.procs) - 1; i >= 0; i-- {
		p := r.procs[i]
		if !p.running() {
			continue
		}
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			r.log("frr: %s pid %d ignored SIGTERM for 5s: SIGKILL", p.name, p.pid)
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				errs = append(errs, fmt.Errorf("frr: %s pid %d did not exit after SIGKILL", p.name, p.pid))
			}
		}
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(filepath.Join(RunDir, r.Pathspace)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *Router) vtysh(daemon string, cmds ...string) (string, error) {
	argv := []string{"netns", "exec", r.Netns, "vtysh", "-N", r.Pathspace}
	if daemon != "" {
		argv = append(argv, "-d", daemon)
	}
	for _, c := range cmds {
		argv = append(argv, "-c", c)
	}
	cmd := exec.Command("ip", argv...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("ip %s: %w: %s%s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()), strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Vtysh runs the commands in one vtysh session (every daemon) and returns its output.
func (r *Router) Vtysh(cmds ...string) (string, error) { return r.vtysh("", cmds...) }

// Configure applies configuration lines (e.g. "router bgp 64500", " neighbor X shutdown") in
// configure mode.
func (r *Router) Configure(lines ...string) error {
	_, err := r.vtysh("", append(append([]string{"configure terminal"}, lines...), "end")...)
	return err
}

// JSON runs one show command (ending in "json") and decodes its output into v.
func (r *Router) JSON(cmd string, v any) error {
	out, err := r.vtysh("", cmd)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("frr: %s: %w: %q", cmd, err, out)
	}
	return nil
}

// Peer is one neighbour in `show bgp summary json`.
type Peer struct {
	RemoteAS      uint32 `json:"remoteAs"`
	State         string `json:"state"` // Idle, Connect, Active, OpenSent, OpenConfirm, Established
	PfxRcd        int    `json:"pfxRcd"`
	PeerUptimeMs  int64  `json:"peerUptimeMsec"`
	ConnectionsUp int    `json:"connectionsEstablished"`
}

// Summary returns the neighbours of both address families by address (bgpd's `show bgp summary
// json`; a family without an activated neighbour is absent).
func (r *Router) Summary() (map[netip.Addr]Peer, error) {
	var s map[string]struct {
		Peers map[string]Peer `json:"peers"`
	}
	if err := r.JSON("show bgp summary json", &s); err != nil {
		return nil, err
	}
	m := map[netip.Addr]Peer{}
	for _, af := range s {
		for a, p := range af.Peers {
			addr, err := netip.ParseAddr(a)
			if err != nil {
				return nil, fmt.Errorf("frr: show bgp summary json: peer %q: %w", a, err)
			}
			m[addr] = p
		}
	}
	return m, nil
}

// Route is zebra's selected route for a prefix.
type Route struct {
	Protocol  string // bgp, connected, kernel, static
	Selected  bool
	Installed bool // in the kernel's table
	// NextHops are the active next hops, sorted.
	NextHops []netip.Addr
}

// Route returns zebra's selected route for exactly p (`show ip route <p> json`, `show ipv6 route`
// for IPv6), and false when zebra has none.
func (r *Router) Route(p netip.Prefix) (Route, bool, error) {
	fam := "ip"
	if p.Addr().Is6() {
		fam = "ipv6"
	}
	var m map[string][]struct {
		Protocol  string `json:"protocol"`
		Selected  bool   `json:"selected"`
		Installed bool   `json:"installed"`
		NextHops  []struct {
			IP     string `json:"ip"`
			Active bool   `json:"active"`
		} `json:"nexthops"`
	}
	if err := r.JSON("show "+fam+" route "+p.Masked().String()+" json", &m); err != nil {
		return Route{}, false, err
	}
	for _, e := range m[p.Masked().String()] {
		if !e.Selected {
			continue
		}
		rt := Route{Protocol: e.Protocol, Selected: true, Installed: e.Installed}
		for _, nh := range e.NextHops {
			if a, err := netip.ParseAddr(nh.IP); err == nil && nh.Active {
				rt.NextHops = append(rt.NextHops, a)
			}
		}
		sort.Slice(rt.NextHops, func(i, j int) bool { return rt.NextHops[i].Less(rt.NextHops[j]) })
		return rt, true, nil
	}
	return Route{}, false, nil
}

// KernelNextHops returns the next hops of the router netns' kernel route for exactly p (`ip -j
// route show <p>`: one gateway, or the multipath list), sorted; none when there is no route.
func (r *Router) KernelNextHops(p netip.Prefix) (nhs []netip.Addr, proto string, err error) {
	fam := "-4"
	if p.Addr().Is6() {
		fam = "-6"
	}
	argv := []string{"-n", r.Netns, "-j", fam, "route", "show", "exact", p.Masked().String()}
	out, err := exec.Command("ip", argv...).Output()
	if err != nil {
		return nil, "", fmt.Errorf("ip %s: %w", strings.Join(argv, " "), err)
	}
	var routes []struct {
		Gateway   string `json:"gateway"`
		Protocol  string `json:"protocol"`
		NHID      int    `json:"nhid"`
		Multipath []struct {
			Gateway string `json:"gateway"`
		} `json:"multipath"`
	}
	if err := json.Unmarshal(out, &routes); err != nil {
		return nil, "", fmt.Errorf("ip %s: %w: %q", strings.Join(argv, " "), err, out)
	}
	for _, rt := range routes {
		proto = rt.Protocol
		gws := []string{rt.Gateway}
		if len(rt.Multipath) > 0 {
			gws = gws[:0]
			for _, m := range rt.Multipath {
				gws = append(gws, m.Gateway)
			}
		}
		if rt.Gateway == "" && len(rt.Multipath) == 0 && rt.NHID != 0 {
			// zebra installs its routes through nexthop objects: the gateways are in the
			// object (a group names its members).
			if gws, err = r.nexthopGateways(rt.NHID, 0); err != nil {
				return nil, proto, err
			}
		}
		for _, g := range gws {
			if a, err := netip.ParseAddr(g); err == nil {
				nhs = append(nhs, a)
			}
		}
	}
	sort.Slice(nhs, func(i, j int) bool { return nhs[i].Less(nhs[j]) })
	return nhs, proto, nil
}

// nexthopGateways returns the gateways of the router netns' nexthop object id (`ip -j nexthop
// show id`), following a group's members.
func (r *Router) nexthopGateways(id, depth int) ([]string, error) {
	if depth > 2 {
		return nil, fmt.Errorf("frr: nexthop %d: groups nested too deep", id)
	}
	argv := []string{"-n", r.Netns, "-j", "nexthop", "show", "id", strconv.Itoa(id)}
	out, err := exec.Command("ip", argv...).Output()
	if err != nil {
		return nil, fmt.Errorf("ip %s: %w", strings.Join(argv, " "), err)
	}
	var nhs []struct {
		Gateway string `json:"gateway"`
		Group   []struct {
			ID int `json:"id"`
		} `json:"group"`
	}
	if err := json.Unmarshal(out, &nhs); err != nil {
		return nil, fmt.Errorf("ip %s: %w: %q", strings.Join(argv, " "), err, out)
	}
	var gws []string
	for _, nh := range nhs {
		if nh.Gateway != "" {
			gws = append(gws, nh.Gateway)
		}
		for _, m := range nh.Group {
			g, err := r.nexthopGateways(m.ID, depth+1)
			if err != nil {
				return nil, err
			}
			gws = append(gws, g...)
		}
	}
	return gws, nil
}

// generatedPathspace matches the pathspaces CleanupStale touches: a prefix lab.New generates
// ("sl" + 4 hex digits), alone (the router's) or with one more character (a second router of the
// same lab, e.g. the smoke test's peers), the lab prefix being group 1.
var generatedPathspace = regexp.MustCompile(`^(sl[0-9a-f]{4})[0-9a-z]?$`)

// CleanupStale removes the FRR pathspaces (RunDir/slXXXX, RunDir/slXXXXy) of labs whose owner is gone
// (lab.LiveLabs of baseDir, default /tmp): it ends the daemons whose pid files are there and whose
// command line names the pathspace (by pid: SIGTERM, SIGKILL after 3 s), then the directory. It
// returns the pathspaces it removed.
func CleanupStale(baseDir string, logf func(string, ...any)) ([]string, error) {
	live, err := lab.LiveLabs(baseDir)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(RunDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		ps := e.Name()
		m := generatedPathspace.FindStringSubmatch(ps)
		if !e.IsDir() || m == nil {
			continue
		}
		if _, ok := live[m[1]]; ok {
			continue
		}
		dir := filepath.Join(RunDir, ps)
		pids, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
		for _, f := range pids {
			b, _ := os.ReadFile(f)
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || pid <= 1 || !strings.Contains(cmdline(pid), "-N "+ps+" ") {
				continue
			}
			if logf != nil {
				logf("frr cleanup: stale %s pid %d (%s): SIGTERM", filepath.Base(f), pid, cmdline(pid))
			}
			_ = syscall.Kill(pid, syscall.SIGTERM)
			deadline := time.Now().Add(3 * time.Second)
			for lab.PidAlive(pid) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if lab.PidAlive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if logf != nil {
			logf("frr cleanup: stale pathspace %s", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, ps)
	}
	return removed, errors.Join(errs...)
}

func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
}
