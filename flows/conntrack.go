package flows

import "net/netip"

// ConntrackFilter selects conntrack entries to flush: the entries of Zone with protocol Protocol
// whose reply tuple has source ReplySrc (the endpoint a DNAT sent the connection to) and, when
// OrigDst is valid, whose original destination is OrigDst (the entry point the client dialed).
// The agent builds it (agent.Conntrack); ofctl turns it into a dpctl/flush-conntrack call.
type ConntrackFilter struct {
	// Zone is the conntrack zone, e.g. ZoneService.
	Zone uint16
	// Protocol is the entries' transport protocol, TCP or UDP.
	Protocol Protocol
	// ReplySrc is the source address and port of the entries' reply tuple. Required.
	ReplySrc netip.AddrPort
	// OrigDst restricts the flush to entries with this original destination; the zero value
	// matches any.
	OrigDst netip.AddrPort
}
