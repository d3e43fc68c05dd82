package flows

import "net/netip"

// ConntrackFilter selects conntrack entries to flush: the entries of Zone with protocol Protocol
// whose reply tuple has source ReplySrc (the endpoint a DNAT sent the connection to) and, when
// OrigDst is valid, whose original destination is OrigDst (the entry point the client dialed);
// or, with ReplyDst instead of ReplySrc, those whose reply tuple has destination ReplyDst (the
// egress IP a gateway's SNAT gave them). The agent builds it (agent.Conntrack); ofctl turns it
// into a dpctl/flush-conntrack call.
type ConntrackFilter struct {
	// Zone is the conntrack zone, e.g. ZoneService.
	Zone uint16
	// Protocol is the entries' transport protocol, TCP or UDP.
	Protocol Protocol
	// ReplySrc is the source address and port of the entries' reply tuple. Required unless
	// ReplyDst is set; never with it.
	ReplySrc netip.AddrPort
	// ReplyDst is the destination address of the entries' reply tuple, any port (e.g. an egress
	// IP in ZoneEgress). Used when ReplySrc is not set.
	ReplyDst netip.Addr
	// OrigDst restricts the flush to entries with this original destination; the zero value
	// matches any.
	OrigDst netip.AddrPort
}

// ZoneLimit is the limit of one conntrack zone and the entries it holds (ovs-vswitchd(8)
// "dpctl/ct-get-limits"). A zone at its limit refuses new connections: ct(commit) fails and the
// packet is not translated (and is dropped further on), so one zone cannot fill the datapath's
// table.
type ZoneLimit struct {
	// Limit is the maximum number of entries; 0: only the datapath's total bounds the zone.
	Limit int
	// Count is the number of entries the zone holds.
	Count int
}

// Zones are the conntrack zones the pipeline commits into, with their names (metrics, srcipctl).
func Zones() []struct {
	Zone uint16
	Name string
} {
	return []struct {
		Zone uint16
		Name string
	}{{ZoneService, "ZoneService"}, {ZonePod, "ZonePod"}, {ZoneService6, "ZoneService6"}}
}
