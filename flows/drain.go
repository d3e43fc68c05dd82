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
// wins by priority.
func BuildServiceDrain(e EntryPoint) (*FlowSet, error) {
	fs := &FlowSet{Key: DrainKey(e), Bridge: BrEx, EntryPoints: []EntryPoint{e}}
	var proto of.Protocol
	switch e.Protocol {
	case TCP:
		proto = of.ProtoTCP
	case UDP:
		proto = of.ProtoUDP
	default:
		return nil, fmt.Errorf("drain %s: protocol %q not supported", e, e.Protocol)
	}
	if !e.Addr.Addr().Is4() || e.Addr.Port() == 0 {
		return nil, fmt.Errorf("drain %s: not an IPv4 entry point", e)
	}
	match := entryMatch(e)
	fs.Flows = []of.Flow{flow(ExServiceLB, prioDrain, proto, 0, match, CT{Zone: ZoneService, NAT: &NAT{}, Table: uint8(ExServiceCT), HasTable: true})}
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
