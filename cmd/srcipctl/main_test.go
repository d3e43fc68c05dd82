package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func run(t *testing.T, args ...string) string {
	var out bytes.Buffer
	cmd := newCommand(&out)
	cmd.SetArgs(args)
	require.NoError(t, cmd.Execute())
	return out.String()
}

func TestCookie(t *testing.T) {
	got := run(t, "cookie", "0x5c10123456789abc")
	assert.Contains(t, got, "owner=0x5c (ovs-srcip)")
	assert.Contains(t, got, "kind=0x10 (service-port)")
	assert.Contains(t, got, "fingerprint=0x123456789abc")
}

func TestDesired(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(`apiVersion: v1
kind: Node
metadata: {name: node1}
spec: {podCIDRs: [10.244.1.0/24]}
status: {addresses: [{type: InternalIP, address: 192.168.0.1}]}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  annotations: {ovs-srcip.io/preserve-source-ip: "true"}
spec:
  type: NodePort
  ports: [{name: http, port: 80, nodePort: 30080}]
`), 0o644))
	got := run(t, "desired", "--manifests", dir, "--node", "node1", "--bridge", "br-ex")
	assert.Contains(t, got, "# br-ex")
	assert.NotContains(t, got, "# br-int")
	assert.Contains(t, got, "tp_dst=30080")
	assert.Contains(t, got, "# service-port")
	assert.Contains(t, got, "group add_or_mod")
}
