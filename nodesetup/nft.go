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

const (
	ipForwardPath   = "/proc/sys/net/ipv4/ip_forward"
	ipv6ForwardPath = "/proc/sys/net/ipv6/conf/all/forwarding"
)

// nftObjects returns the chains and rules of table ip ovs-srcip (or, with family
// knftables.IPv6Family, of its twin table ip6 ovs-srcip; the CIDRs are then the IPv6 ones): pod
// traffic to anything that is not a pod is masqueraded to the address of the interface it leaves
// by (the node IP), and the host forwards what enters or leaves through the gateway port. Every
// rule's comment ends in a hash of the whole table, so that a later run sees whether the table
// is still the one it would write (the IPv4 table's rules and hash are those of the IPv4-only
// releases). nonMasq are the routed pods' destinations of the family (Config.NonMasqueradeCIDRs):
// a second `daddr !=` set leaves them out of the masquerade; none: the rule and hash are those of
// the releases without routed pods.
func nftObjects(family knftables.Family, podCIDRs, clusterCIDRs, nonMasq []netip.Prefix, gwPort string) ([]*knftables.Chain, []*knftables.Rule) {
	ip := "ip"
	if family == knftables.IPv6Family {
		ip = "ip6"
	}
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
	masq := knftables.Concat(ip+" saddr", set(podCIDRs), ip+" daddr !=", set(clusterCIDRs), "masquerade")
	comment := "pods to outside the cluster: masquerade"
	if nm := outermost(nonMasq); len(nm) > 0 {
		masq = knftables.Concat(ip+" saddr", set(podCIDRs), ip+" daddr !=", set(clusterCIDRs), ip+" daddr !=", set(nm), "masquerade")
		comment = "pods to outside the cluster but the non-masquerade CIDRs: masquerade"
	}
	rules := []*knftables.Rule{
		{Chain: "postrouting", Rule: masq, Comment: knftables.PtrTo(comment)},
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

// outermost returns ps masked, without those inside another one (an anonymous nftables interval
// set refuses overlapping elements), in order.
func outermost(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for i, p := range ps {
		p = p.Masked()
		inside := false
		for j, q := range ps {
			q = q.Masked()
			if i != j && q.Bits() <= p.Bits() && q.Contains(p.Addr()) && (q.Bits() < p.Bits() || j < i) {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, p)
		}
	}
	return out
}

// setupNFT writes table ip ovs-srcip for the IPv4 pod CIDRs and table ip6 ovs-srcip for the
// IPv6 ones. A family without a pod CIDR on this node gets no table (one left from an earlier
// configuration is deleted): a v4-only node has no ip6 table.
func (r *run) setupNFT(ctx context.Context) error {
	c := r.cfg
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		pods, cluster, nonMasq := ofFamily(c.PodCIDRs, fam), ofFamily(c.ClusterCIDRs, fam), ofFamily(c.NonMasqueradeCIDRs, fam)
		if len(pods) == 0 {
			if err := r.deleteNFT(ctx, fam); err != nil {
				return err
			}
			continue
		}
		if err := r.writeNFT(ctx, fam, pods, cluster, nonMasq); err != nil {
			return err
		}
	}
	return nil
}

// ofFamily returns the prefixes of ps of nftables family fam (ip: IPv4, ip6: IPv6).
func ofFamily(ps []netip.Prefix, fam knftables.Family) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is4() == (fam == knftables.IPv4Family) {
			out = append(out, p)
		}
	}
	return out
}

func (r *run) writeNFT(ctx context.Context, fam knftables.Family, pods, cluster, nonMasq []netip.Prefix) error {
	c := r.cfg
	nft, err := knftables.New(fam, NFTable)
	if err != nil {
		return fmt.Errorf("%w (node-setup needs the nft program, nftables >= 1.0.1, and CAP_NET_ADMIN)", err)
	}
	chains, rules := nftObjects(fam, pods, cluster, nonMasq, c.GatewayPort)
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
			r.unchanged("nftables table %s %s (masquerade of %v to outside %v, not to %v)", fam, NFTable, pods, cluster, nonMasq)
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
		return fmt.Errorf("write table %s %s: %w", fam, NFTable, err)
	}
	r.changed("nftables table %s %s: masquerade %v to outside %v (not to the non-masquerade CIDRs %v), forward accepts for %s", fam, NFTable, pods, cluster, nonMasq, c.GatewayPort)
	return nil
}

// teardownNFT deletes both tables (ip and ip6 ovs-srcip).
func (r *run) teardownNFT(ctx context.Context) error {
	var errs []error
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		if err := r.deleteNFT(ctx, fam); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *run) deleteNFT(ctx context.Context, fam knftables.Family) error {
	nft, err := knftables.New(fam, NFTable)
	if err != nil {
		return fmt.Errorf("%w (node-setup and node-teardown need the nft program and CAP_NET_ADMIN)", err)
	}
	if _, err := nft.List(ctx, "chains"); knftables.IsNotFound(err) {
		if fam == knftables.IPv4Family {
			r.unchanged("no nftables table %s %s", fam, NFTable)
		}
		return nil
	} else if err != nil {
		return err
	}
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("delete table %s %s: %w", fam, NFTable, err)
	}
	r.changed("deleted nftables table %s %s", fam, NFTable)
	return nil
}

// setupForwarding sets net.ipv4.ip_forward=1, and net.ipv6.conf.all.forwarding=1 when the node
// has an IPv6 pod CIDR (node-teardown leaves both: kube-proxy needs them too). IPv6 forwarding
// makes every interface with accept_ra=1 ignore router advertisements: the node's IPv6 routes
// must be static (checkNotDHCP refuses an uplink route learned from one).
func (r *run) setupForwarding() error {
	if err := r.setSysctlOne(ipForwardPath, "net.ipv4.ip_forward"); err != nil {
		return err
	}
	if len(ofFamily(r.cfg.PodCIDRs, knftables.IPv6Family)) > 0 {
		return r.setSysctlOne(ipv6ForwardPath, "net.ipv6.conf.all.forwarding")
	}
	return nil
}

func (r *run) setSysctlOne(path, name string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if strings.TrimSpace(string(b)) == "1" {
		r.unchanged("%s=1", name)
		return nil
	}
	if err := os.WriteFile(path, []byte("1\n"), 0o644); err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("set %s=1: %w (the init container must be privileged: /proc/sys is read-only otherwise)", name, err)
		}
		return fmt.Errorf("set %s=1: %w", name, err)
	}
	r.changed("%s=1", name)
	return nil
}
