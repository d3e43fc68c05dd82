package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// dumpGroupsLimit is the largest group whose description srcipctl asks OVS for: OVS 3.1 cannot
// put a group of more than about 744 Service buckets into one dump-groups reply (and aborts
// with about 2,000; README "Debugging").
const dumpGroupsLimit = 700

func groupsCommand(out io.Writer) *cobra.Command {
	var runDir, bridge, agentAddr string
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "The agent's select groups of one bridge with their counters per endpoint (dump-group-stats by bucket position, mapped through dump-groups to bucket ids and endpoints)",
		Long: `Reads dump-group-stats (the counters of every bucket, by position) and, per group of the agent,
dump-groups BRIDGE ID (the bucket ids in the same order and each bucket's NAT destination), and
prints per group its Service port and per bucket the endpoint ip:port, its pod and node (from the
node's agent) and its packets and bytes: the first packet of each new connection the group sent
to that endpoint. A group of more than 700 buckets is printed by position only (dump-groups
cannot print it on OVS 3.1).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := parseBridge(bridge)
			if err != nil {
				return err
			}
			of := ofctl.NewOpenFlow(bridge, ofctl.MgmtTarget(runDir, bridge))
			stats, err := of.GroupStats(cmd.Context())
			if err != nil {
				return err
			}
			buckets := map[uint32][]ofctl.GroupBucket{}
			for _, g := range stats {
				if !flows.OwnedGroup(g.ID) || len(g.Buckets) > dumpGroupsLimit {
					continue
				}
				if buckets[g.ID], err = of.GroupBuckets(cmd.Context(), g.ID); err != nil {
					return err
				}
			}
			n := optionalNames(cmd.Context(), cmd.ErrOrStderr(), agentAddr, runDir)
			writeGroups(out, b, stats, buckets, n)
			return nil
		},
	}
	runDirFlag(cmd, &runDir, "holds <bridge>.mgmt and the agent's srcip-agent.sock")
	agentFlag(cmd.Flags(), &agentAddr)
	cmd.Flags().StringVar(&bridge, "bridge", "br-ex", "bridge (br-ex or br-int)")
	return cmd
}

// writeGroups prints the agent's groups of stats (flows.OwnedGroup; by id), each with its
// Service port and one line per bucket: bucket id, endpoint, pod, node, packets, bytes. buckets
// are the groups' bucket lists in order (dump-groups); a group without one is printed by
// position. n (nil: no agent) names groups and endpoints.
func writeGroups(out io.Writer, b flows.Bridge, stats []ofctl.GroupStats, buckets map[uint32][]ofctl.GroupBucket, n *names) {
	stats = slices.Clone(stats)
	slices.SortFunc(stats, func(x, y ofctl.GroupStats) int { return cmp.Compare(x.ID, y.ID) })
	shown := 0
	for _, g := range stats {
		if !flows.OwnedGroup(g.ID) {
			continue
		}
		shown++
		fmt.Fprintf(out, "%s group %d %s: %d packet(s) to the group\n", b, g.ID, n.group(g.ID), g.Packets)
		if len(g.Buckets) == 0 {
			fmt.Fprintln(out, "  no bucket: new connections go to the host, where kube-proxy rejects them (no-endpoints)")
			continue
		}
		bs, ok := buckets[g.ID]
		rows := [][]string{{"  BUCKET", "ENDPOINT", "POD", "NODE", "PACKETS", "BYTES"}}
		if !ok || len(bs) != len(g.Buckets) {
			fmt.Fprintf(out, "  (buckets by position: the group's description was not read; more than %d buckets or changed meanwhile)\n", dumpGroupsLimit)
		}
		for i, c := range g.Buckets {
			bucket, addr, pod, node := fmt.Sprintf("  #%d", i), "?", "-", "-"
			if ok && len(bs) == len(g.Buckets) {
				bucket = fmt.Sprintf("  %d", bs[i].ID)
				addr = orDash(bs[i].NATDst)
				if e, known := n.bucketEndpoint(g.ID, bs[i].ID); known {
					addr, pod, node = e.Addr, orDash(e.Pod), orDash(e.Node)
				}
			}
			rows = append(rows, []string{bucket, addr, pod, node, fmt.Sprint(c.Packets), fmt.Sprint(c.Bytes)})
		}
		writeTable(out, rows, 0)
	}
	if shown == 0 {
		fmt.Fprintf(out, "%s: no group of the agent\n", b)
	}
}
