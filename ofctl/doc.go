// Package ofctl is the only package of ovs-srcip that talks to Open vSwitch.
//
// It has two halves:
//
//   - DB talks to ovsdb-server through libovsdb (RFC 7047, schema ovs-vswitchd.conf.db(5)): it
//     creates the integration plumbing (br-int, the patch pair, the flow-based Geneve port),
//     names OpenFlow tables, lists pod ports and notifies about changes.
//   - OpenFlow talks to one bridge of ovs-vswitchd by running ovs-ofctl(8) and ovs-appctl(8):
//     atomic bundles of typed messages (package openflow, rendered as ovs-ofctl text), a
//     cookie/group inventory that never parses flows, dumps and traces. With its Native field
//     set (a Conn), bundles go instead over one persistent OpenFlow 1.5 connection per bridge,
//     as the messages' wire encoding (openflow.EncodeAll; this package only frames it); a bundle
//     with a message that does not encode (a group message over 64 KiB) still goes through
//     ovs-ofctl as text.
//
// The agent declares what it needs of a bridge and of conntrack as its own interfaces
// (agent.FlowBridge, agent.Conntrack); OpenFlow implements them, and so does the in-memory Fake
// of package ofctl/ofctltest. Package ofctl/ovstest starts private OVS daemons for tests.
//
// What ovs-ofctl and ofproto/trace print is read in one place each, for the agent, srcipctl and
// the tests alike: dump.go (DumpedFlow, DumpedGroup: dump-flows, dump-groups, dump-group-stats)
// and trace.go (Trace, TraceStep: ofproto/trace).
package ofctl
