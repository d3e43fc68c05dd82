package lab

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// BridgeState is what a bridge holds, as sorted text lines without statistics: its flows
// (`ovs-ofctl --no-stats dump-flows`) and its groups (`dump-groups`). Comparing two BridgeStates
// tells whether anything changed.
type BridgeState struct {
	Flows, Groups []string
}

// Snapshot returns the BridgeState of br-ex and br-int of node, by bridge name.
func (l *Lab) Snapshot(node string) (map[string]BridgeState, error) {
	out := map[string]BridgeState{}
	for _, br := range []string{"br-ex", "br-int"} {
		f, err := l.Ofctl(node, "-O", "OpenFlow15", "--no-stats", "dump-flows", br)
		if err != nil {
			return nil, err
		}
		g, err := l.DumpGroups(node, br)
		if err != nil {
			return nil, err
		}
		out[br] = BridgeState{Flows: dumpLines(f), Groups: dumpLines(g)}
	}
	return out, nil
}

func dumpLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "OFPST_") {
			continue
		}
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

var (
	cookieRE = regexp.MustCompile(`cookie=(0x[0-9a-f]+)`)
	groupRE  = regexp.MustCompile(`group:(\d+)`)
)

// Owners returns the cookies and group ids of the flows that match one of the tokens (match
// fields such as "tp_dst=30120" or "nw_dst=203.0.113.120"): the flow sets of one object.
func (s BridgeState) Owners(tokens ...string) (cookies, groups []string) {
	seenC, seenG := map[string]bool{}, map[string]bool{}
	for _, l := range s.Flows {
		for _, tok := range tokens {
			if !strings.Contains(l, tok+" ") && !strings.Contains(l, tok+",") {
				continue
			}
			if m := cookieRE.FindStringSubmatch(l); m != nil && !seenC[m[1]] {
				seenC[m[1]] = true
				cookies = append(cookies, m[1])
			}
			if m := groupRE.FindStringSubmatch(l); m != nil && !seenG[m[1]] {
				seenG[m[1]] = true
				groups = append(groups, m[1])
			}
		}
	}
	return cookies, groups
}

// Without returns the state minus the flows with the given cookies and the given groups.
func (s BridgeState) Without(cookies, groups []string) BridgeState {
	drop := func(l string) bool {
		for _, c := range cookies {
			if strings.Contains(l, "cookie="+c+",") {
				return true
			}
		}
		for _, g := range groups {
			if strings.HasPrefix(l, fmt.Sprintf("group_id=%s,", g)) {
				return true
			}
		}
		return false
	}
	var out BridgeState
	for _, l := range s.Flows {
		if !drop(l) {
			out.Flows = append(out.Flows, l)
		}
	}
	for _, l := range s.Groups {
		if !drop(l) {
			out.Groups = append(out.Groups, l)
		}
	}
	return out
}

// Drains returns the cookies of the state's drain flow sets (cookie kind 0x11, docs/pipeline.md):
// transient by design, they go away at the first full sync that finds no live connection to an
// entry point that was removed, so comparisons across time usually leave them out.
func (s BridgeState) Drains() []string {
	var out []string
	for _, l := range s.Flows {
		if c, _, ok := strings.Cut(strings.TrimPrefix(l, "cookie="), ","); ok && strings.HasPrefix(c, "0x5c11") {
			out = append(out, c)
		}
	}
	return out
}

// WithoutDrains is the state without its drain flow sets.
func (s BridgeState) WithoutDrains() BridgeState { return s.Without(s.Drains(), nil) }
