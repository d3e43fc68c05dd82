package ofctl

import (
	"context"
	"io"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// FlowStats returns the place (table, priority), cookie and counters of every flow of the bridge
// whose cookie has the agent's owner byte (`dump-flows --no-names TARGET
// cookie=0x5c00000000000000/0xff00000000000000`). Only the tokens cookie=, table=, n_packets=,
// n_bytes=, priority= and the start of actions= are read; table=0 and priority=32768, which
// ovs-ofctl leaves out, are the defaults. Errors: the ovs-ofctl failure (*Error).
func (o *OpenFlow) FlowStats(ctx context.Context) ([]flows.FlowStat, error) {
	var out []flows.FlowStat
	err := run(ctx, o.ofctl("--no-names", "dump-flows", o.Target, ownedCookieFilter), nil,
		func(r io.Reader) error {
			var err error
			out, err = scanFlowStats(r)
			return err
		})
	return out, err
}
