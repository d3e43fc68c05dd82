package main

import (
	"bytes"
	"encoding/json"
	"testing"

	cniversion "github.com/containernetworking/cni/pkg/version"

	"github.com/ovs-srcip/ovs-srcip/version"
)

// The VERSION answer keeps the spec's fields (a runtime decodes it with the CNI library) and adds
// the release.
func TestVersionAnswer(t *testing.T) {
	var b bytes.Buffer
	p := pluginInfo{cniversion.PluginSupports("0.4.0", "1.0.0", "1.1.0")}
	if err := p.Encode(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		PluginVersion string `json:"pluginVersion"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil || got.PluginVersion != version.Version {
		t.Errorf("pluginVersion %q (%v), want %q: %s", got.PluginVersion, err, version.Version, b.String())
	}
	info, err := (&cniversion.PluginDecoder{}).Decode(b.Bytes()) // what libcni does with the answer
	if err != nil {
		t.Fatal(err)
	}
	if s := info.SupportedVersions(); len(s) != 3 || s[2] != "1.1.0" {
		t.Errorf("supportedVersions %v", s)
	}
}
