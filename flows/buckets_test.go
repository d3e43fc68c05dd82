package flows

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// manyEndpoints returns n endpoints spread over the pod CIDRs of node2 and node3 of testState.
func manyEndpoints(n int) []Endpoint {
	eps := make([]Endpoint, 0, n)
	for i := 0; i < n; i++ {
		node := 2 + i%2
		eps = append(eps, Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, byte(node), byte(1 + i/2%250)}),
			Port: uint16(8000 + i/500), NodeName: fmt.Sprintf("node%d", node)})
	}
	return eps
}

func addrPorts(eps []Endpoint) []netip.AddrPort {
	out := make([]netip.AddrPort, 0, len(eps))
	for _, e := range eps {
		out = append(out, netip.AddrPortFrom(e.IP, e.Port))
	}
	return out
}

// An endpoint's bucket id does not depend on the other endpoints or on their order.
func TestBucketIDsStable(t *testing.T) {
	eps := addrPorts(manyEndpoints(1000))
	all := BucketIDs(eps)
	require.Len(t, all, 1000)
	seen := map[uint32]bool{}
	for _, id := range all {
		assert.LessOrEqual(t, id, MaxBucketID)
		assert.False(t, seen[id], "duplicate id %d", id)
		seen[id] = true
	}
	// Remove one, reverse the order: every other endpoint keeps its id.
	rest := append([]netip.AddrPort{}, eps[1:]...)
	for i, j := 0, len(rest)-1; i < j; i, j = i+1, j-1 {
		rest[i], rest[j] = rest[j], rest[i]
	}
	for ep, id := range BucketIDs(rest) {
		assert.Equal(t, all[ep], id, "%s moved", ep)
	}
}

// Two endpoints with the same preferred id get distinct ids, the same whatever their order.
func TestBucketIDsCollision(t *testing.T) {
	// A collision of bucketHash, found by brute force over 10.244.x.y:port.
	a, b := netip.MustParseAddrPort("10.244.80.87:22272"), netip.MustParseAddrPort("10.244.2.118:30316")
	require.Equal(t, bucketHash(a), bucketHash(b))
	x, y := BucketIDs([]netip.AddrPort{a, b}), BucketIDs([]netip.AddrPort{b, a})
	assert.Equal(t, x, y)
	assert.NotEqual(t, x[a], x[b])
	first, second := a, b
	if b.Compare(a) < 0 {
		first, second = b, a
	}
	assert.Equal(t, bucketHash(first), x[first], "the first in address order keeps its hash")
	assert.Equal(t, (bucketHash(first)+1)%(MaxBucketID+1), x[second], "the second takes the next id")
}

// A group of 1,000 buckets is written as one add_or_mod of DefaultBucketsPerMessage buckets plus
// insert_bucket messages with the rest, in bucket-id order; the fingerprint covers every bucket.
func TestLargeGroupLines(t *testing.T) {
	sp := webTCP()
	sp.Endpoints = manyEndpoints(1000)
	st := testState(sp)
	sp = st.Services[sp.Key()]
	fs, err := BuildServicePort(st, &sp)
	require.NoError(t, err)
	require.Len(t, fs.Groups[0].Buckets, 1000)
	p := Plan{Bridge: BrEx, Add: []*FlowSet{fs}}
	var groups []string
	for _, l := range p.Lines() {
		if strings.HasPrefix(l, "group ") {
			groups = append(groups, l)
		}
	}
	require.Len(t, groups, 4) // 256 + 256 + 256 + 232
	gid := fmt.Sprint(fs.Groups[0].ID)
	assert.True(t, strings.HasPrefix(groups[0], "group add_or_mod group_id="+gid+",type=select,selection_method=hash,"), groups[0][:80])
	n := 0
	for i, g := range groups {
		if i > 0 {
			assert.True(t, strings.HasPrefix(g, "group insert_bucket group_id="+gid+",command_bucket_id=last,bucket=bucket_id:"), g[:80])
		}
		c := strings.Count(g, "bucket=bucket_id:")
		assert.Equal(t, min(DefaultBucketsPerMessage, 1000-n), c)
		n += c
	}
	assert.Equal(t, 1000, n)
	// The whole group is one line in the fingerprint.
	assert.Equal(t, 1000, strings.Count(fs.Groups[0].String(), "bucket="))

	// Repair sets are split the same way; a smaller BucketsPerMessage gives more messages.
	r := Plan{Bridge: BrEx, BucketsPerMessage: 100}
	r.RepairAll([]*FlowSet{fs})
	c := 0
	for _, l := range r.Lines() {
		if strings.HasPrefix(l, "group insert_bucket ") {
			c++
		}
	}
	assert.Equal(t, 9, c)
}

// Beyond MaxGroupBuckets the endpoints with the lowest bucket ids are kept, with a warning.
func TestGroupBucketCap(t *testing.T) {
	sp := webTCP()
	sp.Endpoints = manyEndpoints(MaxGroupBuckets + 10)
	st := testState(sp)
	sp = st.Services[sp.Key()]
	fs, err := BuildServicePort(st, &sp)
	require.NoError(t, err)
	require.Len(t, fs.Groups[0].Buckets, MaxGroupBuckets)
	bs := fs.Groups[0].Buckets
	for i := 1; i < len(bs); i++ {
		require.Less(t, bs[i-1].ID, bs[i].ID)
	}
	require.Len(t, fs.Warnings, 1)
	assert.Contains(t, fs.Warnings[0], "more than the 4000 a select group can hold")
}
