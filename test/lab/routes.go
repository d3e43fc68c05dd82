package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// rootRoute is one route of the root netns as `ip -j route show table all` prints it.
type rootRoute struct {
	Dst   string `json:"dst"`
	Dev   string `json:"dev"`
	Table string `json:"table"`
	Type  string `json:"type"`
}

// CheckRoutesFree refuses prefixes that the lab would route from the root network namespace into
// itself (out: `ip -j route show table all` of the root netns) when one of them overlaps a route the host already has (its own addresses, its
// connected networks, any more or less specific route), the default routes excepted: a dial
// from the root netns to such an address could leave by a real interface, or the lab's route
// would capture the host's own traffic. The error names the prefix, the route and the fix.
func CheckRoutesFree(out []byte, prefixes []netip.Prefix) error {
	var routes []rootRoute
	if err := json.Unmarshal(out, &routes); err != nil {
		return fmt.Errorf("ip -j route: %w", err)
	}
	var errs []error
	for _, r := range routes {
		if r.Dst == "" || r.Dst == "default" {
			continue
		}
		dst, err := netip.ParsePrefix(r.Dst)
		if err != nil {
			a, aerr := netip.ParseAddr(r.Dst)
			if aerr != nil {
				continue // multicast names and the like
			}
			dst = netip.PrefixFrom(a, a.BitLen())
		}
		for _, p := range prefixes {
			if p.Addr().Is4() == dst.Addr().Is4() && p.Overlaps(dst) {
				if labLink(r.Dev) {
					errs = append(errs, fmt.Errorf("lab prefix %s is already routed into another real-kubelet lab (%s dev %s): "+
						"one such lab runs at a time; wait for it, or end a stale one's owner (CleanupStale removes it)", p, r.Dst, r.Dev))
					continue
				}
				errs = append(errs, fmt.Errorf("lab prefix %s overlaps the host's route %s dev %s (table %s): "+
					"the lab would send to or capture the host's own network; give the lab a free prefix "+
					"(Config.RouterCIDR and the Node manifests, the cluster CIDR)", p, r.Dst, r.Dev, tableName(r.Table)))
			}
		}
	}
	return errors.Join(errs...)
}

// labLink reports whether dev is the root end of a real-kubelet lab's link to its router
// (test/cluster: the lab prefix, "sl" and 4 hex digits, then "k").
func labLink(dev string) bool {
	if len(dev) != 7 || !strings.HasPrefix(dev, "sl") || dev[6] != 'k' {
		return false
	}
	for _, c := range dev[2:6] {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

func tableName(t string) string {
	if t == "" {
		return "main"
	}
	return t
}
