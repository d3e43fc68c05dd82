package nodesetup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"sigs.k8s.io/knftables"
)

const ipForwardPath = "/proc/sys/net/ipv4/ip_forward"

// nftObjects returns the chains and rules of table ip ovs-srcip: pod traffic to anything that
// is not a pod is masqueraded to the address of the interface it leaves by (the node IP), and
// the host forwards what enters or leaves through the gateway port. Every rule's comment ends in
// a hash of the whole table, so that a later run sees whether the table is still the one it
// would write.
func nftObjects(podCIDRs, clusterCIDRs []netip.Prefix, gwPort string) ([]*knftables.Chain, []*knftables.Rule) {
	set := func(ps []netip.Prefix) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.Masked().String())
		}
		return "{ " + strings.Join(s, ", ") + " }"
	}
	chains := []*knftables.Chain{
		{Name: "postrouting", Type: knftables.PtrTo(knftables.NATType), Hook: knftables.PtrTo(knftables.PostroutingHook),
			Priority: knftables.PtrTo(knftables.SNATPriority)},
		{Name: "forward", Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(knftables.ForwardHook),
			Priority: knftables.PtrTo(knftables.FilterPriority)},
	}
	rules := []*knftables.Rule{
		{Chain: "postrouting", Rule: knftables.Concat("ip saddr", set(podCIDRs), "ip daddr !=", set(clusterCIDRs), "masquerade"),
			Comment: knftables.PtrTo("pods to outside the cluster: masquerade")},
		{Chain: "forward", Rule: knftables.Concat("iifname", `"`+gwPort+`"`, "accept"),
			Comment: knftables.PtrTo("from pods")},
		{Chain: "forward", Rule: knftables.Concat("oifname", `"`+gwPort+`"`, "accept"),
			Comment: knftables.PtrTo("to pods")},
	}
	h := sha256.New()
	for _, c := range chains {
		fmt.Fprintf(h, "%s %s %s %s\n", c.Name, *c.Type, *c.Hook, *c.Priority)
	}
	for _, r := range rules {
		fmt.Fprintf(h, "%s %s\n", r.Chain, r.Rule)
	}
	sum := hex.EncodeToString(h.Sum(nil))[:12]
	for _, r := range rules {
		r.Comment = knftables.PtrTo(*r.Comment + " #" + sum)
	}
	return chains, rules
}

func (r *run) setupNFT(ctx context.Context) error {
	c := r.cfg
	nft, err := knftables.New(knftables.IPv4Family, NFTable)
	if err != nil {
		return fmt.Errorf("%w (node-setup needs the nft program, nftables >= 1.0.1, and CAP_NET_ADMIN)", err)
	}
	chains, rules := nftObjects(c.PodCIDRs, c.ClusterCIDRs, c.GatewayPort)
	have, err := nft.ListRules(ctx, "")
	if err != nil && !knftables.IsNotFound(err) {
		return err
	}
	if len(have) == len(rules) {
		same := true
		for i, h := range have {
			if h.Chain != rules[i].Chain || h.Comment == nil || *h.Comment != *rules[i].Comment {
				same = false
			}
		}
		if same {
			r.unchanged("nftables table ip %s (masquerade of %v to outside %v)", NFTable, c.PodCIDRs, c.ClusterCIDRs)
			return nil
		}
	}
	tx := nft.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("ovs-srcip: pod masquerade and forwarding (srcip-agent node-setup)")})
	for _, ch := range chains {
		tx.Add(ch)
		tx.Flush(ch)
	}
	for _, rl := range rules {
		tx.Add(rl)
	}
	if err := nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("write table ip %s: %w", NFTable, err)
	}
	r.changed("nftables table ip %s: masquerade %v to outside %v, forward accepts for %s", NFTable, c.PodCIDRs, c.ClusterCIDRs, c.GatewayPort)
	return nil
}

func (r *run) teardownNFT(ctx context.Context) error {
	nft, err := knftables.New(knftables.IPv4Family, NFTable)
	if err != nil {
		return fmt.Errorf("%w (node-teardown needs the nft program and CAP_NET_ADMIN)", err)
	}
	if _, err := nft.List(ctx, "chains"); knftables.IsNotFound(err) {
		r.unchanged("no nftables table ip %s", NFTable)
		return nil
	} else if err != nil {
		return err
	}
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("delete table ip %s: %w", NFTable, err)
	}
	r.changed("deleted nftables table ip %s", NFTable)
	return nil
}

// setupForwarding sets net.ipv4.ip_forward=1 (node-teardown leaves it: kube-proxy needs it too).
func (r *run) setupForwarding() error {
	b, err := os.ReadFile(ipForwardPath)
	if err != nil {
		return fmt.Errorf("read net.ipv4.ip_forward: %w", err)
	}
	if strings.TrimSpace(string(b)) == "1" {
		r.unchanged("net.ipv4.ip_forward=1")
		return nil
	}
	if err := os.WriteFile(ipForwardPath, []byte("1\n"), 0o644); err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("set net.ipv4.ip_forward=1: %w (the init container must be privileged: /proc/sys is read-only otherwise)", err)
		}
		return fmt.Errorf("set net.ipv4.ip_forward=1: %w", err)
	}
	r.changed("net.ipv4.ip_forward=1")
	return nil
}
