// Command srcip-cni is the CNI plugin of ovs-srcip (CNI spec 1.0 and 1.1): it puts a pod on the
// node's integration bridge. ADD creates the pod's veth (the pod end is CNI_IFNAME, the host end
// is named from the container id), gets the pod's addresses from the IPAM plugin of the "ipam"
// section (host-local with the node's pod CIDR), sets the MTU and the default route via the pod
// gateway, attaches the host end to the bridge with the pod's identity in Interface.external_ids
// (pod-namespace, pod-name, pod-uid, attached-mac, ip_addresses, srcip-cni-container,
// srcip-cni-ifname) and returns once srcip-agent has programmed the pod (bounded by "flowWait").
// DEL is idempotent; CHECK, STATUS and GC are supported. Configuration: see NetConf. In
// "chained" mode (NetConf.Mode) it runs after another main CNI instead and adds only an egress
// interface on the bridge (chained.go, docs/egress.md#chained-mode).
//
// Its release (package version) is in the VERSION answer ("pluginVersion", beside the spec's
// cniVersion and supportedVersions) and in the line it prints when run without CNI_COMMAND.
package main

import (
	"encoding/json"
	"io"
	"os"
	"runtime/debug"

	"github.com/containernetworking/cni/pkg/skel"
	cniversion "github.com/containernetworking/cni/pkg/version"

	"github.com/ovs-srcip/ovs-srcip/version"
)

// gcMemoryLimit is the heap size at which srcip-cni's garbage collector runs at all (see main).
const gcMemoryLimit = 256 << 20

func main() {
	// One call lives tens of milliseconds and allocates a few MB (the OVSDB schema and cache,
	// netlink): collecting that garbage is CPU spent for nothing, and in a burst of pod starts
	// the CPU is what every ADD waits for. The collector runs only if the heap reaches
	// gcMemoryLimit; GOGC or GOMEMLIMIT in the environment still decide.
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetGCPercent(-1)
		debug.SetMemoryLimit(gcMemoryLimit)
	}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		Status: cmdStatus,
		GC:     cmdGC,
	}, pluginInfo{cniversion.PluginSupports("0.4.0", "1.0.0", "1.1.0")},
		"srcip-cni "+version.String()+": ovs-srcip's CNI plugin (pods on br-int)")
}

// pluginInfo is the spec's VERSION answer with the plugin's release added as "pluginVersion"
// (runtimes decode the answer into the spec's fields and ignore others).
type pluginInfo struct{ cniversion.PluginInfo }

func (p pluginInfo) Encode(w io.Writer) error {
	return json.NewEncoder(w).Encode(map[string]any{
		"cniVersion":        cniversion.Current(),
		"supportedVersions": p.SupportedVersions(),
		"pluginVersion":     version.Version,
	})
}
