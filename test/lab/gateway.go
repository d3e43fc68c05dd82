package lab

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// GatewayPort is the name of each node's gateway port on br-int (the agent's --gateway-port
// default).
const GatewayPort = "srcip-gw0"

// SetupGateway does, idempotently, what the node set-up step does for host connectivity on node
// (kept in this one function so that the lab can call the real step instead): the gateway port
// srcip-gw0, an OVS internal port on br-int (br-int is created here when the agent has not yet
// done it, with the settings the agent gives it), holding the node's pod gateway address with the
// pod CIDR's length and the pod MTU; the route of the cluster CIDR into it from the node IP;
// IPv4 forwarding; and the masquerade of pod traffic leaving the cluster, in nftables
// table `ip ovs-srcip`. A dual-stack node gets the IPv6 twins as well: Gateway6/64 (no DAD), the
// route of ClusterCIDR6 from Gateway6 (as node-setup: over IPv6 a host reaches remote pods from
// its pod gateway address, the one source whose replies the remote node routes back over Geneve), IPv6
// forwarding, table `ip6 ovs-srcip`.
func (l *Lab) SetupGateway(node string) error {
	n := l.Node(node)
	if n == nil {
		return fmt.Errorf("lab: no node %q", node)
	}
	wrap := func(err error) error { return fmt.Errorf("node %s: gateway port: %w", n.Name, err) }
	n.mu.Lock()
	_, err := l.Vsctl(n.Name,
		"--may-exist", "add-br", "br-int",
		"--", "set", "bridge", "br-int", "datapath_type=netdev", "fail_mode=secure",
		"protocols=OpenFlow10,OpenFlow13,OpenFlow15",
		"--", "--may-exist", "add-port", "br-int", GatewayPort,
		"--", "set", "interface", GatewayPort, "type=internal")
	n.mu.Unlock()
	if err != nil {
		return wrap(err)
	}
	gw := n.Gateway.String()
	if err := l.ipBatch(n.Netns,
		"link set "+GatewayPort+" mtu 1400 up", // the pod MTU (docs/lab-facts.md#pitfall-3)
		"addr replace "+gw+"/"+strconv.Itoa(n.PodCIDR.Bits())+" dev "+GatewayPort+" scope link",
		"addr replace "+n.IP.String()+"/32 dev "+GatewayPort+" noprefixroute",
		"route replace "+l.cfg.ClusterCIDR+" dev "+GatewayPort+" src "+n.IP.String(),
	); err != nil {
		return wrap(err)
	}
	_ = l.txOff(n.Netns, GatewayPort) // a tap of the userspace datapath; harmless if unsupported
	if _, err := l.nsExec(n.Netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"); err != nil {
		return wrap(err)
	}
	if n.IP6.IsValid() {
		if err := l.enable6(n.Netns, GatewayPort); err != nil {
			return wrap(err)
		}
		if err := l.ipBatch(n.Netns,
			"addr replace "+n.Gateway6.String()+"/"+strconv.Itoa(n.PodCIDR6.Bits())+" dev "+GatewayPort+" nodad",
			"route replace "+l.cfg.ClusterCIDR6+" dev "+GatewayPort+" src "+n.Gateway6.String(),
		); err != nil {
			return wrap(err)
		}
		if _, err := l.nsExec(n.Netns, "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1"); err != nil {
			return wrap(err)
		}
	}
	l.mu.Lock()
	nonMasq4, nonMasq6 := nonMasqSet(l.nonMasq, true), nonMasqSet(l.nonMasq, false)
	l.mu.Unlock()
	// Replace the table whole (add + delete + define), so that a second call leaves one rule.
	nft := fmt.Sprintf(`add table ip ovs-srcip
delete table ip ovs-srcip
table ip ovs-srcip {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %s ip daddr != %s%s masquerade
	}
}
`, n.PodCIDR.Masked(), l.cfg.ClusterCIDR, nonMasq4)
	if n.IP6.IsValid() {
		nft += fmt.Sprintf(`add table ip6 ovs-srcip
delete table ip6 ovs-srcip
table ip6 ovs-srcip {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip6 saddr %s ip6 daddr != %s%s masquerade
	}
}
`, n.PodCIDR6.Masked(), l.cfg.ClusterCIDR6, nonMasq6)
	}
	if _, err := l.run(runOpts{stdin: nft}, "ip", "netns", "exec", n.Netns, "nft", "-f", "-"); err != nil {
		return wrap(err)
	}
	return nil
}

// SetNonMasquerade makes the masquerade of every node leave out cidrs (either family), as
// node-setup --non-masquerade-cidrs does (routed pods; nodesetup's nftObjects: a second daddr
// set); nil puts the plain masquerade back. Give the agents the same value (their
// --non-masquerade-cidrs) for the flows of routed pods.
func (l *Lab) SetNonMasquerade(cidrs []netip.Prefix) error {
	l.mu.Lock()
	l.nonMasq = append([]netip.Prefix(nil), cidrs...)
	l.mu.Unlock()
	for _, n := range l.Nodes {
		if err := l.SetupGateway(n.Name); err != nil {
			return err
		}
	}
	return nil
}

// nonMasqSet renders the `daddr != { ... }` addition of one family's non-masquerade CIDRs
// ("" without any).
func nonMasqSet(cidrs []netip.Prefix, v4 bool) string {
	var s []string
	for _, p := range cidrs {
		if p.Addr().Is4() == v4 {
			s = append(s, p.Masked().String())
		}
	}
	if len(s) == 0 {
		return ""
	}
	ip := "ip"
	if !v4 {
		ip = "ip6"
	}
	return " " + ip + " daddr != { " + strings.Join(s, ", ") + " }"
}
