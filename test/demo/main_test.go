package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The path of a request is one line: over Geneve to a pod on another node, straight into br-int
// for a pod on the ingress node.
func TestDrawPath(t *testing.T) {
	for _, c := range []struct{ podNode, want string }{
		{"node2", "client -> node1 br-ex [DNAT 10.244.2.5:8080] => Geneve => node2 br-int -> echo-a; reply back"},
		{"node1", "client -> node1 br-ex [DNAT 10.244.2.5:8080] -> node1 br-int -> echo-a; reply back"},
	} {
		assert.Equal(t, c.want, drawPath("node1", c.podNode, "echo-a", "10.244.2.5:8080"))
	}
}

// The backends are a table by pod, with TCP, UDP and all requests (not Go map syntax).
func TestWriteBackends(t *testing.T) {
	var out bytes.Buffer
	writeBackends(&out, []hit{{"echo-b", "node3", "tcp"}, {"echo-a", "node2", "tcp"}, {"echo-a", "node2", "udp"}, {"echo-a", "node2", "tcp"}})
	assert.Equal(t, `BACKEND POD  POD NODE  TCP  UDP  REQUESTS
echo-a       node2     2    1    3
echo-b       node3     1    0    1
`, out.String())
}
