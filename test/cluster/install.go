package cluster

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubernetesService makes the "kubernetes" Service reach the API server (the test control plane
// runs with --endpoint-reconciler-type=none): an EndpointSlice with the link address and port, so
// that kube-proxy on the nodes DNATs 10.96.0.1:443 to it and in-cluster clients (the DaemonSet's
// agent) work.
func (c *Cluster) kubernetesService(ctx context.Context) error {
	cs := c.Client
	svc, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		svc, err = cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1",
				Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("kubernetes Service: %w", err)
	}
	name, port, proto := "https", int32(c.CP.APIServerPort), corev1.ProtocolTCP
	if len(svc.Spec.Ports) > 0 {
		name = svc.Spec.Ports[0].Name
	}
	ready := true
	_, err = cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes-lab", Namespace: "default",
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "test-cluster"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{c.linkIP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("kubernetes EndpointSlice: %w", err)
	}
	return nil
}

// withLibraries returns the paths of programs (looked up in PATH) and of every shared library
// they load (DT_NEEDED, recursively, and the ELF interpreter), for an image that runs the host's
// dynamically linked binaries.
func withLibraries(progs ...string) ([]string, error) {
	seen := map[string]bool{}
	var walk func(path string) error
	walk = func(path string) error {
		if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
			// The image gets the file under the name it is looked up by.
			if seen[path] {
				return nil
			}
			seen[path] = true
			return walkELF(real, walk)
		}
		if seen[path] {
			return nil
		}
		seen[path] = true
		return walkELF(path, walk)
	}
	for _, p := range progs {
		path, err := exec.LookPath(p)
		if err != nil {
			return nil, err
		}
		if err := walk(path); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu", "/lib64", "/lib", "/usr/lib"}

func walkELF(path string, walk func(string) error) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				interp := string(b[:len(b)-1])
				if err := walk(interp); err != nil {
					return err
				}
			}
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	for _, l := range libs {
		found := ""
		for _, d := range libDirs {
			if _, err := os.Stat(filepath.Join(d, l)); err == nil {
				found = filepath.Join(d, l)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("library %s of %s not found in %v", l, path, libDirs)
		}
		if err := walk(found); err != nil {
			return err
		}
	}
	return nil
}
