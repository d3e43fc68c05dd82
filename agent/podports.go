package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// podPortSource turns the Dataplane's pod-port signals (Dataplane.PodPortChanges) into one
// change per pod, as an informer does for API objects: it keeps the ports it last listed, by
// pod, and hands each pod whose ports differ to the Reconciler (OnPodPorts, a ChangeTracker).
// It is owned by the goroutine of Agent.Run.
type podPortSource struct {
	dp   Dataplane
	rec  *Reconciler
	last map[types.NamespacedName][]PodPort
}

// refresh lists the pod ports and reports the pods whose ports were added, changed or removed
// since the last refresh. Error: the listing's.
func (s *podPortSource) refresh(ctx context.Context) error {
	pps, err := s.dp.PodPorts(ctx)
	if err != nil {
		return fmt.Errorf("list pod ports: %w", err)
	}
	cur := groupPodPorts(pps)
	for name, ports := range cur {
		if prev, ok := s.last[name]; ok {
			s.rec.OnPodPorts(name, &prev, &ports)
		} else {
			s.rec.OnPodPorts(name, nil, &ports)
		}
	}
	for name, prev := range s.last {
		if _, ok := cur[name]; !ok {
			s.rec.OnPodPorts(name, &prev, nil)
		}
	}
	s.last = cur
	return nil
}

// groupPodPorts groups pod ports by pod, in their order.
func groupPodPorts(pps []PodPort) map[types.NamespacedName][]PodPort {
	out := make(map[types.NamespacedName][]PodPort, len(pps))
	for _, pp := range pps {
		name := nn(pp.Namespace, pp.Name)
		out[name] = append(out[name], pp)
	}
	return out
}

// OnPodPorts records that the OVSDB ports of pod name went from prev to cur (nil: none) and
// requests a sync: a partial one, of that pod's keys (every kind whose KindSpec.Object is
// "Pod"), unless a full one is due anyway.
func (r *Reconciler) OnPodPorts(name types.NamespacedName, prev, cur *[]PodPort) {
	if r.model.podPortChanges.Update(name, prev, cur) {
		r.changed()
	}
}

// podPortsEqual reports whether two listings of one pod's ports are the same change-wise: equal
// but for acknowledgements that arrived (PodPort.Acked going from one cookie, or none, to
// another). An acknowledgement is the echo of the agent's own write (ackPodFlows); a sync for
// it would write nothing and, 100 ms later at most (MinSyncInterval), hold back the next real
// change. A port that lost its acknowledgement (Acked back to 0: the CNI re-created it) is a
// change: its new port needs one.
func podPortsEqual(prev, cur *[]PodPort) bool {
	return slices.EqualFunc(*prev, *cur, func(x, y PodPort) bool {
		if y.Acked != 0 || x.Acked == 0 {
			y.Acked = x.Acked
		}
		return x.Equal(&y)
	})
}

// ackPodFlows tells srcip-cni which pods' flow sets are in br-int (PodFlowAcker), after a
// successful sync: the Interface of every pod whose applied flow set has flows (one that lost a
// conflict has none: AllOrNothing) and a cookie other than the acknowledgement its port carries
// (PodPort.Acked; a re-created port carries none) or this agent last wrote there (model.podAcked).
// The write's echo through OVSDB is no change (podPortsEqual). A failed write is logged and
// retried after the next sync (ofctl's AckPodFlows skips what OVSDB holds).
func (r *Reconciler) ackPodFlows(ctx context.Context) {
	acker, ok := r.cfg.Dataplane.(PodFlowAcker)
	if !ok {
		return
	}
	applied := r.syncer.applied[flows.BrInt]
	acked := r.model.podAcked
	live := make(map[string]bool, len(r.model.podPortOf))
	var todo map[string]flows.Cookie
	for k, pp := range r.model.podPortOf {
		live[pp.Interface] = true
		a, ok := applied[k]
		if !ok || r.syncer.appliedSize[flows.BrInt][k] == 0 || pp.Acked == a.Cookie || acked[pp.Interface] == a.Cookie {
			continue
		}
		if todo == nil {
			todo = map[string]flows.Cookie{}
		}
		todo[pp.Interface] = a.Cookie
	}
	for iface := range acked {
		if !live[iface] {
			delete(acked, iface)
		}
	}
	if len(todo) == 0 {
		return
	}
	if err := acker.AckPodFlows(ctx, todo); err != nil {
		klog.FromContext(ctx).Error(err, "Could not acknowledge pod flows in OVSDB; srcip-cni's ADD of these pods waits for the next sync", "interfaces", slices.Sorted(maps.Keys(todo)))
		return
	}
	maps.Copy(acked, todo)
}
