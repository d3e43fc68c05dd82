package flows

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// No flow of ovs-srcip answers, captures or drops ARP or neighbour discovery for a Service's
// LoadBalancer IP or externalIP, in any golden state: whoever announces those addresses (MetalLB's
// speaker in L2 mode, the host, a router) keeps the announcement, and br-ex passes the request
// to it (LOCAL through NORMAL). The agent announces only its egress IPs (BuildEgressAnnounce);
// docs/pipeline.md. A state with an LB IP on the egress IP's address is refused before it
// reaches flows (agent: ReasonLoadBalancerIP).
func TestNoARPFlowForLoadBalancerIPs(t *testing.T) {
	seen := 0
	for name, st := range GoldenStates() {
		addrs := map[netip.Addr]bool{}
		for _, sp := range st.Services {
			for _, a := range append(append([]netip.Addr{}, sp.LoadBalancerIPs...), sp.ExternalIPs...) {
				addrs[a] = true
			}
		}
		if len(addrs) == 0 {
			continue
		}
		seen += len(addrs)
		d, err := Build(st)
		require.NoError(t, err, name)
		for k, fs := range d {
			for i := range fs.Flows {
				txt := fs.Flows[i].String()
				for a := range addrs {
					for _, field := range []string{"arp_tpa=", "arp_spa=", "nd_target=", "ipv6_nd_target="} {
						if strings.Contains(txt, field+a.String()+",") || strings.Contains(txt, field+a.String()+"/") {
							t.Errorf("%s: flow set %s matches %s%s: %s", name, k, field, a, txt)
						}
					}
				}
			}
		}
	}
	require.Positive(t, seen, "the golden states have LoadBalancer IPs or externalIPs to check")
}
