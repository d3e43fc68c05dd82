package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	egressclient "github.com/ovs-srcip/ovs-srcip/client/clientset/versioned"
)

// Field managers of the EgressGateway status (server-side apply on the status subresource).
const (
	// StatusManagerGateways owns status.activeGateways and status.conditions; only the policy's
	// EgressPolicy.StatusWriter applies them, so one manager name is shared by the nodes.
	StatusManagerGateways = "srcip-agent-gateways"
	// StatusManagerNodePrefix + node name owns that node's status.nodes entry.
	StatusManagerNodePrefix = "srcip-agent-node-"
	// StatusManagerPortBlocks is the field manager of the status writer's updates of
	// status.portBlocks (an update, not an apply: it must fail on a concurrent change).
	StatusManagerPortBlocks = "srcip-agent-portblocks"
)

// statusRewrite is how long the writer trusts that an applied status reached its informer
// before it applies the same content again.
const statusRewrite = 10 * time.Second

// EgressStatusWriter writes what this node's agent knows into the EgressGateway status
// subresource, by server-side apply (JSON apply patches through the generated clientset):
// every node its own status.nodes entry (observedGeneration: the generation whose flows the
// last successful sync applied; declined: the egress IPs it declines to serve, NodeDeclines); the policy's StatusWriter node the activeGateways (from the
// Lease holders) and the Ready and Conflict conditions with their reasons (egressv1.Reason*).
// Writes run on Run's goroutine, never on the sync goroutine; a failed write is logged and
// retried at the next Publish.
type EgressStatusWriter struct {
	client egressclient.Interface
	node   string

	mu      sync.Mutex
	pending []*EgressPolicy
	kick    chan struct{}
	written map[string]writtenStatus // manager/policy -> last body
	clock   func() time.Time         // nil: time.Now
}

type writtenStatus struct {
	body string
	at   time.Time
}

var _ EgressStatusSink = (*EgressStatusWriter)(nil)

// NewEgressStatusWriter returns the writer of node through c; call Run.
func NewEgressStatusWriter(c egressclient.Interface, node string) *EgressStatusWriter {
	return &EgressStatusWriter{client: c, node: node, kick: make(chan struct{}, 1), written: map[string]writtenStatus{}}
}

// Publish implements EgressStatusSink (the latest policies replace any not yet written).
func (w *EgressStatusWriter) Publish(policies []*EgressPolicy) {
	w.mu.Lock()
	w.pending = policies
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Run writes published policies until ctx is done.
func (w *EgressStatusWriter) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		w.mu.Lock()
		pols := w.pending
		w.pending = nil
		w.mu.Unlock()
		for _, p := range pols {
			if err := w.write(ctx, p); err != nil {
				klog.FromContext(ctx).Error(err, "EgressGateway status not written", "egressGateway", p.Name)
			}
		}
	}
}

func (w *EgressStatusWriter) write(ctx context.Context, p *EgressPolicy) error {
	if p.obj == nil {
		return nil
	}
	cur := p.obj.Status
	mine := egressv1.NodeStatus{Node: w.node, ObservedGeneration: p.Generation, Declined: NodeDeclines(p), Pods: p.LocalPods}
	if !slices.ContainsFunc(cur.Nodes, func(n egressv1.NodeStatus) bool {
		return n.Node == mine.Node && n.ObservedGeneration == mine.ObservedGeneration && slices.Equal(n.Declined, mine.Declined) &&
			slices.Equal(n.Pods, mine.Pods)
	}) {
		st := egressv1.EgressGatewayStatus{Nodes: []egressv1.NodeStatus{mine}}
		if err := w.apply(ctx, StatusManagerNodePrefix+w.node, p.Name, st); err != nil {
			return err
		}
	}
	if p.StatusWriter != w.node {
		return nil
	}
	now := w.now()
	// A failed port-block update must not freeze the rest of the status: activeGateways and the
	// conditions are applied anyway, PortBlocksExhausted says the update failed (and why), and
	// the error is returned (Run logs it) and retried at the next Publish.
	blockErr := w.writePortBlocks(ctx, p, now)
	want := policyStatus(p, now, blockErr)
	if slices.Equal(want.ActiveGateways, cur.ActiveGateways) && conditionsEqual(want.Conditions, cur.Conditions) {
		return blockErr
	}
	if err := w.apply(ctx, StatusManagerGateways, p.Name, want); err != nil {
		return errors.Join(blockErr, err)
	}
	return blockErr
}

// NodeDeclines is this node's status.nodes[].declined of p: the egress IPs it declines to serve
// (EgressIPState.Declined), in spec order; nil for none.
func NodeDeclines(p *EgressPolicy) []egressv1.NodeDecline {
	var out []egressv1.NodeDecline
	for _, s := range p.IPs {
		if s.Declined != "" {
			out = append(out, egressv1.NodeDecline{EgressIP: s.IP.String(), Message: s.Declined})
		}
	}
	return out
}

// writePortBlocks allocates p's port blocks (AllocatePortBlocks) and, when they change, writes
// status.portBlocks by an update of the status subresource against the resourceVersion it read
// (field manager StatusManagerPortBlocks): a conflict (another writer, a node's entry) rereads
// the object and allocates again, so two writers (a failover in progress) never hand out one
// block twice. The first round works on the informer's copy; only a change costs a read.
func (w *EgressStatusWriter) writePortBlocks(ctx context.Context, p *EgressPolicy, now time.Time) error {
	obj := p.obj
	blocks, _ := AllocatePortBlocks(obj.Status.PortBlocks, portRequests(p), p.Pool, now)
	if portBlocksEqual(blocks, obj.Status.PortBlocks) {
		return nil
	}
	gws := w.client.OvsSrcipV1alpha1().EgressGateways()
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			fresh, err := gws.Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			q := *p
			q.obj = fresh
			blocks, _ = AllocatePortBlocks(fresh.Status.PortBlocks, portRequests(&q), p.Pool, now)
			if portBlocksEqual(blocks, fresh.Status.PortBlocks) {
				return nil
			}
			obj = fresh
		}
		first = false
		c := obj.DeepCopy()
		c.Status.PortBlocks = blocks
		_, err := gws.UpdateStatus(ctx, c, metav1.UpdateOptions{FieldManager: StatusManagerPortBlocks})
		return err
	})
	if err != nil {
		return fmt.Errorf("update status.portBlocks: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Updated EgressGateway port blocks", "egressGateway", p.Name, "blocks", len(blocks))
	return nil
}

func (w *EgressStatusWriter) now() time.Time {
	if w.clock != nil {
		return w.clock()
	}
	return time.Now()
}

// apply sends one apply patch of st to the status subresource of policy name as manager,
// unless the same body was applied less than statusRewrite ago.
func (w *EgressStatusWriter) apply(ctx context.Context, manager, name string, st egressv1.EgressGatewayStatus) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion": egressv1.SchemeGroupVersion.String(),
		"kind":       "EgressGateway",
		"metadata":   map[string]any{"name": name},
		"status":     st,
	})
	if err != nil {
		return err
	}
	key := manager + "/" + name
	w.mu.Lock()
	last := w.written[key]
	w.mu.Unlock()
	if last.body == string(body) && time.Since(last.at) < statusRewrite {
		return nil
	}
	force := true
	_, err = w.client.OvsSrcipV1alpha1().EgressGateways().Patch(ctx, name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: manager, Force: &force}, "status")
	if err != nil {
		return fmt.Errorf("apply status (%s): %w", manager, err)
	}
	w.mu.Lock()
	w.written[key] = writtenStatus{body: string(body), at: time.Now()}
	w.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Applied EgressGateway status", "egressGateway", name, "manager", manager)
	return nil
}

// PolicyStatus is the activeGateways and conditions of p as converted (now is the transition
// time of a condition whose status changes; unchanged ones keep theirs from p's object):
//   - Ready True GatewaysActive when every programmed egress IP has a gateway; else False with
//     InvalidSpec (the spec cannot be used), NoEligibleNode (an IP has no Ready node matching
//     gatewayNodeSelector), Electing (eligible nodes, no Lease holder yet), or the refusal
//     reason when no egress IP is usable;
//   - Conflict True with the first refused IP's reason (every refusal in the message), else
//     False NoConflict.
//   - PortBlocksExhausted True when the allocation leaves a pod waiting, with reason
//     PoolExhausted (its egress IP's pool is full) or ListFull (status.portBlocks holds
//     egressv1.MaxPortBlocks entries) and a message that says how many wait and what to do;
//     else False BlocksAllocated.
func PolicyStatus(p *EgressPolicy, now time.Time) egressv1.EgressGatewayStatus {
	return policyStatus(p, now, nil)
}

// maxConditionError is the most of an error's text a condition message carries.
const maxConditionError = 1024

// policyStatus is PolicyStatus with the status writer's last status.portBlocks update error
// (nil: none): PortBlocksExhausted then carries it (Unknown WriteFailed, or the exhaustion
// message followed by it), never silently.
func policyStatus(p *EgressPolicy, now time.Time, blockErr error) egressv1.EgressGatewayStatus {
	var st egressv1.EgressGatewayStatus
	var refused, noGW []string
	refReason, readyReason := "", egressv1.ReasonGatewaysActive
	usable := 0
	for _, s := range p.IPs {
		switch {
		case s.Refused != "":
			if refReason == "" {
				refReason = s.Refused
			}
			refused = append(refused, s.Message)
		case p.Invalid != "":
		case s.Gateway != "":
			usable++
			st.ActiveGateways = append(st.ActiveGateways, egressv1.ActiveGateway{EgressIP: s.IP.String(), Node: s.Gateway})
		default:
			usable++
			if len(s.Eligible) == 0 {
				readyReason = egressv1.ReasonNoEligibleNode
				msg := s.IP.String() + ": no Ready node matches gatewayNodeSelector"
				if s.IP.Is6() {
					msg = s.IP.String() + ": no Ready node with an IPv6 pod CIDR matches gatewayNodeSelector"
				}
				if len(s.OtherUnderlay) > 0 {
					msg += " (" + strings.Join(s.OtherUnderlay, ",") + " matched but have no " + s.Underlay.String() +
						" underlay address: the egress path runs over the " + s.Underlay.String() +
						" underlay of the other nodes, and a node tunnels only to nodes of its own underlay family)"
				}
				noGW = append(noGW, msg)
			} else {
				if readyReason != egressv1.ReasonNoEligibleNode {
					readyReason = egressv1.ReasonElecting
				}
				noGW = append(noGW, s.IP.String()+": no Lease holder yet among "+strings.Join(s.Eligible, ","))
			}
		}
	}
	ready := metav1.Condition{Type: egressv1.ConditionReady, Status: metav1.ConditionTrue, Reason: readyReason,
		Message: "every egress IP has an active gateway", ObservedGeneration: p.Generation}
	switch {
	case p.Invalid != "":
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, egressv1.ReasonInvalidSpec, p.Invalid
	case usable == 0 && refReason != "":
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, refReason, "no usable egress IP"
	case len(noGW) > 0:
		ready.Status, ready.Message = metav1.ConditionFalse, strings.Join(noGW, "; ")
	}
	if fam := familySummary(p); fam != "" {
		ready.Message += " (" + fam + ")"
	}
	conflict := metav1.Condition{Type: egressv1.ConditionConflict, Status: metav1.ConditionFalse,
		Reason: egressv1.ReasonNoConflict, Message: "no egress IP is refused", ObservedGeneration: p.Generation}
	if refReason != "" {
		conflict.Status, conflict.Reason, conflict.Message = metav1.ConditionTrue, refReason, strings.Join(refused, "; ")
	}
	ports := metav1.Condition{Type: egressv1.ConditionPortBlocksExhausted, Status: metav1.ConditionFalse,
		Reason: egressv1.ReasonBlocksAllocated, Message: "every selected pod has its source-port block", ObservedGeneration: p.Generation}
	if blocks, waiting := AllocatePortBlocks(p.obj.Status.PortBlocks, portRequests(p), p.Pool, now); len(waiting) > 0 {
		ports.Status, ports.Reason, ports.Message = metav1.ConditionTrue, egressv1.ReasonPoolExhausted, exhaustedMessage(p, blocks, waiting)
		if portBlocksListFull(blocks) {
			ports.Reason = egressv1.ReasonPortBlocksListFull
		}
	}
	if blockErr != nil {
		e := blockErr.Error()
		if len(e) > maxConditionError {
			e = e[:maxConditionError] + "..."
		}
		msg := "status.portBlocks not written (retried at the next sync): " + e +
			"; pods whose block is not in the status keep the egress path with their own source ports"
		if ports.Status == metav1.ConditionTrue {
			ports.Message += "; " + msg
		} else {
			ports.Status, ports.Reason, ports.Message = metav1.ConditionUnknown, egressv1.ReasonPortBlocksWriteFailed, msg
		}
	}
	conds := slices.Clone(p.obj.Status.Conditions)
	for _, c := range []metav1.Condition{ready, conflict, ports} {
		c.LastTransitionTime = metav1.NewTime(now)
		meta.SetStatusCondition(&conds, c) // keeps the transition time when the status is unchanged
	}
	slices.SortFunc(conds, func(a, b metav1.Condition) int { return strings.Compare(a.Type, b.Type) })
	st.Conditions = conds
	return st
}

// familySummary says per family what a policy with IPv6 egress IPs serves: "IPv4: 192.0.2.50
// on node3; IPv6: 2001:db8::50 on node3, 2001:db8::1 refused (NodeAddress)"; "" for a policy
// without IPv6 egress IPs (its messages are those of before IPv6).
func familySummary(p *EgressPolicy) string {
	var v4, v6 []string
	has6 := false
	for _, s := range p.IPs {
		var d string
		switch {
		case !s.IP.IsValid():
			continue
		case s.Refused != "":
			d = s.IP.String() + " refused (" + s.Refused + ")"
		case p.Invalid != "":
			d = s.IP.String() + " not served (invalid spec)"
		case s.Gateway != "":
			d = s.IP.String() + " on " + s.Gateway
		default:
			d = s.IP.String() + " without gateway"
		}
		if s.IP.Is6() && !s.IP.Is4In6() {
			has6 = true
			v6 = append(v6, d)
		} else {
			v4 = append(v4, d)
		}
	}
	if !has6 {
		return ""
	}
	out := "IPv6: " + strings.Join(v6, ", ")
	if len(v4) > 0 {
		out = "IPv4: " + strings.Join(v4, ", ") + "; " + out
	}
	return out
}

func conditionsEqual(a, b []metav1.Condition) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.Condition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message &&
			x.ObservedGeneration == y.ObservedGeneration
	})
}
