package agent

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	"github.com/ovs-srcip/ovs-srcip/flows"
)

// replyBlocksOf joins the egress IP's live blocks with the node that lists each block's pod:
// released blocks, blocks of another egress IP, blocks no node lists and blocks two nodes list
// are left out; the rest come sorted by port.
func TestReplyBlocksOf(t *testing.T) {
	ip := netip.MustParseAddr("192.0.2.50")
	released := metav1.Now()
	st := &egressv1.EgressGatewayStatus{
		Nodes: []egressv1.NodeStatus{
			{Node: "node1", Pods: []egressv1.PodPortRequest{
				{Pod: "demo/a", PodUID: "ua", EgressIP: "192.0.2.50"},
				{Pod: "demo/dup", PodUID: "ud", EgressIP: "192.0.2.50"},
				{Pod: "demo/other", PodUID: "uo", EgressIP: "192.0.2.51"},
			}},
			{Node: "node2", Pods: []egressv1.PodPortRequest{
				{Pod: "demo/b", PodUID: "ub", EgressIP: "192.0.2.50"},
				{Pod: "demo/dup", PodUID: "ud", EgressIP: "192.0.2.50"},
				{Pod: "demo/gone", PodUID: "ug", EgressIP: "192.0.2.50"},
			}},
		},
		PortBlocks: []egressv1.PortBlock{
			{EgressIP: "192.0.2.50", Pod: "demo/b", PodUID: "ub", First: 2048, Size: 512},
			{EgressIP: "192.0.2.50", Pod: "demo/a", PodUID: "ua", First: 1024, Size: 512},
			{EgressIP: "192.0.2.50", Pod: "demo/dup", PodUID: "ud", First: 1536, Size: 512},
			{EgressIP: "192.0.2.50", Pod: "demo/gone", PodUID: "ug", First: 2560, Size: 512, ReleasedAt: &released},
			{EgressIP: "192.0.2.51", Pod: "demo/other", PodUID: "uo", First: 1024, Size: 512},
			{EgressIP: "192.0.2.50", Pod: "demo/unlisted", PodUID: "ux", First: 3072, Size: 512},
		},
	}
	assert.Equal(t, []flows.EgressReplyBlock{
		{First: 1024, Size: 512, Node: "node1"},
		{First: 2048, Size: 512, Node: "node2"},
	}, replyBlocksOf(st, ip))
	assert.Empty(t, replyBlocksOf(st, netip.MustParseAddr("192.0.2.99")))
}
