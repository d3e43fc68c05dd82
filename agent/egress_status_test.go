package agent

import (
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
)

func TestPolicyStatus(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &EgressPolicy{Name: "job", Generation: 3, obj: &egressv1.EgressGateway{}, IPs: []EgressIPState{
		{IP: netip.MustParseAddr("192.0.2.50"), Gateway: "node3", Eligible: []string{"node1", "node3"}},
		{IP: netip.MustParseAddr("192.0.2.12"), Refused: egressv1.ReasonNodeAddress, Message: "192.0.2.12 is an address of node node2"},
		{IP: netip.MustParseAddr("192.0.2.51"), Eligible: []string{"node1"}},
	}}
	st := PolicyStatus(p, at)
	if len(st.ActiveGateways) != 1 || st.ActiveGateways[0] != (egressv1.ActiveGateway{EgressIP: "192.0.2.50", Node: "node3"}) {
		t.Errorf("activeGateways %v", st.ActiveGateways)
	}
	r := meta.FindStatusCondition(st.Conditions, egressv1.ConditionReady)
	if r == nil || r.Status != metav1.ConditionFalse || r.Reason != egressv1.ReasonElecting || r.ObservedGeneration != 3 {
		t.Errorf("Ready %+v", r)
	}
	c := meta.FindStatusCondition(st.Conditions, egressv1.ConditionConflict)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != egressv1.ReasonNodeAddress {
		t.Errorf("Conflict %+v", c)
	}
	// An unchanged status keeps its transition time.
	p.obj.Status.Conditions = st.Conditions
	p.IPs[2].Gateway = "node1"
	st2 := PolicyStatus(p, at.Add(time.Hour))
	if c2 := meta.FindStatusCondition(st2.Conditions, egressv1.ConditionConflict); !c2.LastTransitionTime.Equal(&c.LastTransitionTime) {
		t.Errorf("Conflict transition time moved: %v", c2.LastTransitionTime)
	}
	if r2 := meta.FindStatusCondition(st2.Conditions, egressv1.ConditionReady); r2.Status != metav1.ConditionTrue || r2.Reason != egressv1.ReasonGatewaysActive {
		t.Errorf("Ready %+v", r2)
	}
}
