package flows

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// GatewayIP returns the pod gateway address of a pod CIDR: its first host address
// (10.244.1.0/24 -> 10.244.1.1). Pods use it as their default route; br-int answers ARP for it.
func GatewayIP(cidr netip.Prefix) netip.Addr { return cidr.Masked().Addr().Next() }

// GatewayMAC returns the MAC br-int answers with for a pod gateway address: 0a:58 followed by the
// four IPv4 bytes (the convention OVN-Kubernetes uses for its router ports), or by the last four
// bytes of an IPv6 address (its neighbour advertisements, IntNDResponder).
func GatewayMAC(gw netip.Addr) net.HardwareAddr {
	if gw.Is6() && !gw.Is4In6() {
		b := gw.As16()
		return net.HardwareAddr{0x0a, 0x58, b[12], b[13], b[14], b[15]}
	}
	b := gw.As4()
	return net.HardwareAddr{0x0a, 0x58, b[0], b[1], b[2], b[3]}
}

// flow is a flow of table t at priority prio; inPort (when not 0) is matched first, as
// go-openvswitch's ovs.Flow.InPort was rendered (the golden files keep that text).
func flow(t Table, prio int, proto of.Protocol, inPort int, m []of.Match, a ...of.Action) of.Flow {
	if inPort != 0 {
		m = append([]of.Match{of.InPort(uint32(inPort))}, m...)
	}
	return of.Flow{Table: uint8(t), Priority: uint16(prio), Protocol: proto, Match: m, Actions: a}
}

func ctState(s ...of.FlagBit) of.Match { return of.CTState(s...) }

// ctEstablished matches ct_state=+trk+est.
func ctEstablished() of.Match {
	return ctState(of.CTTracked.Set(), of.CTEstablished.Set())
}

// ipv4Value returns an IPv4 address as the integer a 32-bit field holds (network byte order).
func ipv4Value(a netip.Addr) uint64 {
	b := a.As4()
	return uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
}

func output(port int) of.Action { return of.Output{Port: uint32(port)} }

// macValue is a MAC as the integer a 48-bit field holds.
func macValue(m net.HardwareAddr) uint64 {
	var v uint64
	for _, b := range m {
		v = v<<8 | uint64(b)
	}
	return v
}

func (p Ports) validate() error {
	if p.ExUplink <= 0 || p.ExPatch <= 0 || p.IntPatch <= 0 || p.IntTunnel <= 0 || len(p.ExMAC) != 6 {
		return fmt.Errorf("incomplete ports %+v: need uplink, both patch ports, the Geneve port and br-ex's MAC", p)
	}
	return nil
}

// sortedNodes returns st's nodes by name.
func sortedNodes(st *State) []Node {
	out := slices.Collect(maps.Values(st.Nodes))
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// self returns this node (zero Node if it is not in st.Nodes).
func (st *State) self() Node { return st.Nodes[st.Node] }

// tunnelMatch matches Geneve packets addressed to this node's underlay address, ip_dst or
// ipv6_dst in its family (tunnelProto); any address when its InternalIP is unknown.
func (st *State) tunnelMatch() []of.Match {
	m := []of.Match{of.TPDst(st.Ports.tunnelUDPPort())}
	if ip := st.self().InternalIP; ip.IsValid() {
		m = append([]of.Match{of.IPDst(ip)}, m...)
	}
	return m
}

// localCIDR returns this node's pod CIDR that holds ip.
func (st *State) localCIDR(ip netip.Addr) (netip.Prefix, bool) {
	for _, c := range st.self().PodCIDRs {
		if c.Contains(ip) {
			return c, true
		}
	}
	return netip.Prefix{}, false
}

// routableOn is routable, trying first the pod CIDRs of node (the endpoint's nodeName, which
// nearly always holds its address): O(1) per endpoint instead of a walk over every node.
func (st *State) routableOn(ip netip.Addr, node string) bool {
	if n, ok := st.Nodes[node]; ok {
		for _, c := range n.PodCIDRs {
			if c.Contains(ip) {
				return true
			}
		}
	}
	return st.routable(ip)
}

// routable reports whether ip is inside some node's pod CIDRs (br-int can reach it).
func (st *State) routable(ip netip.Addr) bool {
	for _, n := range st.Nodes {
		for _, c := range n.PodCIDRs {
			if c.Contains(ip) {
				return true
			}
		}
	}
	return false
}

// mustMatchKey is matchKeyOf (typed matches always render).
func mustMatchKey(b Bridge, f *of.Flow) MatchKey { return matchKeyOf(b, f) }

// otherNodeKeys lists one key of kind per node of st other than this one (kinds with one flow set
// per other node: node, tunnel-peer).
func otherNodeKeys(kind Kind) func(*State) []Key {
	return func(st *State) []Key {
		out := make([]Key, 0, len(st.Nodes))
		for name := range st.Nodes {
			if name != st.Node {
				out = append(out, Key{Kind: kind, Name: name})
			}
		}
		return out
	}
}

// otherNodeBuild builds the flow set of the other node a key names with build; (nil, nil) when
// st has no such node or it is this one.
func otherNodeBuild(build func(*State, Node) (*FlowSet, error)) func(*State, Key) (*FlowSet, error) {
	return func(st *State, k Key) (*FlowSet, error) {
		n, ok := st.Nodes[k.Name]
		if !ok || n.Name == st.Node {
			return nil, nil
		}
		return build(st, n)
	}
}

// resetCollision refuses a SYN that would open a second connection on the 4-tuple of an
// established one (the same client ip:port through two ingress nodes): the SYN goes to the pod's
// port 0, where no socket can be, and the flow ResetLearn learns brings the kernel's RST back to
// the SYN's ingress node as a reply; nothing is committed.
func resetCollision(st *State) []of.Action {
	return []of.Action{ResetLearnUnderlay(resetLearnTimeout, st.underlayIPv6()), of.SetTCPDst(0), RegOutPort.Output()}
}

// selfGatewayMAC is the MAC this node answers with for its pod gateway address: that of the
// gateway of its first IPv4 pod CIDR; nil without one.
func selfGatewayMAC(st *State) net.HardwareAddr {
	for _, c := range st.self().PodCIDRs {
		if c.Addr().Is4() {
			return GatewayMAC(GatewayIP(c))
		}
	}
	return nil
}
