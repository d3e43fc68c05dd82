package nodesetup

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PodCIDRsFromNode returns Node node's spec.podCIDRs, IPv4 and IPv6 (at most one per family:
// the API server's rule; IPv4 first), waiting (polling every 2 s, at most wait) until
// kube-controller-manager has allocated them. An IPv6 entry is taken only with an IPv4 one (the
// underlay, the node IP and the routes' source stay IPv4): an IPv6-only node waits, then fails.
func PodCIDRsFromNode(ctx context.Context, cs kubernetes.Interface, node string, wait time.Duration, logf func(string, ...any)) ([]netip.Prefix, error) {
	deadline := time.Now().Add(wait)
	var last string
	for {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
		default:
			var v4, v6 []netip.Prefix
			for _, s := range n.Spec.PodCIDRs {
				p, err := netip.ParsePrefix(s)
				if err != nil {
					return nil, fmt.Errorf("node %s: spec.podCIDRs %q: %w", node, s, err)
				}
				if p.Addr().Is4() {
					v4 = append(v4, p.Masked())
				} else if len(v6) == 0 {
					v6 = append(v6, p.Masked())
				}
			}
			if len(v4) > 0 {
				return append(v4, v6...), nil
			}
			last = "spec.podCIDRs has no IPv4 CIDR yet"
			if len(n.Spec.PodCIDRs) > 0 {
				last = fmt.Sprintf("spec.podCIDRs %v has no IPv4 CIDR (ovs-srcip needs an IPv4 pod CIDR: IPv4-only or dual-stack)", n.Spec.PodCIDRs)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("node %s: no IPv4 pod CIDR after %s (%s): is kube-controller-manager running with --allocate-node-cidrs=true --cluster-cidr? Or give --pod-cidr", node, wait, last)
		}
		logf("waiting for node %s's spec.podCIDRs: %s", node, last)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// NodeInternalIP returns node's underlay address, as the agent reads it: the first IPv4
// InternalIP in Node node's status.addresses, else its first IPv6 one (invalid when it has none).
func NodeInternalIP(ctx context.Context, cs kubernetes.Interface, node string) (netip.Addr, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("node %s: %w", node, err)
	}
	var v6 netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != "InternalIP" {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		if ip = ip.Unmap(); ip.Is4() {
			return ip, nil
		}
		if !v6.IsValid() {
			v6 = ip.WithZone("")
		}
	}
	return v6, nil
}
