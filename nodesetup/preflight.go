package nodesetup

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AgentPort is a TCP address the agent binds on the node (host network), named by the agent flag
// that sets it. node-setup checks each before it changes anything (checkAgentPorts).
type AgentPort struct {
	// Flag is the agent's flag, e.g. "--metrics-bind-address".
	Flag string
	// Addr is the flag's value, host:port (":9464" for every address); "" or "0": the agent binds
	// nothing for it.
	Addr string
}

// checkAgentPorts binds, then closes, each of ports (in node-setup's network namespace, the
// node's): a port another process listens on fails with an error naming the port, the flag and,
// when /proc shows it, the process. The agent would otherwise fail at its start, after the node
// was set up (its HTTP listener is fatal). Only EADDRINUSE is a refusal: an address that is not
// (yet) on the node (EADDRNOTAVAIL, e.g. the node IP before a reboot's boot script ran) is logged.
// A listener that is srcip-agent itself (node-setup run by hand next to a running agent) is
// accepted.
func checkAgentPorts(ports []AgentPort, logf func(string, ...any)) error {
	for _, p := range ports {
		if p.Addr == "" || p.Addr == "0" {
			continue
		}
		_, portStr, err := net.SplitHostPort(p.Addr)
		if err != nil {
			return fmt.Errorf("%s %q: %w (want HOST:PORT or :PORT)", p.Flag, p.Addr, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil || port < 0 || port > 65535 {
			return fmt.Errorf("%s %q: port %q is not a number of 0-65535", p.Flag, p.Addr, portStr)
		}
		ln, err := net.Listen("tcp", p.Addr)
		if err == nil {
			ln.Close()
			continue
		}
		if !errors.Is(err, unix.EADDRINUSE) {
			logf("note: could not check the agent's %s %s: %v", p.Flag, p.Addr, err)
			continue
		}
		owners := tcpListeners(port)
		if len(owners) > 0 && !slices.ContainsFunc(owners, func(o procInfo) bool { return o.comm != "srcip-agent" }) {
			logf("unchanged: port %d (%s %s) is srcip-agent's own (pid %d)", port, p.Flag, p.Addr, owners[0].pid)
			continue
		}
		who := "a process node-setup cannot see (no host PID namespace): `ss -ltnp 'sport = :" + portStr + "'` on the node names it"
		if len(owners) > 0 {
			var s []string
			for _, o := range owners {
				s = append(s, o.String())
			}
			who = strings.Join(s, ", ")
		}
		return fmt.Errorf("TCP port %d (%s %s of srcip-agent) is in use by %s: stop that process or move it, or give srcip-agent and node-setup another %s (deploy/daemonset.yaml: the same value in the node-setup init container's and the agent container's args, and the agent's containerPort); nothing was changed",
			port, p.Flag, p.Addr, who, p.Flag)
	}
	return nil
}

type procInfo struct {
	pid           int
	comm, cmdline string
}

func (p procInfo) String() string {
	s := fmt.Sprintf("%s (pid %d", p.comm, p.pid)
	if p.cmdline != "" {
		s += ": " + p.cmdline
	}
	return s + ")"
}

// tcpListeners returns the processes holding a TCP socket in state LISTEN on port, in this
// network namespace.
func tcpListeners(port int) []procInfo {
	return socketOwners([]string{"/proc/net/tcp", "/proc/net/tcp6"}, port, "0A") // TCP_LISTEN
}

// udpSockets returns the processes holding a UDP socket bound to port, in this network
// namespace.
func udpSockets(port int) []procInfo {
	return socketOwners([]string{"/proc/net/udp", "/proc/net/udp6"}, port, "")
}

// socketOwners reads the socket tables (/proc/net/tcp, udp, ...: this network namespace's) for
// sockets with local port port (and state state, "" for any), and looks their inodes up in
// /proc/*/fd. A kernel socket (inode 0, e.g. a kernel tunnel's) has no owner.
func socketOwners(tables []string, port int, state string) []procInfo {
	inodes := map[string]bool{}
	for _, f := range tables {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fl := strings.Fields(sc.Text())
			if len(fl) < 10 || (state != "" && fl[3] != state) {
				continue
			}
			i := strings.LastIndexByte(fl[1], ':')
			if i < 0 {
				continue
			}
			if p, err := strconv.ParseUint(fl[1][i+1:], 16, 16); err == nil && int(p) == port && fl[9] != "0" {
				inodes["socket:["+fl[9]+"]"] = true
			}
		}
		fh.Close()
	}
	if len(inodes) == 0 {
		return nil
	}
	return procsWithFD(func(link string) bool { return inodes[link] })
}

// checkGenevePort checks that UDP port (the agent's --geneve-port, Geneve between the nodes) is
// free or Open vSwitch's own: a process other than ovs-vswitchd bound to it, or a kernel geneve
// or VXLAN device on it that is not OVS's (genev_sys_<port>), e.g. another overlay's, fails. A
// busy port whose holder node-setup cannot see (a kernel socket, a process in another PID
// namespace) is only logged: OVS's own tunnel looks the same from an init container.
func checkGenevePort(port int, logf func(string, ...any)) error {
	if port == 0 {
		return nil
	}
	pc, err := net.ListenPacket("udp", ":"+strconv.Itoa(port))
	if err == nil {
		pc.Close()
		return nil
	}
	if !errors.Is(err, unix.EADDRINUSE) {
		logf("note: could not check the Geneve port UDP %d: %v", port, err)
		return nil
	}
	var foreign []string
	var ovs []int
	for _, o := range udpSockets(port) {
		if o.comm == "ovs-vswitchd" {
			ovs = append(ovs, o.pid)
		} else {
			foreign = append(foreign, o.String())
		}
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		name := l.Attrs().Name
		switch d := l.(type) {
		case *netlink.Geneve:
			if int(d.Dport) == port && name != fmt.Sprintf("genev_sys_%d", port) {
				foreign = append(foreign, "the geneve device "+name)
			}
		case *netlink.Vxlan:
			if d.Port == port {
				foreign = append(foreign, "the vxlan device "+name)
			}
		}
	}
	if len(foreign) > 0 {
		return fmt.Errorf("UDP port %d (Geneve between the nodes, srcip-agent's --geneve-port) is in use by %s: another overlay on this node (Antrea, OVN-Kubernetes, Cilium or flannel in a tunnel mode)? Remove it, or give every node's srcip-agent and node-setup the same other --geneve-port; nothing was changed",
			port, strings.Join(foreign, ", "))
	}
	if len(ovs) > 0 {
		logf("unchanged: UDP port %d (Geneve) is Open vSwitch's own (ovs-vswitchd pid %d)", port, ovs[0])
	} else {
		logf("note: UDP port %d (Geneve) is in use by a socket node-setup cannot attribute (a kernel tunnel: Open vSwitch's own genev_sys_%d, or another overlay's; `ss -ulpn 'sport = :%d'` on the node)", port, port, port)
	}
	return nil
}

// procsWithFD returns the processes that have an open file descriptor whose /proc link target
// satisfies match.
func procsWithFD(match func(string) bool) []procInfo {
	ents, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "fd"))
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "fd", fd.Name())); err == nil && match(l) {
				out = append(out, readProc(pid))
				break
			}
		}
	}
	return out
}

func readProc(pid int) procInfo {
	p := procInfo{pid: pid}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		p.comm = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		p.cmdline = strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		if len(p.cmdline) > 160 {
			p.cmdline = p.cmdline[:160] + "..."
		}
	}
	return p
}

// dhcpClients are the process names (/proc/PID/comm) of the DHCP clients checkNotDHCP looks for.
var dhcpClients = []string{"dhclient", "dhcpcd", "udhcpc", "dhcpcd5"}

// checkNotDHCP refuses a NIC configured by DHCP, before anything moves: once the NIC is a port of
// br-ex a DHCP client on it gets no lease (the datapath takes the NIC's frames), the lease's
// address, moved to br-ex, would expire there, and a renewal would put it back on the NIC. The
// signs, in this order: an IPv4 or global IPv6 address of the NIC without IFA_F_PERMANENT or with
// a finite valid lifetime (what dhclient, systemd-networkd, NetworkManager and dhcpcd add, and
// IPv6 SLAAC); an IPv6 route learned from a router advertisement (proto ra: it would expire on
// br-ex, and net.ipv6.conf.all.forwarding=1 stops the kernel taking new ones; setupBrEx leaves
// both out of the check, and on the NIC, on a node without an IPv6 pod CIDR); a DHCP client
// process (dhcpClients) in this network namespace with the NIC's name among its arguments; a
// systemd-networkd lease file of the NIC (/run/systemd/netif/leases/<ifindex>) when node-setup
// runs in the host's network namespace. what names the NIC in the error ("NIC eth0",
// "--egress-interface eth1").
func checkNotDHCP(what string, link netlink.Link, addrs []netlink.Addr, routes []netlink.Route) error {
	nic := link.Attrs().Name
	var sign string
	for _, a := range addrs {
		if a.IPNet == nil || a.IP.IsLinkLocalUnicast() {
			continue
		}
		if a.Flags&unix.IFA_F_PERMANENT == 0 || (a.ValidLft > 0 && a.ValidLft != infinityLifetime) {
			what := "a DHCP lease"
			if a.IP.To4() == nil {
				what = "SLAAC or a DHCPv6 lease"
			}
			sign = fmt.Sprintf("its address %s is dynamic (valid_lft %s, %s)", a.IPNet, lifetime(a.ValidLft), what)
			break
		}
	}
	if sign == "" {
		for _, r := range routes {
			if r.Protocol == unix.RTPROT_RA {
				dst := "default"
				if r.Dst != nil && maskBits(r.Dst) != 0 {
					dst = r.Dst.String()
				}
				sign = fmt.Sprintf("its IPv6 route %s via %s was learned from a router advertisement (set net.ipv6.conf.%s.accept_ra=0 and configure the route statically)", dst, r.Gw, nic)
				break
			}
		}
	}
	if sign == "" {
		selfNS, _ := os.Readlink("/proc/self/ns/net")
		for _, p := range procsMatching(func(comm string) bool { return slices.Contains(dhcpClients, comm) }) {
			ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", p.pid))
			if ns == selfNS && slices.Contains(strings.Fields(p.cmdline), nic) {
				sign = "a DHCP client runs for it: " + p.String()
				break
			}
		}
	}
	if sign == "" {
		selfNS, _ := os.Readlink("/proc/self/ns/net")
		initNS, _ := os.Readlink("/proc/1/ns/net")
		lease := fmt.Sprintf("/run/systemd/netif/leases/%d", link.Attrs().Index)
		if _, err := os.Stat(lease); err == nil && selfNS != "" && selfNS == initNS {
			sign = "systemd-networkd holds a DHCP lease for it (" + lease + ")"
		}
	}
	if sign == "" {
		return nil
	}
	var static []string
	for _, a := range addrs {
		if a.IPNet != nil && !a.IP.IsLinkLocalUnicast() {
			static = append(static, a.IPNet.String())
		}
	}
	var gws []string
	for _, r := range routes {
		if r.Gw != nil && (r.Dst == nil || maskBits(r.Dst) == 0) {
			gws = append(gws, r.Gw.String())
		}
	}
	hint := ""
	if len(static) > 0 {
		hint = " (addresses " + strings.Join(static, ", ")
		if len(gws) > 0 {
			hint += ", default via " + strings.Join(gws, ", ")
		}
		hint += ")"
	}
	return fmt.Errorf("%s is configured by DHCP: %s. DHCP uplinks are not supported: once %s is a port of br-ex its DHCP client gets no lease, and the address would expire on br-ex. Configure %s statically%s in the distribution's network configuration (netplan: dhcp4: false with addresses: and routes:; ifupdown: iface %s inet static), stop its DHCP client, and run node-setup again (docs/install.md, prerequisites); nothing was changed",
		what, sign, nic, nic, hint, nic)
}

func lifetime(v int) string {
	if v == 0 || v == infinityLifetime {
		return "forever"
	}
	return strconv.Itoa(v) + "s"
}

// procsMatching returns the processes whose name (/proc/PID/comm) satisfies match.
func procsMatching(match func(comm string) bool) []procInfo {
	ents, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || !match(strings.TrimSpace(string(b))) {
			continue
		}
		out = append(out, readProc(pid))
	}
	return out
}
