package ofctl

import (
	"testing"

	of13 "github.com/contiv/libOpenflow/openflow13"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawMessage is an already framed message for libOpenflow's BundleAdd.
type rawMessage []byte

func (r rawMessage) Len() uint16                    { return uint16(len(r)) }
func (r rawMessage) MarshalBinary() ([]byte, error) { return r, nil }
func (r rawMessage) UnmarshalBinary([]byte) error   { return nil }

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
