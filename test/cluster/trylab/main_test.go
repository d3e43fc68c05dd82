package main

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The overlay try-lab writes builds with kustomize (a relative base) and merges the lab's node
// set-up settings into deploy/'s ConfigMap; the Helm values carry the same settings.
func TestWriteSettings(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	overlay, values, err := writeSettings(filepath.Join(t.TempDir(), "try-lab"), root)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", overlay, err)
	}
	want := map[string]string{"NIC": "", "DATAPATH_TYPE": "netdev", "CLUSTER_CIDRS": "10.244.0.0/16", "MTU": "1400"}
	found := false
	for _, r := range rm.Resources() {
		if r.GetKind() != "ConfigMap" || r.GetNamespace() != "ovs-srcip" || r.GetDataMap()["DATAPATH_TYPE"] == "" {
			continue
		}
		found = true
		for k, v := range want {
			if got, ok := r.GetDataMap()[k]; !ok || got != v {
				t.Errorf("ConfigMap %s: %s=%q, want %q", r.GetName(), k, got, v)
			}
		}
	}
	if !found {
		t.Fatal("no node set-up ConfigMap in the overlay's output")
	}
	b, err := os.ReadFile(values)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		NodeSetup map[string]any `json:"nodeSetup"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	wantHelm := map[string]any{"nic": "", "datapathType": "netdev", "clusterCIDRs": "10.244.0.0/16", "mtu": float64(1400)}
	for k, w := range wantHelm {
		if v.NodeSetup[k] != w {
			t.Errorf("values nodeSetup.%s = %#v, want %#v", k, v.NodeSetup[k], w)
		}
	}
}
