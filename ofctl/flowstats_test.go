package ofctl

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

func TestScanFlowStats(t *testing.T) {
	dump := ` cookie=0x5c01000000000001, duration=3.1s, n_packets=7, n_bytes=420, idle_age=1, priority=600,udp,in_port=1,nw_dst=192.0.2.11,tp_dst=6081 actions=drop
 cookie=0x5c10000000000002, duration=3.1s, table=41, n_packets=2, n_bytes=148, priority=100,ct_state=+new+trk,tcp,nw_dst=203.0.113.100,tp_dst=80 actions=group:1543503872
 cookie=0x1234, duration=1s, table=3, n_packets=1, n_bytes=1, priority=1 actions=NORMAL
NXST_FLOW reply (xid=0x4):
`
	got, err := scanFlowStats(strings.NewReader(dump))
	require.NoError(t, err)
	assert.Equal(t, []flows.FlowStat{
		{Cookie: 0x5c01000000000001, Table: 0, Priority: 600, Packets: 7, Bytes: 420},
		{Cookie: 0x5c10000000000002, Table: 41, Priority: 100, Packets: 2, Bytes: 148, ToGroup: true},
	}, got)
}
