package flows

import (
	"hash/fnv"
	"net/netip"
	"slices"
)

// MaxBucketID is the largest bucket id OpenFlow 1.5 allows (OFPG15_BUCKET_MAX); larger values
// name "first", "last" and "all".
const MaxBucketID uint32 = 0xffffff00

// bucketHash is the preferred bucket id of endpoint ep: FNV-1a over its 4 address bytes and its
// big-endian port, reduced to 0..MaxBucketID.
func bucketHash(ep netip.AddrPort) uint32 {
	h := fnv.New32a()
	a := ep.Addr().As4()
	h.Write(a[:])
	h.Write([]byte{byte(ep.Port() >> 8), byte(ep.Port())})
	return h.Sum32() % (MaxBucketID + 1)
}

// BucketIDs returns the bucket id of each endpoint of eps (IPv4, no duplicates): its bucketHash,
// or on a collision the next free id, the endpoints taken in address order so that the result
// depends only on the set. OVS's selection_method=hash scores every bucket by a hash of the
// packet's fields and the bucket id and takes the highest score (highest random weight; ofproto/
// trace prints the scores), so an endpoint keeps its id, and the connections it is chosen for,
// while others come and go; only the rare endpoint that collided can move when the endpoint it
// collided with goes.
func BucketIDs(eps []netip.AddrPort) map[netip.AddrPort]uint32 {
	sorted := slices.Clone(eps)
	slices.SortFunc(sorted, func(a, b netip.AddrPort) int { return a.Compare(b) })
	used := make(map[uint32]bool, len(sorted))
	out := make(map[netip.AddrPort]uint32, len(sorted))
	for _, ep := range sorted {
		if _, ok := out[ep]; ok {
			continue
		}
		id := bucketHash(ep)
		for used[id] {
			if id == MaxBucketID {
				id = 0
			} else {
				id++
			}
		}
		used[id] = true
		out[ep] = id
	}
	return out
}
