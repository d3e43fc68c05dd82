package flows

import (
	"net/netip"
	"slices"
)

// MaxBucketID is the largest bucket id OpenFlow 1.5 allows (OFPG15_BUCKET_MAX); larger values
// name "first", "last" and "all".
const MaxBucketID uint32 = 0xffffff00

// bucketHash is the preferred bucket id of endpoint ep: FNV-1a over its address bytes (4 for
// IPv4, 16 for IPv6) and its big-endian port, reduced to 0..MaxBucketID.
func bucketHash(ep netip.AddrPort) uint32 {
	h := uint32(2166136261) // hash/fnv's 32-bit FNV-1a, without its allocations
	if ep.Addr().Is4() {
		a := ep.Addr().As4()
		for _, c := range [6]byte{a[0], a[1], a[2], a[3], byte(ep.Port() >> 8), byte(ep.Port())} {
			h ^= uint32(c)
			h *= 16777619
		}
		return h % (MaxBucketID + 1)
	}
	a := ep.Addr().As16()
	for _, c := range append(a[:], byte(ep.Port()>>8), byte(ep.Port())) {
		h ^= uint32(c)
		h *= 16777619
	}
	return h % (MaxBucketID + 1)
}

// BucketIDs returns the bucket id of each endpoint of eps (one family, no duplicates): its bucketHash,
// or on a collision the next free id, the endpoints taken in address order so that the result
// depends only on the set. OVS's selection_method=hash scores every bucket by a hash of the
// packet's fields and the bucket id and takes the highest score (highest random weight; ofproto/
// trace prints the scores), so an endpoint keeps its id, and the connections it is chosen for,
// while others come and go; only the rare endpoint that collided can move when the endpoint it
// collided with goes.
func BucketIDs(eps []netip.AddrPort) map[netip.AddrPort]uint32 {
	list := bucketIDs(slices.Clone(eps))
	out := make(map[netip.AddrPort]uint32, len(list))
	for _, b := range list {
		out[b.ep] = b.id
	}
	return out
}

// bucketID is one endpoint with its bucket id.
type bucketID struct {
	ep netip.AddrPort
	id uint32
}

// bucketIDs is BucketIDs as a list: each distinct endpoint once, in address order. It sorts
// and compacts eps in place.
func bucketIDs(eps []netip.AddrPort) []bucketID {
	sorted := eps
	slices.SortFunc(sorted, func(a, b netip.AddrPort) int { return a.Compare(b) })
	sorted = slices.Compact(sorted)
	out := make([]bucketID, 0, len(sorted))
	// The ids taken so far: a list for the groups of a few endpoints (most), a map for more.
	var used map[uint32]bool
	if len(sorted) > 32 {
		used = make(map[uint32]bool, len(sorted))
	}
	taken := func(id uint32) bool {
		if used != nil {
			return used[id]
		}
		for _, b := range out {
			if b.id == id {
				return true
			}
		}
		return false
	}
	for _, ep := range sorted {
		id := bucketHash(ep)
		for taken(id) {
			if id == MaxBucketID {
				id = 0
			} else {
				id++
			}
		}
		if used != nil {
			used[id] = true
		}
		out = append(out, bucketID{ep, id})
	}
	return out
}
