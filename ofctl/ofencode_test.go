package ofctl

import (
	"fmt"
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
