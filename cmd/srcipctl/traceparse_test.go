package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// TestParseTrace parses real ofproto/trace outputs of the demo lab (OVS 3.1, userspace
// datapath): the client's SYN on node1 to an endpoint on node2, and the reply arriving back on
// node1.
func TestParseTrace(t *testing.T) {
	b, err := os.ReadFile("testdata/trace-remote.txt")
	require.NoError(t, err)
	r := parseTrace(string(b), defaultBridges)
	var path []string
	for _, h := range r.hits {
		path = append(path, h.bridge.String()+"/"+h.table.Name(h.bridge))
	}
	// The encapsulated packet's own trace through br-ex (NORMAL, flooded into the patch port) is
	// not the packet's path.
	assert.Equal(t, []string{"br-ex/ExClassifier", "br-ex/ExServiceLB", "br-ex/ExServiceCT", "br-ex/ExServiceOut",
		"br-int/IntClassifier", "br-int/IntL3Forwarding"}, path)
	ct := r.hits[2]
	assert.Equal(t, int64(4222283821), ct.bucket)
	assert.True(t, flows.OwnedGroup(ct.group))
	assert.Equal(t, flows.KindServicePort, ct.cookie.Kind())
	assert.Equal(t, "10.244.2.5:8080", r.natDst)
	assert.Equal(t, "192.0.2.12", r.tunDst)
	assert.Equal(t, "0x2", r.vni)
	assert.False(t, r.dropped())

	b, err = os.ReadFile("testdata/trace-reply.txt")
	require.NoError(t, err)
	r = parseTrace(string(b), defaultBridges)
	last, ok := r.lastHit()
	require.True(t, ok)
	// After the recirculation ofproto/trace names br-int; the table is br-ex's.
	assert.Equal(t, flows.BrEx, last.bridge)
	assert.Equal(t, flows.ExServiceReply, last.table)
}
