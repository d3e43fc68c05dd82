package ofctl

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The template gives the parser's bytes for edge endpoints (zero address and port, all ones,
// the sentinels themselves, addresses whose bytes look like a sentinel port) and for shapes
// whose fixed fields hold a sentinel's bytes (zone 4660 = 0x1234, zone 22136 = 0x5678).
func TestNATTemplateEdges(t *testing.T) {
	parse := func(actions string) ([]byte, bool) {
		list, err := parseActions(splitTop(actions))
		if err != nil {
			return nil, false
		}
		var b []byte
		for _, a := range list {
			ab, err := a.MarshalBinary()
			if err != nil {
				return nil, false
			}
			b = append(b, ab...)
		}
		return b, true
	}
	shapes := []string{
		"ct(commit,table=30,zone=4660,nat(dst=%s))",
		"ct(commit,table=30,zone=22136,nat(dst=%s))",
		"ct(commit,table=52,zone=13330,nat(dst=%s),exec(move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47]))",
		"ct(nat(dst=%s),commit,zone=1)",
		"ct(commit,zone=1,nat(dst=%s),exec(move:NXM_NX_REG0[]->NXM_NX_CT_LABEL[64..95]))",
	}
	eps := []string{"0.0.0.0:0", "255.255.255.255:65535", "1.2.3.4:4660", "5.6.7.8:22136", "18.52.86.120:4660",
		"86.120.18.52:22136", "1.2.3.4:22136", "5.6.7.8:4660", "10.244.1.7:0", "0.0.0.0:8080"}
	n := 0
	for _, shape := range shapes {
		for _, e := range eps {
			ep := netip.MustParseAddrPort(e)
			actions := fmt.Sprintf(shape, ep)
			want, pok := parse(actions)
			got, tok := appendNATActions(nil, actions)
			if !tok {
				continue
			}
			n++
			assert.True(t, pok, "template encodes what the parser refuses: %s", actions)
			assert.Equal(t, want, got, actions)
		}
	}
	t.Logf("%d of %d templated", n, len(shapes)*len(eps))
	assert.Positive(t, n)
}
