package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/ovs-srcip/ovs-srcip/version"
)

// versionCommand prints srcipctl's release and, when the node's agent answers on its status
// socket (or --agent), the agent's (its report's version; "unknown" from an agent older than
// that field). An agent that cannot be reached is a note, not an error.
func versionCommand(out io.Writer) *cobra.Command {
	var runDir, agentAddr string
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "srcipctl's release and the node agent's (from its status socket)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(out, "srcipctl:    %s\n", version.String())
			if clientOnly {
				return nil
			}
			rep, err := readReport(cmd, agentAddr, runDir)
			if err != nil {
				fmt.Fprintf(out, "srcip-agent: not reached: %v\n", err)
				return nil
			}
			v := rep.Version
			if v == "" {
				v = "unknown (an agent older than v0.1.0)"
			}
			fmt.Fprintf(out, "srcip-agent: %s (node %s)\n", v, rep.Node)
			return nil
		},
	}
	runDirFlag(cmd, &runDir, "holds the agent's srcip-agent.sock")
	agentFlag(cmd.Flags(), &agentAddr)
	cmd.Flags().BoolVar(&clientOnly, "client", false, "srcipctl's release only; do not ask the agent")
	return cmd
}
