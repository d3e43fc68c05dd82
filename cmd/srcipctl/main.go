// Command srcipctl is the ovs-srcip debugging CLI: it decodes cookies, lists the agent's flows
// with their kinds, renders the desired flows of a manifests directory and traces a new external
// connection through the pipeline (ofproto/trace).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

func main() {
	if err := newCommand(os.Stdout).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "srcipctl:", err)
		os.Exit(1)
	}
}

func newCommand(out io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "srcipctl",
		Short:         "Inspect what srcip-agent writes into Open vSwitch",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.AddCommand(cookieCommand(out), flowsCommand(out), desiredCommand(out), traceCommand(out))
	return root
}

func parseKind(s string) (flows.Kind, error) {
	if k, ok := flows.KindByName(s); ok {
		return k, nil
	}
	return 0, fmt.Errorf("unknown kind %q (one of %s)", s, strings.Join(flows.KindNames(), ", "))
}

// describeCookie renders owner, kind and fingerprint of c.
func describeCookie(c flows.Cookie) string {
	owner := "not ours"
	if c.Owned() {
		owner = "ovs-srcip"
	}
	return fmt.Sprintf("cookie=%s owner=%#02x (%s) kind=%#02x (%s) fingerprint=%#012x",
		c, uint64(c)>>56, owner, uint8(c.Kind()), c.Kind(), uint64(c)&(1<<48-1))
}

func cookieCommand(out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "cookie COOKIE...",
		Short: "Decode flow cookies (hex, as dump-flows prints them) into owner, kind and fingerprint",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			for _, a := range args {
				v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(a, "cookie="), "0x"), 16, 64)
				if err != nil {
					return fmt.Errorf("cookie %q: %w", a, err)
				}
				fmt.Fprintln(out, describeCookie(flows.Cookie(v)))
			}
			return nil
		},
	}
}

var cookieRE = regexp.MustCompile(`cookie=0x([0-9a-fA-F]+)`)

// annotate appends "# <kind>" to every dump-flows line that carries a cookie.
func annotate(dump string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(dump, "\n"), "\n") {
		b.WriteString(l)
		if m := cookieRE.FindStringSubmatch(l); m != nil {
			if v, err := strconv.ParseUint(m[1], 16, 64); err == nil {
				b.WriteString("  # " + flows.Cookie(v).Kind().String())
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func flowsCommand(out io.Writer) *cobra.Command {
	var runDir, bridge, kind string
	cmd := &cobra.Command{
		Use:   "flows",
		Short: "Dump the agent's flows of one bridge (dump-flows filtered by the owner byte), each annotated with its kind",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter := fmt.Sprintf("cookie=%#x/%#x", uint64(flows.NewCookie(0, 0)), uint64(flows.OwnerMask))
			if kind != "" {
				k, err := parseKind(kind)
				if err != nil {
					return err
				}
				filter = fmt.Sprintf("cookie=%#x/%#x", uint64(flows.NewCookie(k, 0)), uint64(flows.OwnerMask|0x00ff000000000000))
			}
			of := ofctl.NewOpenFlow(bridge, ofctl.MgmtTarget(runDir, bridge))
			dump, err := of.DumpFlows(cmd.Context(), filter)
			if err != nil {
				return err
			}
			fmt.Fprint(out, annotate(dump))
			return nil
		},
	}
	runDirFlag(cmd, &runDir, "holds <bridge>.mgmt")
	cmd.Flags().StringVar(&bridge, "bridge", "br-ex", "bridge to dump")
	cmd.Flags().StringVar(&kind, "kind", "", "only flows of this kind ("+strings.Join(flows.KindNames(), ", ")+")")
	return cmd
}

// runDirFlag adds --node-rundir: the node's OVS run directory, by default $OVS_RUNDIR (as the
// ovs-* tools use it), else ofctl.DefaultRunDir.
func runDirFlag(cmd *cobra.Command, runDir *string, holds string) {
	def := ofctl.DefaultRunDir
	if d := os.Getenv("OVS_RUNDIR"); d != "" {
		def = d
	}
	cmd.Flags().StringVar(runDir, "node-rundir", def, "the node's OVS run directory ("+holds+"); the default is $OVS_RUNDIR when it is set")
}

func desiredCommand(out io.Writer) *cobra.Command {
	var dir, node, bridge string
	var externalIPCIDRs []string
	cmd := &cobra.Command{
		Use:   "desired",
		Short: "Print the flows and groups the agent would write for a node of a manifests directory (placeholder ofports; OVS untouched)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || node == "" {
				return errors.New("--manifests and --node are required")
			}
			objs, err := agent.ReadManifestDir(dir)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			extCIDRs, err := agent.ParseCIDRs(externalIPCIDRs)
			if err != nil {
				return fmt.Errorf("--external-ip-cidrs: %w", err)
			}
			lines, err := agent.RenderDesired(ctx, node, objs, nil, extCIDRs, nil)
			if err != nil {
				return err
			}
			for _, b := range []flows.Bridge{flows.BrEx, flows.BrInt} {
				if bridge != "" && bridge != b.String() {
					continue
				}
				fmt.Fprintf(out, "# %s\n", b)
				for _, l := range lines[b] {
					fmt.Fprint(out, annotate(l))
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "manifests", "", "manifests directory (as srcip-agent --manifests)")
	cmd.Flags().StringVar(&node, "node", "", "node name")
	cmd.Flags().StringVar(&bridge, "bridge", "", "only this bridge (br-ex or br-int)")
	cmd.Flags().StringSliceVar(&externalIPCIDRs, "external-ip-cidrs", nil, "as srcip-agent --external-ip-cidrs: the ranges externalIPs may be served from (default none)")
	return cmd
}
