package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const vswitchSchema = "/usr/share/openvswitch/vswitch.ovsschema"

// sysctls applied to every lab netns before any interface is created in it. IPv6 is off on every
// interface created later unless the lab turns it on (enable6) where an IPv6 address goes: the
// router's bridges, the clients', br-ex, srcip-gw0 and the pods' eth0; never on an OVS-attached
// veth end (the node's eth0, a pod's host end), whose frames the node kernel sees too and would
// answer Neighbor Solicitations for (the IPv6 twin of docs/lab-facts.md#pitfall-2). Where it is
// on, no duplicate address detection (addresses usable at once), no router advertisements taken
// and no router solicitations sent (docs/lab-facts.md#pitfall-7: they went into tunnels).
var baseSysctls = []string{
	"net.ipv6.conf.default.disable_ipv6=1",
	"net.ipv6.conf.all.accept_dad=0",
	"net.ipv6.conf.default.accept_dad=0",
	"net.ipv6.conf.all.accept_ra=0",
	"net.ipv6.conf.default.accept_ra=0",
	"net.ipv6.conf.all.autoconf=0",
	"net.ipv6.conf.default.autoconf=0",
	"net.ipv6.conf.all.router_solicitations=0",
	"net.ipv6.conf.default.router_solicitations=0",
	"net.ipv4.conf.all.rp_filter=0",
	"net.ipv4.conf.default.rp_filter=0",
}

// enable6 turns IPv6 on for ifaces of netns (off by default: baseSysctls), before their IPv6
// addresses are added.
func (l *Lab) enable6(netns string, ifaces ...string) error {
	args := []string{"sysctl", "-q", "-w"}
	for _, i := range ifaces {
		args = append(args, "net.ipv6.conf."+i+".disable_ipv6=0")
	}
	_, err := l.nsExec(netns, args...)
	return err
}

func parallel[T any](items []T, f func(T) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(items))
	for i, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(it)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (l *Lab) ipBatch(netns string, cmds ...string) error {
	_, err := l.run(runOpts{stdin: strings.Join(cmds, "\n") + "\n"}, "ip", "-n", netns, "-batch", "-")
	return err
}

func (l *Lab) nsExec(netns string, argv ...string) (string, error) {
	return l.run(runOpts{}, append([]string{"ip", "netns", "exec", netns}, argv...)...)
}

// txOff disables checksum offload on veth ends (docs/lab-facts.md#pitfall-1).
func (l *Lab) txOff(netns string, ifaces ...string) error {
	var sh []string
	for _, i := range ifaces {
		sh = append(sh, "ethtool -K "+i+" tx off >/dev/null")
	}
	_, err := l.nsExec(netns, "sh", "-ec", strings.Join(sh, "; "))
	return err
}

func (l *Lab) setup() error {
	// 1. All namespaces, with IPv6 off before interfaces appear.
	if err := parallel(l.allNetns, func(ns string) error {
		if _, err := l.run(runOpts{}, "ip", "netns", "add", ns); err != nil {
			return err
		}
		args := append([]string{"sysctl", "-q", "-w"}, baseSysctls...)
		if ns == l.RouterNetns {
			args = append(args, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
		}
		if _, err := l.nsExec(ns, args...); err != nil {
			return err
		}
		return l.ipBatch(ns, "link set lo up")
	}); err != nil {
		return fmt.Errorf("create netns: %w", err)
	}

	// 2. Router: br0 towards the nodes, brc towards the clients; both families. No multicast
	// snooping: Neighbor Solicitations to solicited-node groups are flooded like ARP, whatever
	// MLD reports a restarted br-ex tap did or did not send.
	if err := l.ipBatch(l.RouterNetns,
		"link add br0 type bridge stp_state 0 mcast_snooping 0",
		"link add brc type bridge stp_state 0 mcast_snooping 0",
	); err != nil {
		return fmt.Errorf("router bridges: %w", err)
	}
	if err := l.enable6(l.RouterNetns, "br0", "brc"); err != nil {
		return fmt.Errorf("router bridges: %w", err)
	}
	if err := l.ipBatch(l.RouterNetns,
		"addr add "+l.routerIP.String()+" dev br0",
		"addr add "+l.routerIP6.String()+" dev br0 nodad",
		"link set br0 up",
		"addr add "+l.clientGW.String()+" dev brc",
		"addr add "+l.clientGW6.String()+" dev brc nodad",
		"link set brc up",
	); err != nil {
		return fmt.Errorf("router bridges: %w", err)
	}

	// 3. Clients.
	for i, c := range l.Clients {
		rp := l.Prefix + "c" + strconv.Itoa(i+1)
		if _, err := l.run(runOpts{}, "ip", "link", "add", "name", rp, "netns", l.RouterNetns,
			"type", "veth", "peer", "name", "eth0", "netns", c.Netns); err != nil {
			return fmt.Errorf("client %s veth: %w", c.Name, err)
		}
		if err := l.ipBatch(l.RouterNetns, "link set "+rp+" master brc", "link set "+rp+" up"); err != nil {
			return fmt.Errorf("client %s: %w", c.Name, err)
		}
		cmds := []string{
			"addr add " + c.IP.String() + "/" + strconv.Itoa(l.clientGW.Bits()) + " dev eth0",
			"link set eth0 up",
			"route add default via " + l.clientGW.Addr().String(),
		}
		if c.IP6.IsValid() {
			if err := l.enable6(c.Netns, "eth0"); err != nil {
				return fmt.Errorf("client %s: %w", c.Name, err)
			}
			cmds = append(cmds,
				"addr add "+netip.PrefixFrom(c.IP6, l.clientGW6.Bits()).String()+" dev eth0 nodad",
				"route add default via "+l.clientGW6.Addr().String())
		}
		if err := l.ipBatch(c.Netns, cmds...); err != nil {
			return fmt.Errorf("client %s: %w", c.Name, err)
		}
		if err := l.txOff(c.Netns, "eth0"); err != nil {
			return fmt.Errorf("client %s: %w", c.Name, err)
		}
		if err := l.txOff(l.RouterNetns, rp); err != nil {
			return fmt.Errorf("client %s: %w", c.Name, err)
		}
	}

	// 4. Nodes, in parallel.
	if err := parallel(l.Nodes, l.setupNode); err != nil {
		return err
	}

	// 5. Router routes for LB / external IPs.
	var routeCmds []string
	pfxs := make([]string, 0, len(l.routes))
	for p := range l.routes {
		pfxs = append(pfxs, p)
	}
	sort.Strings(pfxs)
	for _, p := range pfxs {
		via := l.Node(l.routes[p]).IP
		if netip.MustParsePrefix(p).Addr().Is6() {
			via = l.Node(l.routes[p]).IP6
		}
		routeCmds = append(routeCmds, "route add "+p+" via "+via.String())
	}
	if len(routeCmds) > 0 {
		if err := l.ipBatch(l.RouterNetns, routeCmds...); err != nil {
			return fmt.Errorf("router routes: %w", err)
		}
	}

	// 6. Tunnel neighbours (docs/lab-facts.md#pitfall-5).
	if err := parallel(l.Nodes, func(n *Node) error { return l.SeedTunnelNeighbours(n.Name) }); err != nil {
		return err
	}

	// 7. Pods: parallel across nodes, serial per node.
	if err := parallel(l.Pods, l.setupPod); err != nil {
		return err
	}

	// 7b. Each node's gateway port, address, route and masquerade (the node set-up step's part).
	if !l.cfg.NoGateway {
		if err := parallel(l.Nodes, func(n *Node) error { return l.SetupGateway(n.Name) }); err != nil {
			return err
		}
	}

	// 8. Echo servers.
	if l.cfg.EchoBin != "" {
		if err := parallel(l.Pods, l.startEcho); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) ovsEnv() []string {
	return []string{"OVS_RUNDIR=" + n.Dir, "OVS_DBDIR=" + n.Dir, "OVS_LOGDIR=" + n.Dir}
}

// DBSock is the node's ovsdb-server socket, as given to the agent.
func (n *Node) DBSock() string { return filepath.Join(n.Dir, "db.sock") }

func (l *Lab) setupNode(n *Node) error {
	wrap := func(err error) error { return fmt.Errorf("node %s: %w", n.Name, err) }
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return wrap(err)
	}
	// Underlay veth: router br0 <-> eth0 in the node.
	if _, err := l.run(runOpts{}, "ip", "link", "add", "name", n.RouterPort, "netns", l.RouterNetns,
		"type", "veth", "peer", "name", "eth0", "netns", n.Netns); err != nil {
		return wrap(err)
	}
	if err := l.ipBatch(l.RouterNetns, "link set "+n.RouterPort+" master br0", "link set "+n.RouterPort+" up"); err != nil {
		return wrap(err)
	}
	if err := l.txOff(l.RouterNetns, n.RouterPort); err != nil {
		return wrap(err)
	}
	// eth0 belongs to OVS: no ARP from the node kernel on it (docs/lab-facts.md#pitfall-2).
	if err := l.ipBatch(n.Netns, "link set eth0 arp off", "link set eth0 up"); err != nil {
		return wrap(err)
	}
	if err := l.txOff(n.Netns, "eth0"); err != nil {
		return wrap(err)
	}
	if err := l.startOVS(n); err != nil {
		return wrap(err)
	}
	// The node installer's br-ex.
	if _, err := l.Vsctl(n.Name,
		"--may-exist", "add-br", "br-ex",
		"--", "set", "bridge", "br-ex", "datapath_type=netdev", "fail_mode=secure",
		"protocols=OpenFlow10,OpenFlow13,OpenFlow15", "other_config:hwaddr="+n.MAC,
		"--", "--may-exist", "add-port", "br-ex", "eth0"); err != nil {
		return wrap(err)
	}
	if err := l.brExAddrs(n); err != nil {
		return wrap(err)
	}
	return nil
}

// brExAddrs gives node's br-ex (a tap of the userspace datapath, recreated by each ovs-vswitchd
// start) its InternalIPs and default routes, both families; idempotent ("replace").
func (l *Lab) brExAddrs(n *Node) error {
	cmds := []string{
		"addr replace " + n.IP.String() + "/" + strconv.Itoa(l.routerIP.Bits()) + " dev br-ex",
		"link set br-ex up",
		"route replace default via " + l.routerIP.Addr().String(),
	}
	if n.IP6.IsValid() {
		if err := l.enable6(n.Netns, "br-ex"); err != nil {
			return err
		}
		cmds = append(cmds,
			"addr replace "+netip.PrefixFrom(n.IP6, l.routerIP6.Bits()).String()+" dev br-ex nodad",
			"route replace default via "+l.routerIP6.Addr().String())
	}
	if err := l.ipBatch(n.Netns, cmds...); err != nil {
		return err
	}
	// br-ex is a tap of the userspace datapath; harmless if unsupported.
	_ = l.txOff(n.Netns, "br-ex")
	return nil
}

func (l *Lab) startOVS(n *Node) error {
	db := filepath.Join(n.Dir, "conf.db")
	if _, err := l.run(runOpts{}, "ovsdb-tool", "create", db, vswitchSchema); err != nil {
		return err
	}
	env := n.ovsEnv()
	if _, err := l.run(runOpts{env: env}, "ip", "netns", "exec", n.Netns,
		"ovsdb-server", db, "--remote=punix:"+n.DBSock(), "--pidfile", "--detach", "--no-chdir",
		"--log-file", "-vconsole:off"); err != nil {
		return err
	}
	pid, err := readPidfile(filepath.Join(n.Dir, "ovsdb-server.pid"))
	if err != nil {
		return err
	}
	n.OvsdbPid = pid
	if _, err := l.Vsctl(n.Name, "--no-wait", "init"); err != nil {
		return err
	}
	if _, err := l.run(runOpts{env: env}, "ip", "netns", "exec", n.Netns,
		"ovs-vswitchd", "unix:"+n.DBSock(), "--pidfile", "--detach", "--no-chdir",
		"--log-file", "-vconsole:off"); err != nil {
		return err
	}
	pid, err = readPidfile(filepath.Join(n.Dir, "ovs-vswitchd.pid"))
	if err != nil {
		return err
	}
	n.VswitchdPid = pid
	return nil
}

func readPidfile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("pidfile: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pidfile %s: bad content %q", path, b)
	}
	return pid, nil
}

// SeedTunnelNeighbours pre-seeds node's OVS tunnel neighbour table with every
// other node's br-ex MAC (docs/lab-facts.md#pitfall-5), so the first tunnelled packet to each
// peer is not lost.
func (l *Lab) SeedTunnelNeighbours(node string) error {
	n := l.Node(node)
	if n == nil {
		return fmt.Errorf("lab: no node %q", node)
	}
	for _, peer := range l.Nodes {
		if peer == n {
			continue
		}
		if _, err := l.Appctl(n.Name, "tnl/neigh/set", "br-ex", peer.IP.String(), peer.MAC); err != nil {
			return fmt.Errorf("node %s: seed tunnel neighbour %s: %w", n.Name, peer.Name, err)
		}
	}
	return nil
}

func (l *Lab) setupPod(p *Pod) error {
	wrap := func(err error) error { return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err) }
	n := l.Node(p.NodeName)
	if _, err := l.run(runOpts{}, "ip", "link", "add", "name", p.HostPort, "netns", n.Netns,
		"type", "veth", "peer", "name", "eth0", "netns", p.Netns); err != nil {
		return wrap(err)
	}
	gw := n.Gateway.String()
	cmds := []string{
		"link set eth0 address " + p.MAC + " mtu 1400", // docs/lab-facts.md#pitfall-3: Geneve overhead
		"addr add " + p.Prefix.String() + " dev eth0",
		"link set eth0 up",
		"route add default via " + gw + " dev eth0",
	}
	if p.IP6.IsValid() {
		if err := l.enable6(p.Netns, "eth0"); err != nil {
			return wrap(err)
		}
		cmds = append(cmds,
			"addr add "+p.Prefix6.String()+" dev eth0 nodad",
			"route add default via "+n.Gateway6.String()+" dev eth0")
	}
	if err := l.ipBatch(p.Netns, cmds...); err != nil {
		return wrap(err)
	}
	if err := l.txOff(p.Netns, "eth0"); err != nil {
		return wrap(err)
	}
	// The userspace datapath reads the veth's host end with a packet socket, so the node's kernel
	// sees the pod's frames too: it must neither answer the pod's ARP for the gateway address (the
	// node holds it on srcip-gw0; the pod would then send to this veth's MAC, past OVS) nor
	// forward what arrives here (docs/lab-facts.md#pitfall-12).
	if err := l.ipBatch(n.Netns, "link set "+p.HostPort+" mtu 1400 arp off", "link set "+p.HostPort+" up"); err != nil {
		return wrap(err)
	}
	if _, err := l.nsExec(n.Netns, "sysctl", "-q", "-w", "net.ipv4.conf."+p.HostPort+".forwarding=0"); err != nil {
		return wrap(err)
	}
	if err := l.txOff(n.Netns, p.HostPort); err != nil {
		return wrap(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	addrs := p.Prefix.String()
	if p.IP6.IsValid() {
		addrs += "," + p.Prefix6.String()
	}
	ids := []string{"external_ids:iface-id=" + p.IfaceID, "external_ids:attached-mac=" + p.MAC,
		"external_ids:ip_addresses=" + addrs}
	if p.UID != "" {
		ids = append(ids, "external_ids:iface-id-ver="+p.UID)
	}
	if _, err := l.Vsctl(n.Name, append([]string{
		"--may-exist", "add-br", "br-int",
		"--", "set", "bridge", "br-int", "datapath_type=netdev", "fail_mode=secure",
		"protocols=OpenFlow10,OpenFlow13,OpenFlow15",
		"--", "--may-exist", "add-port", "br-int", p.HostPort,
		"--", "set", "interface", p.HostPort}, ids...)...); err != nil {
		return wrap(err)
	}
	return nil
}

// KillVswitchd SIGKILLs node's ovs-vswitchd (by its pid), as a crash would: the datapath stops
// forwarding at once. RestartVswitchd brings it back.
func (l *Lab) KillVswitchd(node string) error { return l.SignalVswitchd(node, syscall.SIGKILL) }

// SignalVswitchd sends sig to node's ovs-vswitchd (by its pid) and waits until it has exited:
// SIGKILL as a crash, SIGTERM as `systemctl stop` (it removes its pidfile; the userspace
// datapath, its tap devices with it, is gone either way). RestartVswitchd brings it back.
func (l *Lab) SignalVswitchd(node string, sig syscall.Signal) error {
	n := l.Node(node)
	if n == nil {
		return fmt.Errorf("lab: no node %q", node)
	}
	if n.VswitchdPid <= 0 || !PidAlive(n.VswitchdPid) {
		return fmt.Errorf("node %s: ovs-vswitchd is not running", node)
	}
	if err := syscall.Kill(n.VswitchdPid, sig); err != nil {
		return fmt.Errorf("node %s: signal %v to ovs-vswitchd %d: %w", node, sig, n.VswitchdPid, err)
	}
	return WaitFor(func() error {
		if PidAlive(n.VswitchdPid) {
			return fmt.Errorf("pid %d still alive", n.VswitchdPid)
		}
		return nil
	}, 5*time.Second)
}

// RestartVswitchd stops node's ovs-vswitchd (ovs-appctl exit, as a crash or an upgrade would
// leave things: OVSDB keeps the bridges and ports, the switch comes back with empty flow tables)
// and starts it again, then redoes what the node installer owns: br-ex's address, link and
// default route (the userspace datapath recreates its tap devices) and the tunnel neighbours.
// Everything in br-ex and br-int's flow tables must then come back from the agent.
func (l *Lab) RestartVswitchd(node string) error {
	n := l.Node(node)
	if n == nil {
		return fmt.Errorf("lab: no node %q", node)
	}
	wrap := func(err error) error { return fmt.Errorf("node %s: restart ovs-vswitchd: %w", n.Name, err) }
	old := n.VswitchdPid
	if PidAlive(old) { // not after KillVswitchd
		if _, err := l.Appctl(n.Name, "-t", "ovs-vswitchd", "exit"); err != nil {
			return wrap(err)
		}
	}
	if err := WaitFor(func() error {
		if PidAlive(old) {
			return fmt.Errorf("pid %d still alive", old)
		}
		return nil
	}, 10*time.Second); err != nil {
		return wrap(err)
	}
	if _, err := l.run(runOpts{env: n.ovsEnv()}, "ip", "netns", "exec", n.Netns,
		"ovs-vswitchd", "unix:"+n.DBSock(), "--pidfile", "--detach", "--no-chdir",
		"--log-file", "-vconsole:off"); err != nil {
		return wrap(err)
	}
	pid, err := readPidfile(filepath.Join(n.Dir, "ovs-vswitchd.pid"))
	if err != nil {
		return wrap(err)
	}
	n.VswitchdPid = pid
	// Re-add what may be gone with the old tap device; "replace" keeps this idempotent.
	if err := l.brExAddrs(n); err != nil {
		return wrap(err)
	}
	if !l.cfg.NoGateway {
		// srcip-gw0 is a tap of the userspace datapath too: its address and route went with it.
		if err := l.SetupGateway(n.Name); err != nil {
			return wrap(err)
		}
	}
	return l.SeedTunnelNeighbours(n.Name)
}
