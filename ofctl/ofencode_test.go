package ofctl

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	of13 "github.com/contiv/libOpenflow/openflow13"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A bundle large enough to be encoded on several goroutines gives the same messages, in order,
// as one encoded line by line, and an untranslatable line is named: the first one of the bundle.
func TestTranslateParallel(t *testing.T) {
	var lines []string
	for i := range 3 * parallelTranslateMin {
		lines = append(lines, fmt.Sprintf("flow add cookie=0x%x,table=10,priority=100,ip,nw_dst=10.96.%d.%d,actions=ct(table=20,zone=1,nat)", 0x1000+i, i/256, i%256))
		lines = append(lines, fmt.Sprintf("group add_or_mod group_id=%d,type=select,selection_method=hash,bucket=bucket_id:0,weight:1,actions=ct(commit,table=30,zone=1,nat(dst=10.244.1.%d:8080))", i+1, i%250+1))
	}
	par, err := translate(lines)
	require.NoError(t, err)
	defer func(n int) { parallelTranslateMin = n }(parallelTranslateMin)
	parallelTranslateMin = 1 << 30
	ser, err := translate(lines)
	require.NoError(t, err)
	require.Len(t, par, len(lines))
	for i := range ser {
		assert.Equal(t, ser[i], par[i], "message %d", i)
	}

	parallelTranslateMin = 1
	bad := append([]string(nil), lines...)
	bad[len(bad)-10] = "flow add table=10,frobnicate=1,actions=drop"
	bad[len(bad)/2+3] = "flow add table=10,wibble=1,actions=drop"
	_, err = translate(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "wibble", "the first untranslatable line is named")
}

// appendBundleAdd writes the same bytes as libOpenflow's BundleAdd around a message.
func TestAppendBundleAdd(t *testing.T) {
	body := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}
	inner := message(ofpt15GroupMod, 77, body)
	add := of13.BundleAdd{BundleID: 9, Flags: bundleAtomicOrdered, Message: rawMessage(inner)}
	b, err := add.MarshalBinary()
	require.NoError(t, err)
	want := message(ofpt15BundleAdd, 77, b)
	assert.Equal(t, want, appendBundleAdd(nil, 77, 9, bundleAtomicOrdered, ofpt15GroupMod, body))
	assert.Equal(t, append([]byte{0xee}, want...), appendBundleAdd([]byte{0xee}, 77, 9, bundleAtomicOrdered, ofpt15GroupMod, body))
}

// A bucket whose actions go through a nat(dst=...) template encodes exactly as the parser
// encodes it, for many endpoints and several shapes; shapes the template does not cover (no
// port, two actions, a non-canonical address) still encode, through the parser.
func TestNATTemplate(t *testing.T) {
	parse := func(actions string) []byte {
		list, err := parseActions(splitTop(actions))
		require.NoError(t, err, actions)
		var b []byte
		for _, a := range list {
			ab, err := a.MarshalBinary()
			require.NoError(t, err)
			b = append(b, ab...)
		}
		return b
	}
	shapes := []string{
		"ct(commit,table=42,zone=64256,nat(dst=%s),exec(move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47]))",
		"ct(commit,table=30,zone=1,nat(dst=%s))",
		"ct(commit,zone=7,nat(dst=%s),exec(move:NXM_NX_REG0[]->NXM_NX_CT_LABEL[64..95],move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47]))",
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, shape := range shapes {
		for range 200 {
			ep := netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))}), uint16(r.IntN(65536)))
			actions := fmt.Sprintf(shape, ep)
			got, ok := appendNATActions([]byte{0xaa}, actions)
			require.True(t, ok, actions)
			assert.Equal(t, append([]byte{0xaa}, parse(actions)...), got, actions)
		}
	}
	for _, other := range []string{
		"ct(commit,table=30,zone=1,nat(dst=10.0.0.1))",
		"ct(commit,table=30,zone=1,nat(dst=010.0.0.1:80))",
		"ct(commit,table=30,zone=1,nat(src=10.0.0.1))",
		"output:1",
	} {
		got, ok := appendNATActions(nil, other)
		assert.False(t, ok, other)
		assert.Empty(t, got)
	}
}

// rawMessage is an OpenFlow message given by its encoded bytes (header included), for comparing
// appendBundleAdd with libOpenflow's BundleAdd.
type rawMessage []byte

func (m rawMessage) Len() uint16                       { return uint16(len(m)) }
func (m rawMessage) MarshalBinary() ([]byte, error)    { return m, nil }
func (m rawMessage) UnmarshalBinary(data []byte) error { return fmt.Errorf("not supported") }
