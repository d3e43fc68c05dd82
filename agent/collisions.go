package agent

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// collisions indexes the match keys (flows.FlowSet.MatchKeys: bridge, table, priority, match) of
// every desired flow set, as built, before any conflict is resolved. Two flow sets that render
// the same match key would overwrite each other's flow in OVS; the Reconciler gives the key to
// one winner (see Reconciler.rankLess, a fixed order that does not depend on arrival order) and
// rebuilds the others without it. It is owned by the Reconciler's goroutine.
type collisions struct {
	keysOf     map[flows.Key][]string
	contenders map[string][]flows.Key
}

func newCollisions() *collisions {
	return &collisions{keysOf: map[flows.Key][]string{}, contenders: map[string][]flows.Key{}}
}

// reset forgets everything (a full sync re-indexes every flow set).
func (c *collisions) reset() {
	clear(c.keysOf)
	clear(c.contenders)
}

// set replaces the match keys of k (nil: k is gone) and returns the other flow sets whose
// contested keys changed: they must be rebuilt and filtered again.
func (c *collisions) set(k flows.Key, keys []string) map[flows.Key]bool {
	old := c.keysOf[k]
	if slices.Equal(old, keys) {
		return nil
	}
	var affected map[flows.Key]bool
	mark := func(ks []flows.Key) {
		for _, o := range ks {
			if o == k {
				continue
			}
			if affected == nil {
				affected = map[flows.Key]bool{}
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
		c.contenders[mk] = append(cs, k)
	}
	return affected
}

// lost returns the match keys of k that another flow set wins, with that winner.
func (c *collisions) lost(k flows.Key, less func(a, b flows.Key) bool) map[string]flows.Key {
	var out map[string]flows.Key
	for _, mk := range c.keysOf[k] {
		cs := c.contenders[mk]
		if len(cs) < 2 {
			continue
		}
		w := cs[0]
		for _, o := range cs[1:] {
			if less(o, w) {
				w = o
			}
		}
		if w != k {
			if out == nil {
				out = map[string]flows.Key{}
			}
			out[mk] = w
		}
	}
	return out
}

// conflicts returns the number of match keys with more than one contender.
func (c *collisions) conflicts() int {
	n := 0
	for _, cs := range c.contenders {
		if len(cs) > 1 {
			n++
		}
	}
	return n
}

// setRank orders flow sets competing for a match key: lower tier first (the base pipelines, then
// objects the API vouches for), then the older object (creationTimestamp; unknown last), then
// kind and key. It depends only on the cluster state, so every sync, node and restart picks the
// same winner.
type setRank struct {
	tier    int
	created time.Time
	key     flows.Key
}

func (a setRank) compare(b setRank) int {
	if c := cmp.Compare(a.tier, b.tier); c != 0 {
		return c
	}
	switch az, bz := a.created.IsZero(), b.created.IsZero(); {
	case az && !bz:
		return 1
	case !az && bz:
		return -1
	case !a.created.Equal(b.created):
		if a.created.Before(b.created) {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.key.Kind, b.key.Kind); c != 0 {
		return c
	}
	return strings.Compare(a.key.String(), b.key.String())
}

// rankOf ranks the flow set of k from the Reconciler's caches.
func (r *Reconciler) rankOf(k flows.Key) setRank {
	rk := setRank{tier: 1, key: k}
	switch k.Kind {
	case flows.KindExBase, flows.KindIntBase:
		rk.tier = 0
	case flows.KindNode:
		// A Node that is not Ready (e.g. a stale Node object left after a re-install whose pod
		// CIDR was given to another node) loses to a Ready one.
		n := r.nodes[k.Name]
		rk.tier = 2
		if n != nil {
			rk.created = n.CreationTimestamp.Time
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					rk.tier = 1
				}
			}
		}
	case flows.KindPod:
		// A pod port whose IP its Pod object confirms wins over one the API does not vouch for
		// (a stale port of a crashed CNI, a hostile OVSDB writer).
		name := nn(k.Namespace, k.Name)
		pod := r.pods[name]
		rk.tier = 3
		if pod != nil {
			rk.tier = 2
			rk.created = pod.CreationTimestamp.Time
			if p, ok := r.podModel[name]; ok && podConfirms(pod, p) {
				rk.tier = 1
			}
		}
	case flows.KindServicePort:
		if s := r.services[nn(k.Namespace, k.Name)]; s != nil {
			rk.created = s.CreationTimestamp.Time
		}
	}
	return rk
}

// podConfirms reports whether the Pod's status lists every IP of the pod port.
func podConfirms(pod *corev1.Pod, p flows.Pod) bool {
	ips := pod.Status.PodIPs
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: pod.Status.PodIP}}
	}
	for _, a := range p.IPs {
		if !slices.ContainsFunc(ips, func(x corev1.PodIP) bool { return x.IP == a.String() }) {
			return false
		}
	}
	return len(p.IPs) > 0
}

// rankLess is the total order of flow sets for contested match keys.
func (r *Reconciler) rankLess(a, b flows.Key) bool {
	return r.rankOf(a).compare(r.rankOf(b)) < 0
}

// resolveConflicts returns fs, or when another flow set wins some of its match keys, fs rebuilt
// without them (a pod loses all of its flows: a pod whose IP belongs to another pod is not
// programmed at all), with a warning per winner.
func (r *Reconciler) resolveConflicts(fs *flows.FlowSet) (*flows.FlowSet, error) {
	lost := r.coll.lost(fs.Key, r.rankLess)
	if len(lost) == 0 {
		return fs, nil
	}
	drop := make(map[string]bool, len(lost))
	winners := map[flows.Key]int{}
	for mk, w := range lost {
		drop[mk] = true
		winners[w]++
	}
	ws := make([]flows.Key, 0, len(winners))
	for w := range winners {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b flows.Key) int { return strings.Compare(a.String(), b.String()) })
	var warnings []string
	if fs.Key.Kind == flows.KindPod {
		for _, mk := range fs.MatchKeys() {
			drop[mk] = true
		}
		for _, w := range ws {
			warnings = append(warnings, fmt.Sprintf("%d flow(s) conflict with %s (same address): pod not programmed", winners[w], w))
		}
	} else {
		for _, w := range ws {
			warnings = append(warnings, fmt.Sprintf("%d flow(s) conflict with %s (same table, priority and match): not programmed for %s", winners[w], w, fs.Key))
		}
	}
	return fs.Without(drop, warnings...)
}
