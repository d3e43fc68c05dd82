// Command cleanup removes what labs of dead test runs left behind: real-kubelet labs' cgroups and
// processes (test/cluster), then every lab's network namespaces, processes (ovsdb-server,
// ovs-vswitchd, agents) and directory under /tmp (test/lab). A lab whose owner process is alive
// is left alone. `make clean-labs` runs it; the tests run the same cleanup before they start.
package main

import (
	"fmt"
	"os"

	"github.com/ovs-srcip/ovs-srcip/test/cluster"
)

func main() {
	if err := cluster.CleanupStale("", func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }); err != nil {
		fmt.Fprintln(os.Stderr, "cleanup:", err)
		os.Exit(1)
	}
}
