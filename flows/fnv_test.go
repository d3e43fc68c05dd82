package flows

import (
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// fnv64a gives hash/fnv's New64a sums (the cookies of every applied flow set depend on it),
// through Write and WriteString mixed, empty writes and every byte value included.
func TestFNV64aMatchesHashFNV(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 500 {
		want, got := fnv.New64a(), newFNV64a()
		require.Equal(t, want.Sum64(), got.Sum64())
		for range r.IntN(6) {
			b := make([]byte, r.IntN(300))
			for i := range b {
				b[i] = byte(r.IntN(256))
			}
			want.Write(b)
			if r.IntN(2) == 0 {
				got.Write(b)
			} else {
				got.WriteString(string(b))
			}
		}
		require.Equal(t, want.Sum64(), got.Sum64())
	}
}

// The group ids and bucket ids (installed in OVS, and bucket ids pick each connection's
// endpoint) are hash/fnv's 32-bit FNV-1a of the key's text and of the endpoint's bytes, as
// before they were computed without hash/fnv.
func TestGroupAndBucketIDsMatchHashFNV(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	long := string(make([]byte, 200)) // a key longer than GroupIDs' stack buffer
	for i := range 300 {
		k := Key{Kind: KindServicePort, Namespace: "ns" + string(rune('a'+i%26)), Name: "svc" + string(rune('a'+r.IntN(26))), Port: "http", Protocol: TCP}
		if i%50 == 0 {
			k.Name += long
		}
		h := fnv.New32a()
		h.Write([]byte(k.String()))
		want := GroupIDBase | h.Sum32()&0xffffff
		if got := NewGroupIDs().ID(k); h.Sum32()&0xffffff != 0 {
			require.Equal(t, want, got, "%s", k)
		}
		a := [4]byte{10, byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))}
		ep := netip.AddrPortFrom(netip.AddrFrom4(a), uint16(r.IntN(65536)))
		hb := fnv.New32a()
		hb.Write(a[:])
		hb.Write([]byte{byte(ep.Port() >> 8), byte(ep.Port())})
		require.Equal(t, hb.Sum32()%(MaxBucketID+1), bucketHash(ep))
	}
}
