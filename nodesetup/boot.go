package nodesetup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// BootScript is the file in StateDir that puts br-ex back after a reboot: the NIC's addresses
// and routes live in the running kernel only, and a rebooted ovs-vswitchd has no flow on br-ex
// (fail_mode=secure: it forwards nothing), so without it a rebooted node has no network and the
// kubelet never reaches the API server to start the DaemonSet again. docs/install.md ("Reboots")
// gives the systemd unit that runs it after Open vSwitch and before the kubelet.
const BootScript = "brex-boot.sh"

func (c *Config) bootScriptPath() string { return filepath.Join(c.StateDir, BootScript) }

// RenderBootScript returns the boot script for st: wait for br-ex, the bootstrap NORMAL flow
// when table 0 has no flow, the NIC's IPv4 addresses off the NIC (the distribution's network
// configuration puts them back there at boot; its global IPv6 addresses too) and onto br-ex with
// its routes (IPv6 ones with ip -6, addresses nodad), and on the userspace datapath ARP off and
// strict rp_filter on the NIC (and IPv6 off on it when IPv6 addresses moved). Running it twice changes nothing.
func RenderBootScript(st *State, statePath string) string {
	q := shellQuote
	br, nic := q(st.BridgeEx), q(st.NIC)
	var b strings.Builder
	fmt.Fprintf(&b, `#!/bin/sh
# Written by srcip-agent node-setup from %s; do not edit (node-setup rewrites it,
# node-teardown removes it). Run at boot after Open vSwitch and before the kubelet by
# ovs-srcip-brex.service (docs/install.md, "Reboots"): puts %s back as node-setup left it until
# the agent's flows replace the bootstrap flow. Running it twice changes nothing.
set -eu
ovs-vsctl --timeout=120 wait-until Bridge %s
i=0
until ip link show dev %s >/dev/null 2>&1; do
	i=$((i + 1)); [ "$i" -lt 120 ] || { echo "%s: no link %s" >&2; exit 1; }; sleep 0.5
done
if ! ovs-ofctl dump-flows %s table=0 | grep -q 'actions='; then
	ovs-ofctl add-flow %s 'table=0,priority=0,actions=NORMAL'
fi
ip link set dev %s mtu "$(cat /sys/class/net/%s/mtu)"
ip link set dev %s up
ip -4 addr flush dev %s
`, statePath, st.BridgeEx, br, br, BootScript, st.BridgeEx, br, br, br, nic, br, nic)
	if st.ARPOffSet {
		fmt.Fprintf(&b, "ip link set dev %s arp off\n", nic)
	}
	if st.RPFilter != "" {
		fmt.Fprintf(&b, "sysctl -q -w net.ipv4.conf.%s.rp_filter=1\n", strings.ReplaceAll(st.NIC, ".", "/"))
	}
	if st.hasIPv6() {
		// br-ex's device is new after a reboot and takes net.ipv6.conf.default.
		fmt.Fprintf(&b, "sysctl -q -w net.ipv6.conf.%s.disable_ipv6=0\n", strings.ReplaceAll(st.BridgeEx, ".", "/"))
		fmt.Fprintf(&b, "ip -6 addr flush dev %s scope global\n", nic)
	}
	if st.IPv6Disabled != "" {
		fmt.Fprintf(&b, "sysctl -q -w net.ipv6.conf.%s.disable_ipv6=1\n", strings.ReplaceAll(st.NIC, ".", "/"))
	}
	for _, a := range st.Addrs {
		fmt.Fprintf(&b, "ip addr replace %s", q(a.CIDR))
		if a.Broadcast != "" {
			fmt.Fprintf(&b, " broadcast %s", q(a.Broadcast))
		}
		fmt.Fprintf(&b, " dev %s scope %d", br, a.Scope)
		if a.Flags&unix.IFA_F_NOPREFIXROUTE != 0 {
			b.WriteString(" noprefixroute")
		}
		if strings.Contains(a.CIDR, ":") {
			b.WriteString(" nodad")
		}
		b.WriteString("\n")
	}
	for _, r := range st.Routes {
		renderRoute(&b, r, br, 0)
	}
	return b.String()
}

// renderRoute writes the "ip route replace" line of r through br, in table (0: main).
func renderRoute(b *strings.Builder, r SavedRoute, br string, table int) {
	q := shellQuote
	dst, fam := r.Dst, ""
	if strings.Contains(dst, ":") {
		fam = "-6 "
	}
	if dst == "0.0.0.0/0" || dst == "::/0" {
		dst = "default"
	}
	fmt.Fprintf(b, "ip %sroute replace %s", fam, q(dst))
	if r.Gw != "" {
		fmt.Fprintf(b, " via %s", q(r.Gw))
	}
	fmt.Fprintf(b, " dev %s", br)
	if r.Flags&unix.RTNH_F_ONLINK != 0 {
		b.WriteString(" onlink")
	}
	if r.Src != "" {
		fmt.Fprintf(b, " src %s", q(r.Src))
	}
	fmt.Fprintf(b, " metric %d proto %d scope %d", r.Metric, r.Protocol, r.Scope)
	if r.MTU != 0 {
		fmt.Fprintf(b, " mtu %d", r.MTU)
	}
	if r.AdvMSS != 0 {
		fmt.Fprintf(b, " advmss %d", r.AdvMSS)
	}
	if table != 0 {
		fmt.Fprintf(b, " table %d", table)
	}
	b.WriteString("\n")
}

// RenderEgressBootLines returns the boot script's part for the secondary NICs
// (--egress-interface): each NIC's addresses off it and onto br-ex with its routes, ARP off and
// strict rp_filter (userspace datapath), its routing table and ip rules. The OVSDB part (the
// port, its tag and external_ids) survives a reboot in the database.
func RenderEgressBootLines(egress []EgressNICState) string {
	q := shellQuote
	var b strings.Builder
	for _, e := range egress {
		br, nic := q(e.BridgeEx), q(e.NIC)
		fmt.Fprintf(&b, "# secondary NIC %s (--egress-interface)\n", e.NIC)
		if e.ARPOffSet {
			fmt.Fprintf(&b, "ip link set dev %s arp off\n", nic)
		}
		if e.RPFilter != "" {
			fmt.Fprintf(&b, "sysctl -q -w net.ipv4.conf.%s.rp_filter=1\n", strings.ReplaceAll(e.NIC, ".", "/"))
		}
		fmt.Fprintf(&b, "ip link set dev %s up\nip -4 addr flush dev %s\n", nic, nic)
		for _, a := range e.Addrs {
			fmt.Fprintf(&b, "ip addr replace %s", q(a.CIDR))
			if a.Broadcast != "" {
				fmt.Fprintf(&b, " broadcast %s", q(a.Broadcast))
			}
			fmt.Fprintf(&b, " dev %s scope %d\n", br, a.Scope)
		}
		for _, r := range e.mainRoutes() {
			renderRoute(&b, r, br, 0)
		}
		for _, r := range egressTableRoutes(e) {
			renderRoute(&b, r, br, e.Table)
		}
		for _, sn := range e.Subnets {
			fmt.Fprintf(&b, "ip rule show from %s table %d priority %d | grep -q . || ip rule add from %s lookup %d priority %d\n",
				q(sn), e.Table, e.Table, q(sn), e.Table, e.Table)
		}
	}
	return b.String()
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeBootScript (re)writes the boot script when node-setup built br-ex (a state file exists)
// and its content differs; otherwise it removes a left-over one.
func (r *run) writeBootScript() error {
	c := r.cfg
	st, err := c.readState()
	if err != nil {
		return err
	}
	path := c.bootScriptPath()
	if st == nil {
		return r.removeBootScript()
	}
	egress, err := c.readEgressState()
	if err != nil {
		return err
	}
	want := []byte(RenderBootScript(st, c.statePath()) + RenderEgressBootLines(egress))
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) {
		r.unchanged("boot script %s", path)
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, want, 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	r.changed("wrote the boot script %s (run it at boot, before the kubelet: docs/install.md \"Reboots\")", path)
	return nil
}

func (r *run) removeBootScript() error {
	path := r.cfg.bootScriptPath()
	if err := os.Remove(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	r.changed("removed %s", path)
	return nil
}
