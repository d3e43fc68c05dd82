package nodesetup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Conflist is the CNI network configuration list node-setup writes (CNI spec 1.1): srcip-cni,
// then the reference portmap plugin (PortmapConfig).
type Conflist struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	// Plugins are a PluginConfig and a PortmapConfig, in that order.
	Plugins []any `json:"plugins"`
}

// PortmapConfig is the entry of the reference portmap plugin, chained after srcip-cni: the
// runtime passes the pod's hostPorts (capability portMappings; kubelet hands them to containerd),
// and portmap DNATs hostIP:hostPort to the pod address srcip-cni returned, in its own nftables
// table ip cni_hostport (backend nftables, as kube-proxy's nftables mode: no iptables on the node
// needed). Its snat (default true) masquerades only hairpin (the pod to its own hostPort) and
// 127.0.0.1 sources (hostIP 127.0.0.1, after route_localnet on srcip-gw0); every other client's
// address reaches the pod unchanged.
type PortmapConfig struct {
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
	Backend      string          `json:"backend"`
}

// PluginConfig is srcip-cni's entry of the conflist.
type PluginConfig struct {
	Type      string     `json:"type"`
	Bridge    string     `json:"bridge"`
	OVSDB     string     `json:"ovsdb"`
	OVSRunDir string     `json:"ovsRunDir"`
	MTU       int        `json:"mtu"`
	FlowWait  string     `json:"flowWait"`
	IPAM      IPAMConfig `json:"ipam"`
}

// IPAMConfig is host-local's configuration: one range set per family, each with a range per pod
// CIDR of that family (IPv4 first; a pod gets one address of each range set).
type IPAMConfig struct {
	Type    string        `json:"type"`
	Ranges  [][]IPAMRange `json:"ranges"`
	Routes  []IPAMRoute   `json:"routes"`
	DataDir string        `json:"dataDir"`
}

// IPAMRange is one host-local range.
type IPAMRange struct {
	Subnet  string `json:"subnet"`
	Gateway string `json:"gateway"`
}

// IPAMRoute is one route host-local returns for the pod.
type IPAMRoute struct {
	Dst string `json:"dst"`
}

// RenderConflist returns the conflist for the node's pod CIDRs (the gateway of each is its
// first address, held by the host on the gateway port): host-local gets a range set per family
// (IPv4, then IPv6) and a default route per family ("0.0.0.0/0", "::/0"), so that a pod of a
// dual-stack node gets an address and a default route of each. A v4-only node's conflist is
// byte for byte the IPv4-only releases'.
func RenderConflist(bridge, ovsdb, ovsRunDir string, mtu int, flowWait time.Duration, dataDir string, podCIDRs []netip.Prefix) ([]byte, error) {
	var ranges [][]IPAMRange
	var routes []IPAMRoute
	for _, fam := range []struct {
		v4  bool
		dst string
	}{{true, "0.0.0.0/0"}, {false, "::/0"}} {
		var rs []IPAMRange
		for _, p := range podCIDRs {
			if p.Addr().Is4() == fam.v4 {
				rs = append(rs, IPAMRange{Subnet: p.Masked().String(), Gateway: GatewayPrefix(p).Addr().String()})
			}
		}
		if len(rs) > 0 {
			ranges = append(ranges, rs)
			routes = append(routes, IPAMRoute{Dst: fam.dst})
		}
	}
	cl := Conflist{CNIVersion: "1.1.0", Name: NetworkName, Plugins: []any{
		PluginConfig{
			Type: "srcip-cni", Bridge: bridge, OVSDB: ovsdb, OVSRunDir: ovsRunDir, MTU: mtu,
			FlowWait: flowWait.String(),
			IPAM:     IPAMConfig{Type: "host-local", Ranges: ranges, Routes: routes, DataDir: dataDir},
		},
		PortmapConfig{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}, Backend: "nftables"},
	}}
	b, err := json.MarshalIndent(cl, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func (r *run) installCNI() error {
	c := r.cfg
	if err := os.MkdirAll(c.CNIBinDir, 0o755); err != nil {
		return err
	}
	rec, err := readCNIRecord(c.CNIBinDir)
	if err != nil {
		return err
	}
	for _, name := range CNIPlugins {
		src := filepath.Join(c.CNISourceDir, name)
		want, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("plugin %s: %w (--cni-source-dir must hold %v; the image has them in %s)", name, err, CNIPlugins, DefaultCNISourceDir)
		}
		dst := filepath.Join(c.CNIBinDir, name)
		have, err := os.ReadFile(dst)
		if err == nil && bytes.Equal(have, want) {
			r.unchanged("%s", dst)
			continue
		}
		switch {
		case rec.owns(name):
		case name == "srcip-cni" && err == nil:
			// Ours by its name (a node-setup before the record installed it): replaced, and
			// removed by node-teardown as always.
		case errors.Is(err, os.ErrNotExist):
			// Not there: node-setup's, removed by node-teardown.
			rec.Installed = append(rec.Installed, name)
		case err != nil:
			return err
		default:
			// Another binary of that name (the distribution's CNI plugins, another CNI's): kept
			// in CNIRecordBackupDir and put back by node-teardown.
			if err := writeFileSync(filepath.Join(c.CNIBinDir, CNIRecordBackupDir), name, have); err != nil {
				return fmt.Errorf("keep the node's own %s: %w", dst, err)
			}
			rec.Replaced = append(rec.Replaced, name)
			r.changed("kept the node's own %s in %s (node-teardown puts it back)", dst, filepath.Join(c.CNIBinDir, CNIRecordBackupDir))
		}
		// The record first: a run interrupted after the install still knows the file is its own.
		if err := writeCNIRecord(c.CNIBinDir, rec); err != nil {
			return err
		}
		// A new file renamed over the old one: a running plugin process keeps its binary, and
		// the runtime never executes a half-written file.
		tmp, err := os.CreateTemp(c.CNIBinDir, "."+name+".tmp-")
		if err != nil {
			return fmt.Errorf("%w (--cni-bin-dir must be writable)", err)
		}
		_, werr := tmp.Write(want)
		serr := tmp.Sync()
		cerr := tmp.Close()
		if err := errors.Join(werr, serr, cerr, os.Chmod(tmp.Name(), 0o755)); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("write %s: %w", dst, err)
		}
		if err := os.Rename(tmp.Name(), dst); err != nil {
			os.Remove(tmp.Name())
			return err
		}
		r.changed("installed %s", dst)
	}

	conf, err := RenderConflist(c.BridgeInt, c.OVSDB, c.OVSRunDir, c.MTU, c.FlowWait, c.CNIDataDir, c.PodCIDRs)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.CNIConfDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(c.CNIConfDir, ConflistName)
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, conf) {
		r.unchanged("%s", path)
		return nil
	}
	// In place (open, truncate, write), never renamed: containerd's watcher of the CNI config
	// directory ignores a file renamed into it.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("%w (--cni-conf-dir must be writable)", err)
	}
	_, werr := io.Copy(f, bytes.NewReader(conf))
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	r.changed("wrote %s (pod CIDRs %v, MTU %d)", path, c.PodCIDRs, c.MTU)
	return nil
}

// removeCNI removes the conflist, the plugins node-setup put in place (the CNIRecord: those it
// installed are removed, those it replaced get the node's own binary back; srcip-cni always
// goes), and host-local's allocations of the network. A plugin that was on the node before
// node-setup, with the same content, is left: the distribution's CNI plugins and the next CNI
// need it.
func (r *run) removeCNI() error {
	c := r.cfg
	var errs []error
	rec, err := readCNIRecord(c.CNIBinDir)
	if err != nil {
		return err
	}
	paths := []string{filepath.Join(c.CNIConfDir, ConflistName), filepath.Join(c.CNIBinDir, "srcip-cni")}
	for _, name := range rec.Installed {
		if name != "srcip-cni" {
			paths = append(paths, filepath.Join(c.CNIBinDir, name))
		}
	}
	for _, p := range paths {
		switch err := os.Remove(p); {
		case err == nil:
			r.changed("removed %s", p)
		case errors.Is(err, os.ErrNotExist):
			r.unchanged("no %s", p)
		default:
			errs = append(errs, err)
		}
	}
	backup := filepath.Join(c.CNIBinDir, CNIRecordBackupDir)
	for _, name := range rec.Replaced {
		dst := filepath.Join(c.CNIBinDir, name)
		if err := os.Rename(filepath.Join(backup, name), dst); err != nil {
			errs = append(errs, fmt.Errorf("put back the node's own %s: %w", dst, err))
			continue
		}
		r.changed("put back the node's own %s", dst)
	}
	for _, name := range CNIPlugins {
		if name != "srcip-cni" && !rec.owns(name) {
			if _, err := os.Stat(filepath.Join(c.CNIBinDir, name)); err == nil {
				r.unchanged("kept %s: it was on the node before node-setup", filepath.Join(c.CNIBinDir, name))
			}
		}
	}
	if len(errs) == 0 {
		for _, p := range []string{backup, filepath.Join(c.CNIBinDir, CNIRecordFile)} {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	data := filepath.Join(c.CNIDataDir, NetworkName)
	if _, err := os.Stat(data); err == nil {
		if err := os.RemoveAll(data); err != nil {
			errs = append(errs, err)
		} else {
			r.changed("removed host-local's allocations %s", data)
		}
	}
	return errors.Join(errs...)
}

// CNIRecordFile, in CNIBinDir, records which plugins node-setup put there (CNIRecord), so that
// node-teardown removes only those; CNIRecordBackupDir, also in CNIBinDir, holds the node's own
// binaries node-setup replaced. Both live beside the plugins (each node has its own CNIBinDir),
// hidden (the runtime looks plugins up by name).
const (
	CNIRecordFile      = ".ovs-srcip-plugins.json"
	CNIRecordBackupDir = ".ovs-srcip-replaced"
)

// CNIRecord is CNIRecordFile's content: plugin names (CNIPlugins).
type CNIRecord struct {
	// Installed were not on the node: node-teardown removes them.
	Installed []string `json:"installed,omitempty"`
	// Replaced were, with other content: node-teardown puts the kept binary back.
	Replaced []string `json:"replaced,omitempty"`
}

func (r *CNIRecord) owns(name string) bool {
	return slices.Contains(r.Installed, name) || slices.Contains(r.Replaced, name)
}

// readCNIRecord reads dir's CNIRecordFile; none is an empty record (a node node-setup has not
// installed on, or one an older node-setup installed on: then teardown removes srcip-cni only).
func readCNIRecord(dir string) (CNIRecord, error) {
	var rec CNIRecord
	b, err := os.ReadFile(filepath.Join(dir, CNIRecordFile))
	if errors.Is(err, os.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s: %w", filepath.Join(dir, CNIRecordFile), err)
	}
	return rec, nil
}

func writeCNIRecord(dir string, rec CNIRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return writeFileSync(dir, CNIRecordFile, append(b, '\n'))
}

// writeFileSync writes dir/name (mode 0755, dir made if missing) through a synced temporary
// file renamed over it.
func writeFileSync(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Sync(), tmp.Close(), os.Chmod(tmp.Name(), 0o755)); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}
