package cluster

import (
	"fmt"
	"strings"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

func labConfig() lab.Config {
	// No gateway stand-in: srcip-agent node-setup makes srcip-gw0 with the allocated pod CIDR.
	return lab.Config{ManifestsDir: "testdata/nodes", NoGateway: true}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func printf(format string, args ...any) { fmt.Printf(format, args...) }
