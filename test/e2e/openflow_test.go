package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

var bundlesRE = regexp.MustCompile(`(?m)^srcip_agent_openflow_bundles_total\{bridge="([^"]+)",path="([^"]+)"\} (\d+)$`)

// The agents run with the default --openflow=native: on every node both bridges got their
// bundles over the persistent OpenFlow connection. Bundles through ovs-ofctl are the ones the
// native encoder cannot translate; after the scenarios before this test (egress, gateway,
// drains, ICMP, ...) there are none on node2 and node3 (node1's agent was restarted by C33 with
// --group-buckets-per-message=2000, whose 88 KiB group message is too long for OpenFlow and
// goes through ovs-ofctl by design).
func TestNativeOpenFlowPath(t *testing.T) {
	for _, n := range theLab.Nodes {
		counts := map[string]int{}
		for _, m := range bundlesRE.FindAllStringSubmatch(metrics(t, n.Name, "/metrics"), -1) {
			v, _ := strconv.Atoi(m[3])
			counts[m[1]+"/"+m[2]] = v
		}
		t.Logf("%s: %v", n.Name, counts)
		for _, br := range []string{"br-ex", "br-int"} {
			assert.Positive(t, counts[br+"/native"], fmt.Sprintf("%s %s: native bundles", n.Name, br))
			if n.Name != "node1" {
				assert.Zero(t, counts[br+"/ovs-ofctl"], fmt.Sprintf("%s %s: bundles through ovs-ofctl", n.Name, br))
			}
		}
	}
}
