package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
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
		require.NoError(t, lab.WaitFor(func() error {
			out, err := theLab.Exec(n.Name, "curl", "-sS", "--max-time", "5", "http://127.0.0.1:9464/metrics")
			if err != nil {
				return fmt.Errorf("%s: %v: %s", n.Name, err, out)
			}
			for _, m := range bundlesRE.FindAllStringSubmatch(out, -1) {
				v, _ := strconv.Atoi(m[3])
				counts[m[1]+"/"+m[2]] = v
			}
			if counts["br-ex/native"] == 0 || counts["br-int/native"] == 0 {
				return fmt.Errorf("%s: no native bundles yet: %v", n.Name, counts)
			}
			return nil
		}, 30*time.Second))
		t.Logf("%s: %v", n.Name, counts)
		for _, br := range []string{"br-ex", "br-int"} {
			assert.Positive(t, counts[br+"/native"], fmt.Sprintf("%s %s: native bundles", n.Name, br))
			if n.Name != "node1" {
				assert.Zero(t, counts[br+"/ovs-ofctl"], fmt.Sprintf("%s %s: bundles through ovs-ofctl", n.Name, br))
			}
		}
	}
}
