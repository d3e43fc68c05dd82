package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/agent"
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

// desired --preserve-source-ip=all renders an unannotated NodePort Service (annotated mode does
// not), and status / get services say it is served by the all mode.
func TestPreserveAllMode(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(`apiVersion: v1
kind: Node
metadata: {name: node1}
spec: {podCIDRs: [10.244.1.0/24]}
status: {addresses: [{type: InternalIP, address: 192.168.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  ports: [{name: http, port: 80, nodePort: 30080}]
`), 0o644))
	assert.NotContains(t, run(t, "desired", "--manifests", dir, "--node", "node1", "--bridge", "br-ex"), "tp_dst=30080")
	assert.Contains(t, run(t, "desired", "--manifests", dir, "--node", "node1", "--bridge", "br-ex", "--preserve-source-ip=all"), "tp_dst=30080")

	objs, err := agent.ReadManifestDir(dir)
	require.NoError(t, err)
	_, rep, err := agent.Desired(context.Background(), "node1", objs, agent.DesiredOptions{PreserveSourceIP: agent.PreserveAll})
	require.NoError(t, err)
	var out bytes.Buffer
	writeStatus(&out, &rep, nil)
	assert.Contains(t, out.String(), "--preserve-source-ip=all: every eligible Service is served")
	assert.Contains(t, out.String(), "service default/web (type NodePort, externalTrafficPolicy -, no annotation): served: all mode")
	out.Reset()
	writeServices(&out, &rep, true)
	assert.Regexp(t, `default/web\s+http/TCP\s+yes \(all mode\)`, out.String())
}
