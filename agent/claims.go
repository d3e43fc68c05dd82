package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// claimRank orders Services competing for an entry point: the oldest Service wins, then the
// smallest namespace/name, so that every node and every restart picks the same winner.
type claimRank struct {
	created time.Time
	name    types.NamespacedName
}

func (a claimRank) less(b claimRank) bool {
	if !a.created.Equal(b.created) {
		return a.created.Before(b.created)
	}
	if a.name.Namespace != b.name.Namespace {
		return a.name.Namespace < b.name.Namespace
	}
	return a.name.Name < b.name.Name
}

// claims indexes the entry points of every opted-in Service, so that one whose entry point
// collides with another's loses just that entry point (and gets an Event) instead of breaking the
// other Service's flows. It is owned by the Reconciler's goroutine.
type claims struct {
	bySvc map[types.NamespacedName][]flows.EntryPoint
	rank  map[types.NamespacedName]claimRank
	// owners are the Services claiming each entry point (a set: each once, in no meaningful
	// order; almost always one, so a slice rather than a map per entry point).
	owners map[flows.EntryPoint][]types.NamespacedName
}

func newClaims() *claims {
	return &claims{
		bySvc:  map[types.NamespacedName][]flows.EntryPoint{},
		rank:   map[types.NamespacedName]claimRank{},
		owners: map[flows.EntryPoint][]types.NamespacedName{},
	}
}

// reserve makes room for n Services when none claims anything yet (a first full sync).
func (c *claims) reserve(n int) {
	c.bySvc, c.rank, c.owners = grown(c.bySvc, n), grown(c.rank, n), grown(c.owners, n)
}

// entryPoints returns the claim keys of a Service's ports.
func (c *claims) entryPoints(sps []flows.ServicePort) []flows.EntryPoint {
	var out []flows.EntryPoint
	for i := range sps {
		for _, e := range sps[i].Claims() {
			if !slices.Contains(out, e) {
				out = append(out, e)
			}
		}
	}
	return out
}

// set replaces the claims of name (nil sps: remove) and returns the other Services whose
// winners may have changed because of it.
func (c *claims) set(name types.NamespacedName, rank claimRank, sps []flows.ServicePort) []types.NamespacedName {
	var affected map[types.NamespacedName]bool
	mark := func(os []types.NamespacedName) {
		for _, o := range os {
			if o == name {
				continue
			}
			if affected == nil {
				affected = map[types.NamespacedName]bool{}
			}
			affected[o] = true
		}
	}
	for _, e := range c.bySvc[name] {
		os := c.owners[e]
		mark(os)
		if os = slices.DeleteFunc(os, func(o types.NamespacedName) bool { return o == name }); len(os) == 0 {
			delete(c.owners, e)
		} else {
			c.owners[e] = os
		}
	}
	delete(c.bySvc, name)
	delete(c.rank, name)
	if eps := c.entryPoints(sps); len(eps) > 0 {
		c.bySvc[name] = eps
		c.rank[name] = rank
		for _, e := range eps {
			os := c.owners[e]
			mark(os)
			if !slices.Contains(os, name) {
				c.owners[e] = append(os, name)
			}
		}
	}
	if len(affected) == 0 {
		return nil
	}
	out := make([]types.NamespacedName, 0, len(affected))
	for o := range affected {
		out = append(out, o)
	}
	return out
}

// winner returns the Service that owns e.
func (c *claims) winner(e flows.EntryPoint) types.NamespacedName {
	var best types.NamespacedName
	var br claimRank
	first := true
	for _, o := range c.owners[e] {
		if r := c.rank[o]; first || r.less(br) {
			best, br, first = o, r, false
		}
	}
	return best
}

// resolve removes from sps (the converted ports of name) the entry points that another Service
// owns and describes each removal.
func (c *claims) resolve(name types.NamespacedName, sps []flows.ServicePort) ([]flows.ServicePort, []string) {
	var problems []string
	lost := func(e flows.EntryPoint) bool {
		if len(c.owners[e]) < 2 {
			return false
		}
		w := c.winner(e)
		if w == name {
			return false
		}
		problems = append(problems, fmt.Sprintf("entry point %s is already used by Service %s; not programmed for this Service", e, w))
		return true
	}
	out := make([]flows.ServicePort, 0, len(sps))
	for _, sp := range sps {
		var lostIPs []netip.Addr
		for _, e := range sp.Claims() {
			if !lost(e) {
				continue
			}
			if e.IsNodePort() {
				sp.NodePort = 0
			} else {
				lostIPs = append(lostIPs, e.Addr.Addr())
			}
		}
		keep := func(as []netip.Addr) []netip.Addr {
			var k []netip.Addr
			for _, a := range as {
				if !slices.Contains(lostIPs, a) {
					k = append(k, a)
				}
			}
			return k
		}
		sp.LoadBalancerIPs = keep(sp.LoadBalancerIPs)
		sp.ExternalIPs = keep(sp.ExternalIPs)
		out = append(out, sp)
	}
	return out, problems
}
