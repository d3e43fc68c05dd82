package flows

import (
	"fmt"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// KindServiceDrain: the drain of one entry point that went away while connections remain.

// BuildServiceDrain returns the drain flow set (KindServiceDrain) of one entry point of a Service
// port that went away: one ExServiceLB flow, below the live entry priority, that sends the entry
// point through ct(zone=ZoneService,nat) to ExServiceCT. There the generic +est/+rel/+new+dnat
// flows keep the established connections flowing to br-int; a new connection matches no entry
// flow of ExServiceCT and goes to the host (LOCAL). A live Service port on the same entry point
// wins by priority. An IPv6 entry point's flow matches tcp6 or udp6 and ipv6_dst, in
// ZoneService6.
func BuildServiceDrain(e EntryPoint) (*FlowSet, error) {
	fs := &FlowSet{Key: DrainKey(e), Bridge: BrEx, EntryPoints: []EntryPoint{e}}
	if !e.Addr.Addr().IsValid() || e.Addr.Port() == 0 {
		return nil, fmt.Errorf("drain %s: not an entry point with an address and a port", e)
	}
	fam := FamilyOf(e.Addr.Addr())
	proto, err := fam.protocol(e.Protocol)
	if err != nil {
		return nil, fmt.Errorf("drain %s: %w", e, err)
	}
	match := entryMatch(e)
	fs.Flows = []of.Flow{flow(ExServiceLB, prioDrain, proto, 0, match, CT{Zone: fam.ServiceZone(), NAT: &NAT{}, Table: uint8(ExServiceCT), HasTable: true})}
	return fs, fs.Finish()
}

func drainKeys(st *State) []Key {
	out := make([]Key, 0, len(st.Drains))
	for e := range st.Drains {
		out = append(out, DrainKey(e))
	}
	return out
}

func buildDrainKey(st *State, k Key) (*FlowSet, error) {
	e, ok := k.DrainEntryPoint()
	if !ok || !st.Drains[e] {
		return nil, nil
	}
	return BuildServiceDrain(e)
}
