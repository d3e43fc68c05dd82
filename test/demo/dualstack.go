package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/yaml"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// v6Twin maps an IPv4 address of the demo to its IPv6 twin of the lab's plan (test/README.md, the
// lab's addresses): the last octet, written as it reads, behind the family's IPv6 prefix:
// 203.0.113.100 -> 2001:db8:0:113::100, 10.96.0.80 -> 2001:db8:96::80.
func v6Twin(v4 string) (string, error) {
	a, err := netip.ParseAddr(v4)
	if err != nil || !a.Is4() {
		return "", fmt.Errorf("%q is not an IPv4 address", v4)
	}
	b := a.As4()
	var pfx string
	switch {
	case b[0] == 203 && b[1] == 0 && b[2] == 113:
		pfx = "2001:db8:0:113::"
	case b[0] == 10 && b[1] == 96:
		pfx = "2001:db8:96::"
	default:
		return "", fmt.Errorf("%s: no IPv6 twin (only 203.0.113.0/24 and 10.96.0.0/16 have one)", v4)
	}
	return pfx + strconv.Itoa(int(b[3])), nil
}

// dualStack makes the lab's copy of svc (a SingleStack IPv4 Service) PreferDualStack: IPv6
// twins of its ClusterIP, LoadBalancer ingress IPs and externalIPs, and beside each of its IPv4
// EndpointSlices an IPv6 one with the same endpoints' pods' IPv6 addresses. It rewrites the file
// of the copy that holds the Service and returns the changed Service. A Service that already has
// the IPv6 family is returned as it is.
func dualStack(l *lab.Lab, svc *corev1.Service) (*corev1.Service, error) {
	for _, f := range svc.Spec.IPFamilies {
		if f == corev1.IPv6Protocol {
			return svc, nil
		}
	}
	ds := svc.DeepCopy()
	policy := corev1.IPFamilyPolicyPreferDualStack
	ds.Spec.IPFamilyPolicy = &policy
	ds.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	twin := func(ips []string) ([]string, error) {
		out := append([]string(nil), ips...)
		for _, ip := range ips {
			t, err := v6Twin(ip)
			if err != nil {
				return nil, fmt.Errorf("Service %s/%s: %w", svc.Namespace, svc.Name, err)
			}
			out = append(out, t)
		}
		return out, nil
	}
	var err error
	if ds.Spec.ClusterIP != "" && ds.Spec.ClusterIP != corev1.ClusterIPNone {
		if ds.Spec.ClusterIPs, err = twin([]string{ds.Spec.ClusterIP}); err != nil {
			return nil, err
		}
	}
	if ds.Spec.ExternalIPs, err = twin(ds.Spec.ExternalIPs); err != nil {
		return nil, err
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue
		}
		t, err := v6Twin(ing.IP)
		if err != nil {
			return nil, fmt.Errorf("Service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		ds.Status.LoadBalancer.Ingress = append(ds.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: t})
	}
	docs := [][]byte{}
	b, err := yaml.Marshal(ds)
	if err != nil {
		return nil, err
	}
	docs = append(docs, b)
	for _, es := range l.Manifests.EndpointSlices {
		if es.Namespace != svc.Namespace || es.Labels[discoveryv1.LabelServiceName] != svc.Name || es.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		es6 := es.DeepCopy()
		es6.Name += "-v6"
		es6.AddressType = discoveryv1.AddressTypeIPv6
		es6.Endpoints = nil
		for _, ep := range es.Endpoints {
			var addrs []string
			for _, a := range ep.Addresses {
				for _, p := range l.Pods {
					if p.IP.String() == a && p.IP6.IsValid() {
						addrs = append(addrs, p.IP6.String())
					}
				}
			}
			if len(addrs) > 0 {
				ep.Addresses = addrs
				es6.Endpoints = append(es6.Endpoints, ep)
			}
		}
		if b, err = yaml.Marshal(es6); err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
	if err := replaceDoc(l.ManifestsDir, "Service", svc.Namespace, svc.Name, bytes.Join(docs, []byte("---\n"))); err != nil {
		return nil, err
	}
	return ds, nil
}

// replaceDoc replaces, in the one manifest file of dir that holds it, the document of kind
// namespace/name by repl (one or more documents), rewriting that file in place.
func replaceDoc(dir, kind, namespace, name string, repl []byte) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		docs := strings.Split(string(data), "\n---\n")
		found := false
		for i, d := range docs {
			var m struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if yaml.Unmarshal([]byte(d), &m) != nil || m.Kind != kind || m.Metadata.Name != name {
				continue
			}
			if ns := m.Metadata.Namespace; ns != namespace && !(ns == "" && namespace == "default") {
				continue
			}
			docs[i], found = strings.TrimSuffix(string(repl), "\n"), true
		}
		if found {
			return os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o644)
		}
	}
	return fmt.Errorf("%s %s/%s: in no manifest file of %s", kind, namespace, name, dir)
}
