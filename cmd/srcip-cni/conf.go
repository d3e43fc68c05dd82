package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// Defaults of NetConf (the paths of a host's Open vSwitch, ovs-vswitchd.conf.db(5); the MTU of
// a 1500-byte underlay minus Geneve's 50 bytes).
const (
	DefaultBridge    = "br-int"
	DefaultOVSDB     = "unix:/var/run/openvswitch/db.sock"
	DefaultOVSRunDir = "/var/run/openvswitch"
	DefaultMTU       = 1450
	DefaultFlowWait  = 20 * time.Second
	// DefaultEgressIfName is the chained egress interface's name in the pod.
	DefaultEgressIfName = "srcip0"
	// ModeChained is NetConf.Mode of chained mode (docs/egress.md#chained-mode).
	ModeChained = "chained"
)

// NetConf is srcip-cni's network configuration: the plugin's entry of the conflist (CNI spec
// "Network configuration"), e.g.
//
//	{"type": "srcip-cni", "bridge": "br-int", "ovsdb": "unix:/var/run/openvswitch/db.sock",
//	 "ovsRunDir": "/var/run/openvswitch", "mtu": 1450, "flowWait": "20s",
//	 "ipam": {"type": "host-local", ...}}
//
// "ipam" gives one range set per family of the node's pod CIDRs (host-local "ranges":
// [[{"subnet": "10.244.1.0/24", ...}], [{"subnet": "fd00:10:244:1::/64", ...}]]): the pod gets one
// address per family, a default route per family via that family's gateway, and
// external_ids:ip_addresses lists them all.
type NetConf struct {
	types.PluginConf
	// Bridge is the integration bridge pods are attached to (default DefaultBridge).
	Bridge string `json:"bridge,omitempty"`
	// OVSDB is the ovsdb-server endpoint, "unix:PATH", a bare absolute PATH (taken as unix:PATH),
	// "tcp:IP:PORT" or "ssl:IP:PORT" (default DefaultOVSDB).
	OVSDB string `json:"ovsdb,omitempty"`
	// OVSRunDir is OVS_RUNDIR (default DefaultOVSRunDir). srcip-cni no longer reads it (ADD waits
	// for the agent through OVSDB, not through <bridge>.mgmt); it is accepted for the conflists that
	// set it.
	OVSRunDir string `json:"ovsRunDir,omitempty"`
	// MTU of the pod's interface and the host end, in bytes: at most the underlay MTU - 50
	// (Geneve over an IPv4 underlay; 70 over an IPv6 one), and at least 1280 when the pod has an
	// IPv6 address (RFC 8200's minimum link MTU). Default DefaultMTU.
	MTU int `json:"mtu,omitempty"`
	// FlowWaitRaw is how long ADD waits for srcip-agent to program the pod, a Go duration
	// ("20s"; default DefaultFlowWait). Parsed into FlowWait.
	FlowWaitRaw string `json:"flowWait,omitempty"`
	// FlowWait is FlowWaitRaw parsed.
	FlowWait time.Duration `json:"-"`
	// Mode is "" (the pod's only network: veth on the bridge, addresses from "ipam") or
	// ModeChained: srcip-cni runs after another main CNI in the conflist (CNI spec "Network
	// configuration lists", prevResult), takes the pod's IPv4 address from the prevResult and
	// adds an egress interface on the bridge with routes to EgressDestinations; no "ipam".
	Mode string `json:"mode,omitempty"`
	// EgressIfName is the chained egress interface's name in the pod (default
	// DefaultEgressIfName; at most 15 bytes, not CNI_IFNAME).
	EgressIfName string `json:"egressIfName,omitempty"`
	// EgressDestinations are the IPv4 and IPv6 CIDRs routed through the chained egress interface (the
	// EgressGateways' destinations; required in chained mode, no default route: the main CNI
	// keeps everything else). Parsed into EgressPrefixes.
	EgressDestinations []string `json:"egressDestinations,omitempty"`
	// EgressPrefixes is EgressDestinations parsed and masked.
	EgressPrefixes []netip.Prefix `json:"-"`
}

// parseConf parses and validates stdin's network configuration and fills the defaults. The
// "ipam" section with a "type" is required for ADD, DEL and CHECK (needIPAM); a prevResult is
// parsed into PrevResult when present.
func parseConf(stdin []byte, needIPAM bool) (*NetConf, error) {
	c := &NetConf{}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, fmt.Errorf("srcip-cni: parse network configuration: %w", err)
	}
	if c.Bridge == "" {
		c.Bridge = DefaultBridge
	}
	if c.OVSDB == "" {
		c.OVSDB = DefaultOVSDB
	}
	ep, err := ofctl.NormalizeEndpoint(c.OVSDB)
	if err != nil {
		return nil, fmt.Errorf("srcip-cni: \"ovsdb\": %w", err)
	}
	c.OVSDB = ep
	if c.OVSRunDir == "" {
		c.OVSRunDir = DefaultOVSRunDir
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.MTU < 576 || c.MTU > 65535 {
		return nil, fmt.Errorf("srcip-cni: \"mtu\" %d out of range 576-65535 (use the underlay MTU - 50, - 70 over an IPv6 underlay)", c.MTU)
	}
	c.FlowWait = DefaultFlowWait
	if c.FlowWaitRaw != "" {
		d, err := time.ParseDuration(c.FlowWaitRaw)
		if err != nil {
			return nil, fmt.Errorf("srcip-cni: \"flowWait\" %q: %w", c.FlowWaitRaw, err)
		}
		if d <= 0 {
			return nil, fmt.Errorf("srcip-cni: \"flowWait\" %q must be positive", c.FlowWaitRaw)
		}
		c.FlowWait = d
	}
	switch c.Mode {
	case "":
	case ModeChained:
		if err := c.parseChained(); err != nil {
			return nil, err
		}
		needIPAM = false
	default:
		return nil, fmt.Errorf("srcip-cni: \"mode\" %q: want \"\" or %q", c.Mode, ModeChained)
	}
	if needIPAM && c.IPAM.Type == "" {
		return nil, errors.New("srcip-cni: the network configuration has no \"ipam\" section with a \"type\" (e.g. host-local with the node's pod CIDR)")
	}
	if c.RawPrevResult != nil {
		if err := version.ParsePrevResult(&c.PluginConf); err != nil {
			return nil, fmt.Errorf("srcip-cni: parse prevResult: %w", err)
		}
	}
	return c, nil
}

// parseChained checks and fills chained mode's settings: egressIfName (default, length) and
// egressDestinations (at least one IPv4 or IPv6 CIDR with a prefix length above 0; each family's
// are routed only for a pod with an address of that family).
func (c *NetConf) parseChained() error {
	if c.EgressIfName == "" {
		c.EgressIfName = DefaultEgressIfName
	}
	if len(c.EgressIfName) > 15 || strings.ContainsAny(c.EgressIfName, "/ ") {
		return fmt.Errorf("srcip-cni: \"egressIfName\" %q is no valid interface name (at most 15 bytes, no '/' or space)", c.EgressIfName)
	}
	if len(c.EgressDestinations) == 0 {
		return errors.New("srcip-cni: chained mode needs \"egressDestinations\" (the EgressGateways' destination CIDRs routed through the egress interface)")
	}
	for _, s := range c.EgressDestinations {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("srcip-cni: \"egressDestinations\": %w", err)
		}
		if p.Addr().Is4In6() || p.Bits() == 0 {
			return fmt.Errorf("srcip-cni: \"egressDestinations\" %s: want an IPv4 or IPv6 CIDR other than the default route (the main CNI keeps the default route)", s)
		}
		c.EgressPrefixes = append(c.EgressPrefixes, p.Masked())
	}
	return nil
}

// K8sArgs are the CNI_ARGS a Kubernetes runtime passes (KEY=VALUE;...); unknown keys are
// ignored.
type K8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_UID                types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive // CNI_ARGS key
}

// parseArgs parses CNI_ARGS. The pod namespace and name are required (srcip-agent finds the pod
// by them); the UID is optional (kubelet passes it; without it a recreated pod of the same name
// cannot be told from its predecessor).
func parseArgs(s string) (*K8sArgs, error) {
	a := &K8sArgs{}
	a.IgnoreUnknown = true
	if err := types.LoadArgs(s, a); err != nil {
		return nil, fmt.Errorf("srcip-cni: parse CNI_ARGS: %w", err)
	}
	if a.K8S_POD_NAMESPACE == "" || a.K8S_POD_NAME == "" {
		return nil, fmt.Errorf("srcip-cni: CNI_ARGS %q lacks K8S_POD_NAMESPACE or K8S_POD_NAME: srcip-cni attaches Kubernetes pods only", s)
	}
	return a, nil
}

// hostVethName returns the name of the pod veth's host end for a container id and interface
// name: "srcip" + the first 10 hex digits of sha256(containerID "/" ifName), 15 bytes (the
// kernel's IFNAMSIZ - 1), stable across retries of the same attachment.
func hostVethName(containerID, ifName string) string {
	sum := sha256.Sum256([]byte(containerID + "/" + ifName))
	return "srcip" + hex.EncodeToString(sum[:])[:10]
}
