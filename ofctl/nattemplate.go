package ofctl

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"sync"
)

// A Service's select group has one bucket per endpoint, and its buckets differ only in the
// endpoint of their "ct(...,nat(dst=IP:PORT),...)" action. Encoding such a bucket's actions
// from the text is most of the encoder's work in a cold start, so the encoding of each shape
// (the action text with its nat(dst=...) taken out) is made once, by the encoder itself, and
// then copied with the endpoint patched in at the offsets where it lands. The offsets are found
// by encoding the shape with two different sentinel endpoints and comparing the bytes: every
// byte that differs must belong to the address or a port, or the shape gets no template and
// goes through the parser as before. TestNATTemplate checks the result against the parser.

var (
	natSentinel1, natSentinel2 = netip.MustParseAddrPort("1.2.3.4:4660"), netip.MustParseAddrPort("5.6.7.8:22136")
)

// natTemplate is the encoding of one shape of bucket actions with the endpoint's address
// (4 bytes) at ipAt and its port (2 bytes, big-endian) at portAt; ok is false for a shape that
// has none.
type natTemplate struct {
	enc          []byte
	ipAt, portAt []int
	ok           bool
}

// maxNATTemplates bounds the cache (the agent renders a handful of shapes; anything beyond is
// encoded by the parser).
const maxNATTemplates = 256

var natTemplates = struct {
	sync.RWMutex
	m map[string]*natTemplate
}{m: map[string]*natTemplate{}}

// appendNATActions appends the encoding of actions (one bucket's action list, a single
// "ct(...nat(dst=IPv4:PORT)...)" action) to dst through its shape's template; ok is false, and
// dst unchanged, for any other text or shape, which the caller encodes with parseActions.
func appendNATActions(dst []byte, actions string) ([]byte, bool) {
	if !strings.HasPrefix(actions, "ct(") {
		return dst, false
	}
	i := strings.Index(actions, "nat(dst=")
	if i < 0 {
		return dst, false
	}
	j := strings.IndexByte(actions[i:], ')')
	if j < 0 || strings.Contains(actions[i+j:], "nat(") {
		return dst, false
	}
	ep, err := netip.ParseAddrPort(actions[i+len("nat(dst=") : i+j])
	if err != nil || !ep.Addr().Is4() || ep.String() != actions[i+len("nat(dst="):i+j] {
		return dst, false // not the canonical text the parser would read the same way
	}
	prefix, suffix := actions[:i+len("nat(dst=")], actions[i+j:]
	key := prefix + "*" + suffix
	natTemplates.RLock()
	t := natTemplates.m[key]
	natTemplates.RUnlock()
	if t == nil {
		t = newNATTemplate(prefix, suffix)
		natTemplates.Lock()
		if len(natTemplates.m) < maxNATTemplates {
			natTemplates.m[key] = t
		}
		natTemplates.Unlock()
	}
	if !t.ok {
		return dst, false
	}
	start := len(dst)
	dst = append(dst, t.enc...)
	ip := ep.Addr().As4()
	for _, o := range t.ipAt {
		copy(dst[start+o:], ip[:])
	}
	for _, o := range t.portAt {
		binary.BigEndian.PutUint16(dst[start+o:], ep.Port())
	}
	return dst, true
}

// newNATTemplate encodes the shape prefix+ENDPOINT+suffix with both sentinels and finds the
// endpoint's offsets.
func newNATTemplate(prefix, suffix string) *natTemplate {
	enc := func(ep netip.AddrPort) []byte {
		list, err := parseActions(splitTop(prefix + ep.String() + suffix))
		if err != nil {
			return nil
		}
		var b []byte
		for _, a := range list {
			ab, err := a.MarshalBinary()
			if err != nil {
				return nil
			}
			b = append(b, ab...)
		}
		return b
	}
	b1, b2 := enc(natSentinel1), enc(natSentinel2)
	t := &natTemplate{enc: b1}
	if b1 == nil || b2 == nil || len(b1) != len(b2) {
		return t
	}
	ip1, ip2 := natSentinel1.Addr().As4(), natSentinel2.Addr().As4()
	p1, p2 := binary.BigEndian.AppendUint16(nil, natSentinel1.Port()), binary.BigEndian.AppendUint16(nil, natSentinel2.Port())
	covered := make([]bool, len(b1))
	for o := 0; o+4 <= len(b1); o++ {
		if bytes.Equal(b1[o:o+4], ip1[:]) && bytes.Equal(b2[o:o+4], ip2[:]) {
			t.ipAt = append(t.ipAt, o)
			for k := o; k < o+4; k++ {
				covered[k] = true
			}
		}
	}
	for o := 0; o+2 <= len(b1); o++ {
		if !covered[o] && !covered[o+1] && bytes.Equal(b1[o:o+2], p1) && bytes.Equal(b2[o:o+2], p2) {
			t.portAt = append(t.portAt, o)
			covered[o], covered[o+1] = true, true
		}
	}
	for o := range b1 {
		if b1[o] != b2[o] && !covered[o] {
			return t // a difference that is not the endpoint: no template
		}
	}
	t.ok = len(t.ipAt) > 0
	return t
}
