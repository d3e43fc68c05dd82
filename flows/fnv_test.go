package flows

import (
	"hash/fnv"
	"math/rand/v2"
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
