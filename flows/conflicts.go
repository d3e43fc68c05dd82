package flows

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Conflicts indexes the MatchKeys of every desired flow set, as built, before any conflict is
// resolved. Two flow sets that render the same MatchKey would overwrite each other's flow in OVS;
// Resolve gives the key to one winner (the lowest RankOf, an order that does not depend on
// arrival order) and rebuilds the others without it. It is not safe for concurrent use.
type Conflicts struct {
	keysOf     map[Key][]MatchKey
	contenders map[MatchKey][]Key
	// contested is how many match keys have more than one contender (Count).
	contested int
}

// NewConflicts returns an empty index.
func NewConflicts() *Conflicts {
	return &Conflicts{keysOf: map[Key][]MatchKey{}, contenders: map[MatchKey][]Key{}}
}

// Reset forgets everything (a full sync re-indexes every flow set).
func (c *Conflicts) Reset() {
	clear(c.keysOf)
	clear(c.contenders)
	c.contested = 0
}

// Reserve makes room for n flow sets of about two flows each when the index is empty (a
// first full sync indexes every flow set at once; the maps then grow once, not step by step).
func (c *Conflicts) Reserve(n int) {
	if len(c.keysOf) == 0 && len(c.contenders) == 0 {
		c.keysOf = make(map[Key][]MatchKey, n)
		c.contenders = make(map[MatchKey][]Key, 2*n)
	}
}

// Set replaces the match keys of k (nil: k is gone) and returns the other flow sets whose
// contested keys changed: they must be rebuilt and resolved again.
func (c *Conflicts) Set(k Key, keys []MatchKey) map[Key]bool {
	old := c.keysOf[k]
	if slices.Equal(old, keys) {
		return nil
	}
	var affected map[Key]bool
	mark := func(ks []Key) {
		for _, o := range ks {
			if o == k {
				continue
			}
			if affected == nil {
				affected = map[Key]bool{}
			}
			affected[o] = true
		}
	}
	for _, mk := range old {
		cs := c.contenders[mk]
		i := slices.Index(cs, k)
		if i < 0 {
			continue
		}
		cs = slices.Delete(cs, i, i+1)
		if len(cs) == 1 {
			c.contested--
		}
		if len(cs) == 0 {
			delete(c.contenders, mk)
			continue
		}
		c.contenders[mk] = cs
		mark(cs)
	}
	if len(keys) == 0 {
		delete(c.keysOf, k)
		return affected
	}
	c.keysOf[k] = keys
	for _, mk := range keys {
		cs := c.contenders[mk]
		if slices.Contains(cs, k) {
			continue // the same flow twice in one set
		}
		mark(cs)
		if len(cs) == 1 {
			c.contested++
		}
		c.contenders[mk] = append(cs, k)
	}
	return affected
}

// Count returns the number of match keys with more than one contender.
func (c *Conflicts) Count() int { return c.contested }

// lost returns the match keys of k that another flow set wins, with that winner.
func (c *Conflicts) lost(st *State, k Key) map[MatchKey]Key {
	var out map[MatchKey]Key
	for _, mk := range c.keysOf[k] {
		cs := c.contenders[mk]
		if len(cs) < 2 {
			continue
		}
		w := cs[0]
		for _, o := range cs[1:] {
			if compareRank(st, o, w) < 0 {
				w = o
			}
		}
		if w != k {
			if out == nil {
				out = map[MatchKey]Key{}
			}
			out[mk] = w
		}
	}
	return out
}

// compareRank orders flow sets for a contested match key: RankOf's tier, then the older object
// (zero Created last), then kind and key.
func compareRank(st *State, a, b Key) int {
	ra, rb := RankOf(st, a), RankOf(st, b)
	if c := cmp.Compare(ra.Tier, rb.Tier); c != 0 {
		return c
	}
	switch az, bz := ra.Created.IsZero(), rb.Created.IsZero(); {
	case az && !bz:
		return 1
	case !az && bz:
		return -1
	case !ra.Created.Equal(rb.Created):
		if ra.Created.Before(rb.Created) {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	return strings.Compare(a.String(), b.String())
}

// Resolve returns fs, or when another indexed flow set wins some of its match keys, fs rebuilt
// without them with a warning per winner (a kind marked AllOrNothing loses all of its flows).
// fs must have been indexed with Set.
func (c *Conflicts) Resolve(st *State, fs *FlowSet) (*FlowSet, error) {
	lost := c.lost(st, fs.Key)
	if len(lost) == 0 {
		return fs, nil
	}
	drop := make(map[MatchKey]bool, len(lost))
	winners := map[Key]int{}
	for mk, w := range lost {
		drop[mk] = true
		winners[w]++
	}
	ws := make([]Key, 0, len(winners))
	for w := range winners {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
	var warnings []string
	if spec, _ := Spec(fs.Key.Kind); spec.AllOrNothing {
		for _, mk := range fs.MatchKeys() {
			drop[mk] = true
		}
		for _, w := range ws {
			warnings = append(warnings, fmt.Sprintf("%d flow(s) conflict with %s (same address): %s not programmed", winners[w], w, spec.Name))
		}
	} else {
		for _, w := range ws {
			warnings = append(warnings, fmt.Sprintf("%d flow(s) conflict with %s (same table, priority and match): not programmed for %s", winners[w], w, fs.Key))
		}
	}
	return fs.Without(drop, warnings...)
}
