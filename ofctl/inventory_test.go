package ofctl

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

func TestScanCookies(t *testing.T) {
	dump := ` cookie=0x5c10000000000001, table=40, priority=100,ip,nw_dst=10.0.0.1 actions=group:1543503873
 cookie=0x5c10000000000001, priority=10,ip actions=resubmit(,40)
 cookie=0x1234, priority=1 actions=NORMAL
 priority=0 actions=NORMAL
 cookie=0x5C020000000000AB, table=ExServiceLB, priority=5,ct_label=0x1 actions=drop
`
	counts := map[flows.Cookie]int{}
	require.NoError(t, scanCookies(strings.NewReader(dump), counts))
	assert.Equal(t, map[flows.Cookie]int{0x5c10000000000001: 2, 0x5c020000000000ab: 1}, counts)
	require.Error(t, scanCookies(strings.NewReader(" cookie=0x, x\n"), counts))
	require.Error(t, scanCookies(strings.NewReader(" cookie=0x11112222333344445, x\n"), counts))
}

func TestScanGroups(t *testing.T) {
	dump := `OFPST_GROUP_DESC reply (OF1.5) (xid=0x2):
 group_id=1543503873,type=select,selection_method=hash,fields=ip_src,bucket=bucket_id:0,weight:100,actions=output:1
 group_id=7,type=select,bucket=bucket_id:0,actions=output:1
 group_id=1543503874
`
	ids := map[uint32]bool{}
	require.NoError(t, scanGroups(strings.NewReader(dump), ids))
	assert.Equal(t, map[uint32]bool{1543503873: true, 1543503874: true}, ids)
	require.Error(t, scanGroups(strings.NewReader(" group_id=x,type=all\n"), ids))
}

// syntheticDump is a dump-flows --no-stats output of n owned flows over n/10 cookies, with
// realistic line lengths.
func syntheticDump(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		c := flows.NewCookie(flows.KindServicePort, uint64(i/10))
		fmt.Fprintf(&b, " cookie=%#x, table=41, priority=200,ct_state=+new+trk,tcp,reg0=0x1/0x1,nw_dst=10.96.%d.%d,tp_dst=%d actions=group:%d\n",
			uint64(c), i/256%256, i%256, 1000+i%60000, flows.GroupIDBase+uint32(i))
	}
	return b.Bytes()
}

func TestScanCookiesSynthetic(t *testing.T) {
	counts := map[flows.Cookie]int{}
	require.NoError(t, scanCookies(bytes.NewReader(syntheticDump(1000)), counts))
	assert.Len(t, counts, 100)
	for _, n := range counts {
		assert.Equal(t, 10, n)
	}
}

// BenchmarkScanCookies100k scans a synthetic 100k-flow dump (~13 MB), the size whose
// dump-flows takes ~0.6 s in ovs-vswitchd; the scan must be a small fraction of that.
func BenchmarkScanCookies100k(b *testing.B) {
	dump := syntheticDump(100_000)
	b.SetBytes(int64(len(dump)))
	b.ReportAllocs()
	for b.Loop() {
		counts := make(map[flows.Cookie]int)
		if err := scanCookies(bytes.NewReader(dump), counts); err != nil {
			b.Fatal(err)
		}
		if len(counts) != 10_000 {
			b.Fatalf("got %d cookies", len(counts))
		}
	}
}

func TestScanGroupStats(t *testing.T) {
	dump := `OFPST_GROUP reply (OF1.5) (xid=0x6):
 group_id=1543503873,duration=1.0s,ref_count=1,packet_count=0,byte_count=0,bucket0:packet_count=0,byte_count=0,bucket1:packet_count=0,byte_count=0
 group_id=7,duration=1.0s,ref_count=0,packet_count=0,byte_count=0,bucket0:packet_count=0,byte_count=0
 group_id=1543503874,duration=1.0s,ref_count=0,packet_count=0,byte_count=0
`
	ids, buckets := map[uint32]bool{}, map[uint32]int{}
	require.NoError(t, scanGroupStats(strings.NewReader(dump), ids, buckets))
	assert.Equal(t, map[uint32]bool{1543503873: true, 1543503874: true}, ids)
	assert.Equal(t, map[uint32]int{1543503873: 2, 1543503874: 0}, buckets)
}
