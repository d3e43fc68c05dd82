package flows

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every kind has one complete registry entry, and building through the registry key by key gives
// what Build gives.
func TestRegistry(t *testing.T) {
	kinds, names := map[Kind]bool{}, map[string]bool{}
	for _, s := range Kinds() {
		assert.False(t, kinds[s.Kind], "kind %#x twice", s.Kind)
		assert.False(t, names[s.Name], "name %q twice", s.Name)
		kinds[s.Kind], names[s.Name] = true, true
		assert.NotEmpty(t, s.Name)
		assert.NotEmpty(t, s.Doc)
		assert.Contains(t, []Bridge{BrEx, BrInt}, s.Bridge, s.Name)
		assert.NotZero(t, s.Triggers, s.Name)
		require.NotNil(t, s.Keys, s.Name)
		require.NotNil(t, s.Build, s.Name)
		k, ok := KindByName(s.Name)
		assert.True(t, ok)
		assert.Equal(t, s.Kind, k)
		assert.Equal(t, s.Name, s.Kind.String())
	}
	st := testState(webTCP(), webUDP())
	st.Drains[EntryPoint{Protocol: TCP, Addr: mustAddrPort("203.0.113.9:80")}] = true
	d, err := Build(st)
	require.NoError(t, err)
	for k, fs := range d {
		spec, ok := Spec(k.Kind)
		require.True(t, ok)
		assert.Equal(t, spec.Bridge, fs.Bridge, k.String())
		one, err := BuildKey(st, k)
		require.NoError(t, err)
		assert.Equal(t, fs.Cookie(), one.Cookie(), k.String())
	}
	assert.Len(t, d, 2+2+2+1+2+1+1, "2 base, 2 other nodes, 2 tunnel peers, 1 pod, 2 service ports, 1 drain, 1 UDP fragments address")
	gone, err := BuildKey(st, Key{Kind: KindPod, Namespace: "demo", Name: "nope"})
	require.NoError(t, err)
	assert.Nil(t, gone)
	_, err = BuildKey(st, Key{Kind: 0x7f})
	assert.Error(t, err)
}

// A mark holds only values its field can hold, and renders as its field.
func TestTypedFields(t *testing.T) {
	assert.Panics(t, func() { NewRegMark(RegSource, 0x10, "too big for reg0[0..3]") })
	assert.Panics(t, func() { NewCTMark(CTMarkOrigin, 0x10, "too big for ct_mark[0..3]") })
	assert.Panics(t, func() { NewRegField("bad", 16, 0, 3) })
	text := func(a interface{ AppendText([]byte) []byte }) string { return string(a.AppendText(nil)) }
	assert.Equal(t, "load:0x4->NXM_NX_REG0[0..3]", text(SourceTunnelSvc.Load()))
	assert.Equal(t, "reg0=0x4/0xf", text(SourceTunnelSvc.Match()))
	assert.Equal(t, "load:0x2->NXM_NX_CT_MARK[0..3]", text(OriginTunnel.Load()))
	assert.Equal(t, "ct_mark=0x00000002/0x0000000f", text(OriginTunnel.Match()))
	hi := NewRegField("hi", 3, 4, 7)
	m := text(NewRegMark(hi, 2, "").Match())
	assert.Equal(t, "reg3=0x20/0xf0", string(m), "values are shifted to the field's bits")
}
