package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
)

// NodeFacts is what the speaker's configuration is made from on one node: the Node object's
// InternalIPs (status.addresses) and spec.podCIDRs, and whether routed pods are on
// (--non-masquerade-cidrs not empty, docs/routed-pods.md).
type NodeFacts struct {
	InternalIPs []netip.Addr
	PodCIDRs    []netip.Prefix
	RoutedPods  bool
}

// PeerSpec is one peer as configured (the fields of a BGPPeer, docs/bgp.md), already selected
// for the node.
type PeerSpec struct {
	// Name names the configuration object in declines.
	Name           string
	Address        netip.Addr
	Port           uint16
	PeerASN, MyASN uint32
	HoldTime       time.Duration
	Password       string
	// PasswordErr is why the password could not be read (a missing Secret or key); the peer is
	// declined rather than dialled without it.
	PasswordErr error
}

// Decline is a peer the node does not dial, with why and what to do.
type Decline struct {
	Name    string
	Message string
}

// Desired returns the speaker's configuration on a node with facts n for the peers ps, and the
// peers it declines. Families are chosen by family: a peer's session announces the node's pod
// CIDRs of the peer address's family with the node's InternalIP of that family as next hop
// (source address too). The router ID is the node's first IPv4 InternalIP; the speaker's AS is
// the MyASN of the first peer by name, others keep theirs per session. Declined: every peer when
// routed pods are off (announcing pod CIDRs would draw outside traffic that the tunnel guard
// drops) or the node has no IPv4 InternalIP; a peer whose password is unreadable, whose family
// the node has no InternalIP or pod CIDR of, or whose address an earlier peer (by name) uses.
func Desired(n NodeFacts, ps []PeerSpec) (Config, []Decline) {
	ps = slices.Clone(ps)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	var declines []Decline
	declineAll := func(msg string) (Config, []Decline) {
		for _, p := range ps {
			declines = append(declines, Decline{p.Name, msg})
		}
		return Config{}, declines
	}
	if len(ps) == 0 {
		return Config{}, nil
	}
	if !n.RoutedPods {
		return declineAll("routed pods are off on this node (--non-masquerade-cidrs is empty): announcing its pod CIDRs would draw outside traffic that the tunnel guard drops; turn routed pods on for the networks that should reach pods (docs/routed-pods.md)")
	}
	ip := func(v4 bool) netip.Addr {
		for _, a := range n.InternalIPs {
			if a.Is4() == v4 {
				return a
			}
		}
		return netip.Addr{}
	}
	routerID := ip(true)
	if !routerID.IsValid() {
		return declineAll("the node has no IPv4 InternalIP for the BGP router ID (IPv6-only nodes are not served yet, docs/bgp.md)")
	}
	var c Config
	c.RouterID = routerID
	used := map[netip.Addr]string{}
	for _, p := range ps {
		v4 := p.Address.Is4()
		fam := "IPv6"
		if v4 {
			fam = "IPv4"
		}
		var cidrs []netip.Prefix
		for _, pc := range n.PodCIDRs {
			if pc.Addr().Is4() == v4 {
				cidrs = append(cidrs, pc.Masked())
			}
		}
		local := ip(v4)
		switch {
		case p.PasswordErr != nil:
			declines = append(declines, Decline{p.Name, fmt.Sprintf("the TCP-MD5 password cannot be read: %v; the session is not dialled without it", p.PasswordErr)})
			continue
		case used[p.Address] != "":
			declines = append(declines, Decline{p.Name, fmt.Sprintf("peer address %s is also %s's; one session per address: delete one of the two", p.Address, used[p.Address])})
			continue
		case !local.IsValid():
			declines = append(declines, Decline{p.Name, fmt.Sprintf("the node has no %s InternalIP for a session with %s", fam, p.Address)})
			continue
		case len(cidrs) == 0:
			declines = append(declines, Decline{p.Name, fmt.Sprintf("the node has no %s pod CIDR (spec.podCIDRs) to announce to %s", fam, p.Address)})
			continue
		}
		peer := Peer{Address: p.Address, Port: p.Port, PeerASN: p.PeerASN, LocalASN: p.MyASN, HoldTime: p.HoldTime, Password: p.Password, LocalAddress: local}
		test := Config{RouterID: routerID, ASN: max(p.MyASN, 1), Peers: []Peer{peer}}
		if err := test.Validate(); err != nil {
			declines = append(declines, Decline{p.Name, strings.TrimPrefix(err.Error(), "bgp: ")})
			continue
		}
		if p.MyASN == 0 {
			declines = append(declines, Decline{p.Name, "myASN 0: want 1..4294967295"})
			continue
		}
		if c.ASN == 0 {
			c.ASN = p.MyASN
		}
		used[p.Address] = p.Name
		c.Peers = append(c.Peers, peer)
		for _, pc := range cidrs {
			r := Route{Prefix: pc, NextHop: local}
			if !slices.Contains(c.Announce, r) {
				c.Announce = append(c.Announce, r)
			}
		}
	}
	if len(c.Peers) == 0 {
		return Config{}, declines
	}
	return c, declines
}
