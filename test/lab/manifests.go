package lab

import (
	"bufio"
	"bytes"
	"fmt"
	"github.com/ovs-srcip/ovs-srcip/agent"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/yaml"
)

// Manifests is the set of Kubernetes objects a lab is built from. It holds the
// same objects the agent reads in --manifests mode.
type Manifests struct {
	Nodes          []corev1.Node
	Pods           []corev1.Pod
	Services       []corev1.Service
	EndpointSlices []discoveryv1.EndpointSlice
	// Skipped lists "file: kind name" of documents of kinds the lab ignores.
	Skipped []string
}

// LoadManifests reads every *.yaml / *.yml / *.json file of dir (not recursive).
// A file may hold several documents separated by "---" lines, and a document may
// be a v1 List. Nodes, Pods, Services and EndpointSlices are kept; other kinds
// are recorded in Skipped. The result is sorted by name for stable lab layouts.
func LoadManifests(dir string) (*Manifests, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read manifests dir %s: %w", dir, err)
	}
	m := &Manifests{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json")) {
			continue
		}
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read manifest %s: %w", path, err)
		}
		for i, doc := range splitYAMLDocs(data) {
			if err := m.addDoc(doc); err != nil {
				return nil, fmt.Errorf("manifest %s document %d: %w", path, i+1, err)
			}
		}
	}
	sort.Slice(m.Nodes, func(i, j int) bool { return m.Nodes[i].Name < m.Nodes[j].Name })
	sort.Slice(m.Pods, func(i, j int) bool {
		return key(m.Pods[i].Namespace, m.Pods[i].Name) < key(m.Pods[j].Namespace, m.Pods[j].Name)
	})
	sort.Slice(m.Services, func(i, j int) bool {
		return key(m.Services[i].Namespace, m.Services[i].Name) < key(m.Services[j].Namespace, m.Services[j].Name)
	})
	sort.Slice(m.EndpointSlices, func(i, j int) bool {
		return key(m.EndpointSlices[i].Namespace, m.EndpointSlices[i].Name) < key(m.EndpointSlices[j].Namespace, m.EndpointSlices[j].Name)
	})
	if len(m.Nodes) == 0 {
		return nil, fmt.Errorf("manifests dir %s: no Node objects", dir)
	}
	return m, nil
}

func key(ns, name string) string { return ns + "/" + name }

// splitYAMLDocs splits on lines that are exactly "---" (optionally followed by
// a comment or spaces) and drops empty documents.
func splitYAMLDocs(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if len(bytes.TrimSpace(stripComments(cur.Bytes()))) > 0 {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "---") && strings.TrimSpace(strings.SplitN(line[3:], "#", 2)[0]) == "" {
			flush()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	flush()
	return docs
}

func stripComments(b []byte) []byte {
	var out bytes.Buffer
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		out.WriteString(l)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

func (m *Manifests) addDoc(doc []byte) error {
	var tm typeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("parse type meta: %w", err)
	}
	switch tm.Kind {
	case "List":
		var l struct {
			Items []map[string]any `json:"items"`
		}
		if err := yaml.Unmarshal(doc, &l); err != nil {
			return fmt.Errorf("parse List: %w", err)
		}
		for i, it := range l.Items {
			b, err := yaml.Marshal(it)
			if err != nil {
				return fmt.Errorf("List item %d: %w", i, err)
			}
			if err := m.addDoc(b); err != nil {
				return fmt.Errorf("List item %d: %w", i, err)
			}
		}
		return nil
	case "Node":
		var o corev1.Node
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return fmt.Errorf("parse Node: %w", err)
		}
		m.Nodes = append(m.Nodes, o)
	case "Pod":
		var o corev1.Pod
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return fmt.Errorf("parse Pod: %w", err)
		}
		if o.Namespace == "" {
			o.Namespace = "default"
		}
		m.Pods = append(m.Pods, o)
	case "Service":
		var o corev1.Service
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return fmt.Errorf("parse Service: %w", err)
		}
		if o.Namespace == "" {
			o.Namespace = "default"
		}
		m.Services = append(m.Services, o)
	case "EndpointSlice":
		var o discoveryv1.EndpointSlice
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return fmt.Errorf("parse EndpointSlice: %w", err)
		}
		if o.Namespace == "" {
			o.Namespace = "default"
		}
		m.EndpointSlices = append(m.EndpointSlices, o)
	case "":
		return fmt.Errorf("document without kind")
	default:
		m.Skipped = append(m.Skipped, tm.Kind+" "+tm.Metadata.Name)
	}
	return nil
}

// Service returns the Service namespace/name, or nil.
func (m *Manifests) Service(namespace, name string) *corev1.Service {
	for i := range m.Services {
		if m.Services[i].Namespace == namespace && m.Services[i].Name == name {
			return &m.Services[i]
		}
	}
	return nil
}

// nodeFacts returns a Node's IPv4 InternalIP and first IPv4 pod CIDR, read exactly as the agent
// reads them (agent.ConvertNode), so the lab and the agent agree on the topology.
func nodeFacts(n *corev1.Node) (netip.Addr, netip.Prefix, error) {
	fn, err := agent.ConvertNode(n)
	if err != nil {
		return netip.Addr{}, netip.Prefix{}, err
	}
	if len(fn.PodCIDRs) == 0 {
		return netip.Addr{}, netip.Prefix{}, fmt.Errorf("node %s: no IPv4 spec.podCIDRs", n.Name)
	}
	return fn.InternalIP, fn.PodCIDRs[0], nil
}

// nodeFacts6 returns a Node's IPv6 InternalIP and IPv6 pod CIDR (status.addresses and
// spec.podCIDRs, by family, never by index), both invalid on an IPv4-only Node. A Node with only
// one of the two is refused: the lab would give it IPv6 pods it cannot route, or the reverse.
func nodeFacts6(n *corev1.Node) (netip.Addr, netip.Prefix, error) {
	var ip netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if x, err := netip.ParseAddr(a.Address); err == nil && x.Is6() && !x.Is4In6() && !ip.IsValid() {
			ip = x
		}
	}
	var cidr netip.Prefix
	for _, c := range n.Spec.PodCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return ip, cidr, fmt.Errorf("node %s: podCIDR %q: %w", n.Name, c, err)
		}
		if p.Addr().Is6() && !cidr.IsValid() {
			cidr = p.Masked()
		}
	}
	if ip.IsValid() != cidr.IsValid() {
		return ip, cidr, fmt.Errorf("node %s: IPv6 InternalIP %v and IPv6 pod CIDR %v: give both or neither", n.Name, ip, cidr)
	}
	return ip, cidr, nil
}
