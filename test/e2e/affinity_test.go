package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// Session affinity (issue 20, deliverable 1) and no-endpoint rejects (deliverable 2), with real
// packets from the external clients.

// withAffinity adds sessionAffinity: ClientIP with timeoutSeconds to a Service rendered by
// rawService (timeout 0: the manifest unchanged, no affinity).
func withAffinity(manifest string, timeout int) string {
	if timeout == 0 {
		return manifest
	}
	return strings.Replace(manifest, "  externalTrafficPolicy: Cluster\n",
		fmt.Sprintf("  externalTrafficPolicy: Cluster\n  sessionAffinity: ClientIP\n  sessionAffinityConfig:\n    clientIP:\n      timeoutSeconds: %d\n", timeout), 1)
}

// regIP is the value ovs-ofctl prints for an IPv4 address in a register (reg5=0xaf40205).
func regIP(ip string) string {
	b := netip.MustParseAddr(ip).As4()
	return fmt.Sprintf("%#x", uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]))
}

// backends opens n connections (a new source port each) from client to addr and counts the
// answering pods; every answer must come from addr and show the client's own IP.
func backends(t *testing.T, client, proto, addr string, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for i := 0; i < n; i++ {
		r, err := theLab.Request(client, proto, addr)
		require.NoError(t, err, "%s request %d to %s", proto, i, addr)
		assert.Equal(t, addr, r.From, "answer to %s came from %s", addr, r.From)
		seen[r.Pod]++
	}
	return seen
}

// only returns the one pod of seen, failing when there are several.
func only(t *testing.T, seen map[string]int, what string) string {
	t.Helper()
	require.Len(t, seen, 1, "%s: %v", what, seen)
	for p := range seen {
		return p
	}
	return ""
}

// TestSessionAffinity: a Service with sessionAffinity ClientIP on every entry point. One client
// through one ingress node reaches one backend (NodePort, LB IP, externalIP, UDP); through the
// three nodes' NodePorts the same one (the group hashes the client IP alone over the same bucket
// ids on every node); an endpoint removed is never chosen again; a changed timeout is the learned
// flows' idle timeout (sticky to the endpoint learned within it, the hash's choice after it);
// affinity turned off spreads the client's connections again and deletes the learned flows.
func TestSessionAffinity(t *testing.T) {
	const file = "affinity.yaml"
	const lbIP, eIP = "203.0.113.200", "203.0.113.201"
	np, lbAddr, eAddr := "192.0.2.11:30500", lbIP+":80", eIP+":80"
	ports := []pspec{{"http", "TCP", 80, 30500}, {"dns", "UDP", 53, 30501}}
	all := []ep{echoA, echoB, echoC}
	defer removeAndWait(t, file, "tp_dst=30500", "tp_dst=30501")

	// apply writes the Service and waits until every node's br-ex has its affinity flows
	// (timeout > 0: ExServiceAffinityOut holds exactly eps and learns with that idle timeout) or has none (timeout 0: the entry points go to the group).
	apply := func(timeout int, eps []ep) {
		t.Helper()
		writeManifest(t, file, withAffinity(rawService("aff", true, "LoadBalancer", []string{eIP}, lbIP, ports, eps), timeout))
		err := lab.WaitFor(func() error {
			for _, n := range theLab.Nodes {
				ct, err := theLab.DumpFlows(n.Name, "br-ex", "table=41,tcp,nw_dst="+lbIP)
				if err != nil {
					return err
				}
				out, err := theLab.DumpFlows(n.Name, "br-ex", "table=44,tcp")
				if err != nil {
					return err
				}
				if timeout == 0 {
					if !strings.Contains(ct, "actions=group:") || strings.Contains(out, "reg4=") {
						return fmt.Errorf("%s: affinity flows remain:\n%s\n%s", n.Name, ct, out)
					}
					continue
				}
				if !strings.Contains(ct, "resubmit(,43)") {
					return fmt.Errorf("%s: no affinity lookup yet:\n%s", n.Name, ct)
				}
				for _, e := range all {
					want := slicesContains(eps, e)
					if strings.Contains(out, "reg5="+regIP(e.ip)+",") != want {
						return fmt.Errorf("%s: table 44 endpoint %s present=%v wanted:\n%s", n.Name, e.pod, !want, out)
					}
				}
				if !strings.Contains(out, fmt.Sprintf("idle_timeout=%d,", timeout)) {
					return fmt.Errorf("%s: table 44 does not learn with idle_timeout=%d yet:\n%s", n.Name, timeout, out)
				}
			}
			return nil
		}, 20*time.Second)
		require.NoError(t, err)
	}
	learned := func(node string) string {
		t.Helper()
		out, err := theLab.DumpFlows(node, "br-ex", "table=43")
		require.NoError(t, err)
		return out
	}

	apply(10800, all)
	waitOK(t, "tcp", np)
	stuck := only(t, backends(t, "client", "tcp", np, 20), "20 connections through node1's NodePort")
	t.Logf("client %s sticks to %s", clientIP, stuck)
	for _, addr := range []string{lbAddr, eAddr} {
		assert.Equal(t, stuck, only(t, backends(t, "client", "tcp", addr, 5), addr), "the LB IP and externalIP share the port's affinity")
	}
	only(t, backends(t, "client", "udp", "192.0.2.11:30501", 10), "10 UDP datagrams, each from a new port")
	l := learned("node1")
	assert.Regexp(t, regexp.MustCompile(`idle_timeout=10800,.*reg4=0x[0-9a-f]+,nw_src=198\.51\.100\.10 actions=(load|set_field):`), l, "the learned choice")

	// Three ingress nodes (ECMP): the same backend through each.
	total, per := 0, map[string]int{}
	for _, node := range []string{"192.0.2.11", "192.0.2.12", "192.0.2.13"} {
		seen := backends(t, "client", "tcp", node+":30500", 20)
		t.Logf("through %s: %v", node, seen)
		for p, c := range seen {
			per[p] += c
			total += c
		}
	}
	t.Logf("cross-node affinity: %d of %d connections through 3 ingress nodes reached %s (%.0f%%)", per[stuck], total, stuck, 100*float64(per[stuck])/float64(total))
	assert.Equal(t, total, per[stuck], "every ingress node picks the client's backend")
	t.Logf("client2 %s sticks to %s", client2IP, only(t, backends(t, "client2", "tcp", np, 10), "client2"))

	// The client's endpoint leaves: never chosen again; its learned flows go with it.
	var rest []ep
	for _, e := range all {
		if e.pod != stuck {
			rest = append(rest, e)
		}
	}
	gone := theLab.Pod(stuck).IP.String()
	apply(10800, rest)
	assert.NotContains(t, learned("node1"), regIP(gone)+"->", "learned flows of the removed endpoint are deleted")
	moved := only(t, backends(t, "client", "tcp", np, 20), "after the endpoint left")
	assert.NotEqual(t, stuck, moved)
	t.Logf("endpoint %s removed: the client moved to %s", stuck, moved)
	// It comes back: the client keeps its learned endpoint (the hash alone would pick the old one).
	t.Logf("node1 learned before the endpoint came back:\n%s", learned("node1"))
	apply(10800, all)
	back := only(t, backends(t, "client", "tcp", np, 10), "after the endpoint came back")
	t.Logf("endpoint %s back: the client went to %s (learned %s, hash %s)", stuck, back, moved, stuck)
	assert.Equal(t, moved, back, "the learned choice survives an endpoint added")

	// A shorter timeout takes effect: the learned flows of the old timeout are deleted, the new
	// ones idle out after it.
	const short = 5
	apply(short, all)
	assert.NotContains(t, learned("node1"), "idle_timeout=10800", "learned flows of the old timeout are deleted")
	// The hash basis is now the 5 s period's: one backend, not necessarily the old one.
	only(t, backends(t, "client", "tcp", np, 5), "after the timeout change")
	assert.Contains(t, learned("node1"), fmt.Sprintf("idle_timeout=%d,", short))
	apply(short, rest)
	moved = only(t, backends(t, "client", "tcp", np, 5), "short timeout, endpoint removed")
	apply(short, all)
	start := time.Now()
	if !assert.Equal(t, moved, only(t, backends(t, "client", "tcp", np, 5), "within the timeout"), "sticky within timeoutSeconds") {
		t.Logf("node1 learned:\n%s", learned("node1"))
	}
	t.Logf("within %d s (%v after the endpoint came back): %s", short, time.Since(start).Round(time.Millisecond), moved)
	time.Sleep((short + 3) * time.Second)
	assert.NotContains(t, learned("node1"), "nw_src=198.51.100.10 ", "the learned flow idled out")
	// After timeoutSeconds without a connection the hash decides again, under a later period's
	// basis (flows.AffinityPeriodAt): one backend for the next connections, learned afresh.
	after := only(t, backends(t, "client", "tcp", np, 5), "after the timeout")
	t.Logf("after %d s without a connection: %s (learned anew)", short+3, after)
	assert.Contains(t, learned("node1"), "nw_src=198.51.100.10 ", "the new choice is learned")

	// Affinity off: connections spread again, the learned flows are deleted.
	apply(0, all)
	spread := backends(t, "client", "tcp", np, 20)
	t.Logf("affinity off: %v", spread)
	assert.GreaterOrEqual(t, len(spread), 2, "20 connections with random source ports reach more than one backend")
	assert.NotContains(t, learned("node1"), "cookie=0x5c21", "learned flows deleted with the affinity")
}

func slicesContains(eps []ep, e ep) bool {
	for _, x := range eps {
		if x == e {
			return true
		}
	}
	return false
}

// probeResult is what `echo probe` prints.
type probeResult struct {
	Result, Error string
	MS            int64
}

func probe(t *testing.T, proto, addr string) probeResult {
	t.Helper()
	out, err := theLab.Exec("client", theLab.EchoBin(), "probe", "--proto", proto, "--addr", addr, "--timeout", "3s")
	require.NoError(t, err, out)
	var r probeResult
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &r), out)
	return r
}

// kubeProxyRejects installs on node what kube-proxy (nftables mode) installs for Service ports
// without endpoints - a reject of new connections to them in the input and forward hooks (its
// filter-input / filter-forward chains, set @no-endpoint-services and @no-endpoint-nodeports;
// in iptables mode KUBE-EXTERNAL-SERVICES, -j REJECT: ICMP port unreachable) - and IPv4
// forwarding, which every Kubernetes node has; both are undone when the test ends.
func kubeProxyRejects(t *testing.T, node string, elems ...string) {
	t.Helper()
	ns, err := theLab.Netns(node)
	require.NoError(t, err)
	fwd, err := theLab.Exec(node, "sysctl", "-n", "net.ipv4.ip_forward")
	require.NoError(t, err)
	_, err = theLab.Exec(node, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	require.NoError(t, err)
	set := strings.Join(elems, ", ")
	nft := fmt.Sprintf(`table ip e2e-kube-proxy {
	chain filter-input {
		type filter hook input priority -110; policy accept;
		ct state new ip daddr . meta l4proto . th dport { %s } reject
	}
	chain filter-forward {
		type filter hook forward priority -110; policy accept;
		ct state new ip daddr . meta l4proto . th dport { %s } reject
	}
}
`, set, set)
	f := filepath.Join(t.TempDir(), "kube-proxy.nft")
	require.NoError(t, os.WriteFile(f, []byte(nft), 0o644))
	out, err := theLab.Exec(node, "nft", "-f", f)
	require.NoError(t, err, "nft in %s: %s", ns, out)
	t.Cleanup(func() {
		_, _ = theLab.Exec(node, "nft", "delete", "table", "ip", "e2e-kube-proxy")
		_, _ = theLab.Exec(node, "sysctl", "-q", "-w", "net.ipv4.ip_forward="+strings.TrimSpace(fwd))
	})
}

// TestNoEndpointsRejected: a Service port without endpoints is rejected at once on every entry
// point, as kube-proxy rejects it: node1's br-ex hands the new connection to its host untouched
// and uncommitted, where kube-proxy's reject rules answer (TCP: ECONNREFUSED, UDP: ICMP port
// unreachable, ECONNREFUSED on the connected socket) within a round trip, never a timeout;
// ZoneService holds nothing for them.
func TestNoEndpointsRejected(t *testing.T) {
	const file = "noep.yaml"
	const lbIP, eIP = "203.0.113.210", "203.0.113.211"
	ports := []pspec{{"http", "TCP", 80, 30510}, {"dns", "UDP", 53, 30511}}
	writeManifest(t, file, rawService("noep", true, "LoadBalancer", []string{eIP}, lbIP, ports, nil))
	defer removeAndWait(t, file, "tp_dst=30510", "tp_dst=30511")
	kubeProxyRejects(t, "node1",
		"192.0.2.11 . tcp . 30510", "192.0.2.11 . udp . 30511",
		lbIP+" . tcp . 80", lbIP+" . udp . 53", eIP+" . tcp . 80", eIP+" . udp . 53")
	err := lab.WaitFor(func() error {
		out, err := theLab.DumpFlows("node1", "br-ex", "table=41,ip,nw_dst="+eIP)
		if err != nil {
			return err
		}
		if strings.Count(out, "actions=LOCAL") != 2 {
			return fmt.Errorf("no LOCAL flows for %s yet:\n%s", eIP, out)
		}
		return nil
	}, 20*time.Second)
	require.NoError(t, err)
	for _, c := range []struct{ proto, addr string }{
		{"tcp", "192.0.2.11:30510"}, {"tcp", lbIP + ":80"}, {"tcp", eIP + ":80"},
		{"udp", "192.0.2.11:30511"}, {"udp", lbIP + ":53"}, {"udp", eIP + ":53"},
	} {
		// The host's ICMP errors to one peer are rate limited (icmp_ratelimit, a burst of 6):
		// one probe per second stays inside it.
		time.Sleep(time.Second)
		r := probe(t, c.proto, c.addr)
		t.Logf("%s %s: %s after %d ms (%s)", c.proto, c.addr, r.Result, r.MS, r.Error)
		assert.Equal(t, "refused", r.Result, "%s %s", c.proto, c.addr)
		assert.Less(t, r.MS, int64(1000), "%s %s: rejected at once", c.proto, c.addr)
	}
	ct, err := theLab.Appctl("node1", "dpctl/dump-conntrack", "zone="+zoneService)
	require.NoError(t, err)
	for _, tok := range []string{"dport=30510", "dport=30511", "dst=" + lbIP, "dst=" + eIP} {
		assert.NotContains(t, ct, tok, "nothing committed in ZoneService for a rejected connection")
	}
	out, err := theLab.DumpFlows("node1", "br-ex", "table=41,ip,nw_dst="+lbIP)
	require.NoError(t, err)
	t.Logf("node1 table 41 for %s:\n%s", lbIP, out)
}
