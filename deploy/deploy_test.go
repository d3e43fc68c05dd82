package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/ovs-srcip/ovs-srcip/test/kube"
)

const (
	namespace      = "ovs-srcip"
	serviceAccount = "srcip-agent"
	fieldManager   = "srcip-test"
	imageRepo      = "ghcr.io/ovs-srcip/srcip-agent"
	crdName        = "egressgateways.ovs-srcip.io"
)

var (
	// image is the release of ../VERSION: deploy/ is pinned to what `make image` writes.
	image  = imageRepo + ":" + release()
	crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	egwGVR = schema.GroupVersionResource{Group: "ovs-srcip.io", Version: "v1alpha1", Resource: "egressgateways"}
	saUser = "system:serviceaccount:" + namespace + ":" + serviceAccount
)

// release is the repository's VERSION (v0.1.0).
func release() string {
	b, err := os.ReadFile("../VERSION")
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(b))
}

// build renders deploy/crds and deploy/ with kustomize, in-process, as `kubectl apply -k
// deploy/crds && kubectl apply -k deploy/` would.
func build(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return append(buildDir(t, "crds"), buildDir(t, ".")...)
}

// buildDir renders one kustomization directory (relative to deploy/, or absolute).
func buildDir(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %v", r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			t.Fatalf("%s: %v", r.CurId(), err)
		}
		objs = append(objs, u)
	}
	return objs
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	t.Fatalf("kustomize output has no %s %s", kind, name)
	return nil
}

func convert[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

// agentFlags returns the long flag names srcip-agent accepts, from its --help.
func agentFlags(t *testing.T, subcommand ...string) map[string]bool {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "srcip-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/srcip-agent").CombinedOutput(); err != nil {
		t.Fatalf("go build srcip-agent: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, append(subcommand, "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("srcip-agent --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9_-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["node-name"] || (len(subcommand) == 0 && !flags["metrics-bind-address"]) {
		t.Fatalf("could not parse srcip-agent --help:\n%s", out)
	}
	return flags
}

// TestManifests checks the rendered objects without an API server.
func TestManifests(t *testing.T) {
	// The CRD alone in deploy/crds, so that `kubectl delete -k deploy/` keeps it and its objects.
	crds := buildDir(t, "crds")
	if len(crds) != 1 || crds[0].GetKind() != "CustomResourceDefinition" || crds[0].GetName() != crdName ||
		crds[0].GetLabels()["app.kubernetes.io/part-of"] != "ovs-srcip" {
		t.Errorf("deploy/crds: want only CRD %s labelled part-of ovs-srcip, got %d objects", crdName, len(crds))
	}
	objs := buildDir(t, ".")
	var got []string
	var setupCM, agentCM *unstructured.Unstructured
	for _, u := range objs {
		name := u.GetName()
		if u.GetKind() == "ConfigMap" && strings.HasPrefix(name, "srcip-node-setup-") {
			// configMapGenerator appends a hash of the content.
			name, setupCM = "srcip-node-setup-<hash>", u
		}
		if u.GetKind() == "ConfigMap" && strings.HasPrefix(name, "srcip-agent-") {
			name, agentCM = "srcip-agent-<hash>", u
		}
		got = append(got, u.GetKind()+"/"+name)
	}
	want := []string{
		"Namespace/ovs-srcip", "ServiceAccount/srcip-agent",
		"ClusterRole/srcip-agent", "ClusterRoleBinding/srcip-agent", "Role/srcip-agent-leases",
		"RoleBinding/srcip-agent-leases", "DaemonSet/srcip-agent", "ConfigMap/srcip-node-setup-<hash>",
		"ConfigMap/srcip-agent-<hash>",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("objects:\n got %v\nwant %v", got, want)
	}
	for _, u := range objs {
		if u.GetLabels()["app.kubernetes.io/part-of"] != "ovs-srcip" {
			t.Errorf("%s %s: no label app.kubernetes.io/part-of=ovs-srcip", u.GetKind(), u.GetName())
		}
	}

	ds := convert[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "srcip-agent"))
	ps := ds.Spec.Template.Spec
	if ds.Namespace != namespace || ps.ServiceAccountName != serviceAccount {
		t.Errorf("DaemonSet namespace %q, serviceAccountName %q", ds.Namespace, ps.ServiceAccountName)
	}
	if !ps.HostNetwork || ps.DNSPolicy != corev1.DNSClusterFirstWithHostNet || ps.PriorityClassName != "system-node-critical" {
		t.Errorf("hostNetwork %v, dnsPolicy %q, priorityClassName %q", ps.HostNetwork, ps.DNSPolicy, ps.PriorityClassName)
	}
	if len(ps.Tolerations) != 1 || ps.Tolerations[0].Operator != corev1.TolerationOpExists || ps.Tolerations[0].Key != "" {
		t.Errorf("tolerations %+v, want one that tolerates every taint", ps.Tolerations)
	}
	if u := ds.Spec.UpdateStrategy; u.Type != appsv1.RollingUpdateDaemonSetStrategyType ||
		u.RollingUpdate == nil || u.RollingUpdate.MaxUnavailable == nil || u.RollingUpdate.MaxUnavailable.IntValue() != 1 {
		t.Errorf("updateStrategy %+v", u)
	}
	if len(ps.Containers) != 2 || ps.Containers[0].Name != "srcip-agent" || ps.Containers[1].Name != "flow-restore" {
		t.Fatalf("%d containers, want srcip-agent and flow-restore", len(ps.Containers))
	}
	c := ps.Containers[0]
	if c.Image != image || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %q pull %q, want %q IfNotPresent", c.Image, c.ImagePullPolicy, image)
	}
	if !maps.Equal(ps.NodeSelector, map[string]string{"kubernetes.io/os": "linux"}) {
		t.Errorf("nodeSelector %v, want kubernetes.io/os=linux", ps.NodeSelector)
	}
	flags := agentFlags(t)
	args := map[string]string{}
	for _, a := range c.Args {
		name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("argument %q is not a srcip-agent flag", a)
		}
		args[name] = val
	}
	wantArgs := map[string]string{
		"node-name":            "$(NODE_NAME)",
		"ovsdb":                "unix:/var/run/openvswitch/db.sock",
		"ovs-rundir":           "/var/run/openvswitch",
		"metrics-bind-address": ":9464",
		"preserve-source-ip":   "$(PRESERVE_SOURCE_IP)",
		"flow-snapshot":        "/run/ovs-srcip/flows.snapshot",
	}
	for k, v := range wantArgs {
		if args[k] != v {
			t.Errorf("--%s=%q, want %q", k, args[k], v)
		}
	}
	// --preserve-source-ip comes from the generated ConfigMap srcip-agent, default annotated.
	if agentCM == nil {
		t.Fatal("no ConfigMap srcip-agent")
	}
	if data, _, _ := unstructured.NestedStringMap(agentCM.Object, "data"); !maps.Equal(data, map[string]string{"PRESERVE_SOURCE_IP": "annotated"}) {
		t.Errorf("ConfigMap %s data %v, want PRESERVE_SOURCE_IP=annotated", agentCM.GetName(), data)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		r := e.ValueFrom
		return e.Name == "PRESERVE_SOURCE_IP" && r != nil && r.ConfigMapKeyRef != nil &&
			r.ConfigMapKeyRef.Name == agentCM.GetName() && r.ConfigMapKeyRef.Key == "PRESERVE_SOURCE_IP"
	}) {
		t.Errorf("no env PRESERVE_SOURCE_IP from ConfigMap %s", agentCM.GetName())
	}
	var nodeNameEnv, memLimitEnv bool
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeNameEnv = true
		}
		if r := e.ValueFrom; e.Name == "GOMEMLIMIT" && r != nil && r.ResourceFieldRef != nil &&
			r.ResourceFieldRef.Resource == "limits.memory" && r.ResourceFieldRef.ContainerName == c.Name {
			memLimitEnv = true
		}
	}
	if !nodeNameEnv {
		t.Error("no env NODE_NAME from spec.nodeName")
	}
	if !memLimitEnv || c.Resources.Limits.Memory().IsZero() {
		t.Error("no env GOMEMLIMIT from the container's limits.memory (or no memory limit)")
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9464 {
		t.Errorf("ports %+v, want metrics 9464", c.Ports)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		want := "/healthz"
		if name == "readiness" {
			want = "/readyz"
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "metrics" || p.HTTPGet.Host != "" {
			t.Errorf("%s probe %+v, want httpGet %s on port metrics", name, p, want)
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsUser == nil || *sc.RunAsUser != 0 ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container securityContext %+v", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", c.Resources)
	}
	// hostPath volumes: OVS's sockets must exist (Directory); the rest belong to node-setup.
	hostPaths := map[string]corev1.HostPathType{
		"/var/run/openvswitch": corev1.HostPathDirectory,
		"/var/lib/ovs-srcip":   corev1.HostPathDirectoryOrCreate,
		"/opt/cni/bin":         corev1.HostPathDirectoryOrCreate,
		"/etc/cni/net.d":       corev1.HostPathDirectoryOrCreate,
		"/var/lib/cni":         corev1.HostPathDirectoryOrCreate,
		"/run/ovs-srcip":       corev1.HostPathDirectoryOrCreate,
	}
	volPath := map[string]string{}
	for _, v := range ps.Volumes {
		if v.HostPath == nil {
			continue
		}
		want, ok := hostPaths[v.HostPath.Path]
		if !ok || v.HostPath.Type == nil || *v.HostPath.Type != want {
			t.Errorf("hostPath volume %+v", v)
		}
		volPath[v.Name] = v.HostPath.Path
	}
	// The agent mounts OVS's run directory read-only and the flow snapshot's directory, each at
	// the same path; nothing else of the node.
	for _, m := range c.VolumeMounts {
		if p, ok := volPath[m.Name]; ok && (m.MountPath != p || !(p == "/var/run/openvswitch" && m.ReadOnly || p == "/run/ovs-srcip")) {
			t.Errorf("agent mounts hostPath %s at %s (readOnly %v)", p, m.MountPath, m.ReadOnly)
		}
	}
	checkFlowRestore(t, ps.Containers[1], c, volPath)
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return volPath[m.Name] == "/var/run/openvswitch" }) {
		t.Error("no hostPath /var/run/openvswitch mounted at /var/run/openvswitch")
	}
	delete(hostPaths, "/run/ovs-srcip") // the agent's and flow-restore's, not node-setup's
	checkNodeSetup(t, ps, volPath, hostPaths, setupCM)

	// RBAC: no wildcard, no Secrets or ConfigMaps, no write verb outside the allowed ones.
	writes := map[string][]string{
		"/events":                            {"create", "patch"},
		"events.k8s.io/events":               {"create", "patch"},
		"ovs-srcip.io/egressgateways/status": {"update", "patch"},
		"coordination.k8s.io/leases":         {"create", "update"},
	}
	var rules []rbacv1.PolicyRule
	rules = append(rules, convert[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "srcip-agent")).Rules...)
	role := convert[rbacv1.Role](t, find(t, objs, "Role", "srcip-agent-leases"))
	if role.Namespace != namespace {
		t.Errorf("Role namespace %q", role.Namespace)
	}
	rules = append(rules, role.Rules...)
	for _, r := range rules {
		if slices.Contains(r.APIGroups, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.Verbs, "*") || len(r.NonResourceURLs) > 0 {
			t.Errorf("wildcard or non-resource rule %+v", r)
		}
		if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "configmaps") {
			t.Errorf("rule %+v grants Secrets or ConfigMaps", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if !slices.Contains([]string{"get", "list", "watch"}, v) && !slices.Contains(writes[g+"/"+res], v) {
						t.Errorf("rule grants %s on %s/%s", v, g, res)
					}
				}
			}
		}
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		u := find(t, objs, kind, map[string]string{"ClusterRoleBinding": "srcip-agent", "RoleBinding": "srcip-agent-leases"}[kind])
		var subjects []rbacv1.Subject
		if kind == "ClusterRoleBinding" {
			subjects = convert[rbacv1.ClusterRoleBinding](t, u).Subjects
		} else {
			subjects = convert[rbacv1.RoleBinding](t, u).Subjects
		}
		if len(subjects) != 1 || subjects[0].Kind != "ServiceAccount" || subjects[0].Name != serviceAccount || subjects[0].Namespace != namespace {
			t.Errorf("%s subjects %+v", kind, subjects)
		}
	}
}

// checkFlowRestore: the flow-restore container runs `srcip-agent flow-restore --watch` on the
// agent's snapshot, with the agent's image and security context, and mounts OVS's run directory
// and the snapshot's directory read-only.
func checkFlowRestore(t *testing.T, fr, agent corev1.Container, volPath map[string]string) {
	t.Helper()
	if fr.Image != agent.Image || len(fr.Args) == 0 || fr.Args[0] != "flow-restore" {
		t.Errorf("flow-restore image %q args %v", fr.Image, fr.Args)
		return
	}
	flags := agentFlags(t, "flow-restore")
	args := map[string]string{}
	for _, a := range fr.Args[1:] {
		name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("argument %q is not a flow-restore flag", a)
		}
		args[name] = val
	}
	for k, v := range map[string]string{"watch": "", "snapshot": "/run/ovs-srcip/flows.snapshot", "ovs-rundir": "/var/run/openvswitch", "node-name": "$(NODE_NAME)"} {
		if got, ok := args[k]; !ok || got != v {
			t.Errorf("flow-restore --%s=%q, want %q", k, got, v)
		}
	}
	if !reflect.DeepEqual(fr.SecurityContext, agent.SecurityContext) {
		t.Errorf("flow-restore securityContext %+v, want the agent's", fr.SecurityContext)
	}
	mounts := map[string]bool{}
	for _, m := range fr.VolumeMounts {
		p, ok := volPath[m.Name]
		if !ok || m.MountPath != p || !m.ReadOnly {
			t.Errorf("flow-restore mounts %s (hostPath %q) at %s (readOnly %v)", m.Name, p, m.MountPath, m.ReadOnly)
		}
		mounts[p] = true
	}
	if !mounts["/var/run/openvswitch"] || !mounts["/run/ovs-srcip"] {
		t.Errorf("flow-restore mounts %v, want /var/run/openvswitch and /run/ovs-srcip", mounts)
	}
	if fr.Resources.Requests.Memory().IsZero() || fr.Resources.Limits.Memory().IsZero() {
		t.Errorf("flow-restore resources %+v", fr.Resources)
	}
}

// TestOverlayPreserveAll: an overlay that merges PRESERVE_SOURCE_IP=all into the ConfigMap
// srcip-agent (docs/install.md "Serving every Service") gets a DaemonSet whose agent reads all.
func TestOverlayPreserveAll(t *testing.T) {
	var cmName, mode, ref string
	for _, u := range buildOverlay(t, "resources: [BASE]\nconfigMapGenerator:\n  - name: srcip-agent\n    namespace: ovs-srcip\n    behavior: merge\n    literals: [PRESERVE_SOURCE_IP=all]\n") {
		switch {
		case u.GetKind() == "ConfigMap" && strings.HasPrefix(u.GetName(), "srcip-agent-"):
			cmName = u.GetName()
			mode, _, _ = unstructured.NestedString(u.Object, "data", "PRESERVE_SOURCE_IP")
		case u.GetKind() == "DaemonSet":
			ds := convert[appsv1.DaemonSet](t, u)
			for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "PRESERVE_SOURCE_IP" && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
					ref = e.ValueFrom.ConfigMapKeyRef.Name
				}
			}
		}
	}
	if mode != "all" || cmName == "" || ref != cmName {
		t.Errorf("overlay: ConfigMap %q PRESERVE_SOURCE_IP=%q, the agent's env refers to %q", cmName, mode, ref)
	}
}

// The overlay of docs/install.md "Routed pods", as written there, gives node-setup and the agent
// the same NON_MASQUERADE_CIDRS from one ConfigMap.
func TestOverlayRoutedPods(t *testing.T) {
	objs := buildOverlay(t, docOverlay(t, "# overlay/kustomization.yaml: routed pods"))
	var cmName, val string
	for _, u := range objs {
		if u.GetKind() == "ConfigMap" && strings.HasPrefix(u.GetName(), "srcip-node-setup-") {
			cmName = u.GetName()
			val, _, _ = unstructured.NestedString(u.Object, "data", "NON_MASQUERADE_CIDRS")
		}
	}
	if val != "192.168.10.0/24" {
		t.Fatalf("ConfigMap %q NON_MASQUERADE_CIDRS=%q, want 192.168.10.0/24", cmName, val)
	}
	ds := convert[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "srcip-agent"))
	for _, c := range []corev1.Container{ds.Spec.Template.Spec.InitContainers[0], ds.Spec.Template.Spec.Containers[0]} {
		ref := ""
		for _, e := range c.Env {
			if e.Name == "NON_MASQUERADE_CIDRS" && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				ref = e.ValueFrom.ConfigMapKeyRef.Name
			}
		}
		if ref != cmName {
			t.Errorf("container %s: NON_MASQUERADE_CIDRS from %q, want %q", c.Name, ref, cmName)
		}
		// Environment only (the flags' defaults): an older image ignores it.
		for _, a := range c.Args {
			if strings.Contains(a, "masquerade") {
				t.Errorf("container %s: argument %q (routed pods come from the environment)", c.Name, a)
			}
		}
	}
}

// An overlay with the Component components/labelled-nodes (docs/install.md "Some nodes first")
// runs the DaemonSet on Linux nodes labelled ovs-srcip.io/enabled=true only, and changes nothing
// else of it.
func TestComponentLabelledNodes(t *testing.T) {
	objs := buildOverlay(t, "resources: [BASE]\ncomponents: [BASE/components/labelled-nodes]\n")
	got := convert[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "srcip-agent"))
	want := convert[appsv1.DaemonSet](t, find(t, buildDir(t, "."), "DaemonSet", "srcip-agent"))
	if sel := got.Spec.Template.Spec.NodeSelector; !maps.Equal(sel, map[string]string{"kubernetes.io/os": "linux", "ovs-srcip.io/enabled": "true"}) {
		t.Errorf("nodeSelector %v", sel)
	}
	got.Spec.Template.Spec.NodeSelector = want.Spec.Template.Spec.NodeSelector
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("the component changed more than the nodeSelector")
	}
}

// buildOverlay renders an overlay of deploy/ whose kustomization.yaml is body with BASE replaced
// by the relative path of deploy/ (kustomize wants a relative base).
func buildOverlay(t *testing.T, body string) []*unstructured.Unstructured {
	t.Helper()
	base, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(strings.ReplaceAll(body, "BASE", rel)), 0o644); err != nil {
		t.Fatal(err)
	}
	return buildDir(t, dir)
}

// docOverlay is the fenced YAML block of docs/install.md whose first line is first, with
// ../deploy (the docs' path of the base) replaced by BASE.
func docOverlay(t *testing.T, first string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(" + regexp.QuoteMeta(first) + "\n.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatalf("docs/install.md has no yaml block starting %q", first)
	}
	return strings.ReplaceAll(string(m[1]), "../deploy", "BASE")
}

// The overlay of docs/install.md "The cluster's settings", as it is written there, appends the
// agent's --service-cidrs, --service-node-port-range, --external-ip-cidrs and
// --nodeport-addresses, each a flag of srcip-agent, and changes nothing else of the DaemonSet.
func TestOverlayClusterFlags(t *testing.T) {
	flags := agentFlags(t)
	objs := buildOverlay(t, docOverlay(t, "# overlay/kustomization.yaml: the cluster's settings"))
	got := convert[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "srcip-agent"))
	want := convert[appsv1.DaemonSet](t, find(t, buildDir(t, "."), "DaemonSet", "srcip-agent"))
	agent, wantAgent := got.Spec.Template.Spec.Containers[0], want.Spec.Template.Spec.Containers[0]
	n := len(wantAgent.Args)
	added := []string{"--service-cidrs=10.96.0.0/12", "--service-node-port-range=30000-32767", "--external-ip-cidrs=192.0.2.0/24", "--nodeport-addresses=192.0.2.0/24"}
	if agent.Name != "srcip-agent" || len(agent.Args) != n+len(added) || !slices.Equal(agent.Args[:n], wantAgent.Args) || !slices.Equal(agent.Args[n:], added) {
		t.Fatalf("agent args %v, want the base's + %v", agent.Args, added)
	}
	for _, a := range added {
		if name := strings.SplitN(strings.TrimPrefix(a, "--"), "=", 2)[0]; !flags[name] {
			t.Errorf("%s is not a srcip-agent flag", a)
		}
	}
	got.Spec.Template.Spec.Containers[0].Args = wantAgent.Args
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("the overlay changed more than the agent's args")
	}
}

// checkNodeSetup checks the init container that runs srcip-agent node-setup: privileged, every
// hostPath node-setup writes mounted at the node's own path, every argument a node-setup flag, its
// settings from the generated ConfigMap.
func checkNodeSetup(t *testing.T, ps corev1.PodSpec, volPath map[string]string, hostPaths map[string]corev1.HostPathType, cm *unstructured.Unstructured) {
	t.Helper()
	if len(ps.InitContainers) != 1 {
		t.Fatalf("%d init containers, want node-setup", len(ps.InitContainers))
	}
	ic := ps.InitContainers[0]
	if ic.Name != "node-setup" || ic.Image != image || ic.ImagePullPolicy != corev1.PullIfNotPresent || len(ic.Args) == 0 || ic.Args[0] != "node-setup" {
		t.Errorf("init container %s image %q args %v, want node-setup from %s", ic.Name, ic.Image, ic.Args, image)
	}
	if sc := ic.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("node-setup securityContext %+v, want privileged", sc)
	}
	mounted := map[string]bool{}
	for _, m := range ic.VolumeMounts {
		if p, ok := volPath[m.Name]; ok {
			if m.MountPath != p || m.ReadOnly {
				t.Errorf("node-setup mounts hostPath %s at %s (readOnly %v)", p, m.MountPath, m.ReadOnly)
			}
			mounted[p] = true
		}
	}
	for p := range hostPaths {
		if !mounted[p] {
			t.Errorf("node-setup does not mount hostPath %s", p)
		}
	}
	flags := agentFlags(t, "node-setup")
	args := map[string]string{}
	for _, a := range ic.Args[1:] {
		name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("argument %q is not a srcip-agent node-setup flag", a)
		}
		args[name] = val
	}
	for k, v := range map[string]string{
		"node-name": "$(NODE_NAME)", "nic": "$(NIC)", "cluster-cidrs": "$(CLUSTER_CIDRS)",
		"datapath-type": "$(DATAPATH_TYPE)", "mtu": "$(MTU)",
		"ovsdb": "unix:/var/run/openvswitch/db.sock", "ovs-rundir": "/var/run/openvswitch",
		"state-dir": "/var/lib/ovs-srcip", "cni-bin-dir": "/opt/cni/bin", "cni-conf-dir": "/etc/cni/net.d",
		"cni-data-dir": "/var/lib/cni/networks", "cni-source-dir": "/usr/local/lib/ovs-srcip/cni",
	} {
		if args[k] != v {
			t.Errorf("node-setup --%s=%q, want %q", k, args[k], v)
		}
	}
	// node-setup checks the agent's TCP ports before it changes anything: the agent's values.
	agentArgs := map[string]string{}
	for _, a := range ps.Containers[0].Args {
		name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		agentArgs[name] = val
	}
	for _, k := range []string{"metrics-bind-address", "debug-bind-address"} {
		if args[k] != agentArgs[k] || args[k] == "" {
			t.Errorf("node-setup --%s=%q, want the agent's %q", k, args[k], agentArgs[k])
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap srcip-node-setup")
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	wantData := map[string]string{"NIC": "auto", "CLUSTER_CIDRS": "10.244.0.0/16", "DATAPATH_TYPE": "system", "MTU": "0",
		"NON_MASQUERADE_CIDRS": "", "MASQUERADE_LINK_LOCAL": "false"}
	if !maps.Equal(data, wantData) {
		t.Errorf("ConfigMap %s data %v, want %v", cm.GetName(), data, wantData)
	}
	for _, e := range ic.Env {
		if r := e.ValueFrom; r != nil && r.ConfigMapKeyRef != nil {
			if _, ok := data[r.ConfigMapKeyRef.Key]; r.ConfigMapKeyRef.Name != cm.GetName() || !ok {
				t.Errorf("env %s from ConfigMap %s key %s: not in the generated ConfigMap %s", e.Name, r.ConfigMapKeyRef.Name, r.ConfigMapKeyRef.Key, cm.GetName())
			}
		}
	}
}

// TestLive applies the kustomization to a real kube-apiserver (etcd, RBAC) with server-side
// apply and checks the CRD's validation, the status subresource and the RBAC rules there.
func TestLive(t *testing.T) {
	objs := build(t)
	// StartT fails the test (never skips) when the control plane cannot start.
	cp := kube.StartT(t, kube.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(cp.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(u *unstructured.Unstructured, dryRun bool) *unstructured.Unstructured {
		t.Helper()
		gvr := mapping(t, cp.Client, u.GroupVersionKind())
		opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr.Resource)
		if gvr.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(gvr.Resource).Namespace(u.GetNamespace())
		}
		out, err := ri.Apply(ctx, u.GetName(), u, opts)
		if err != nil {
			t.Fatalf("apply %s %s (dry-run %v): %v", u.GetKind(), u.GetName(), dryRun, err)
		}
		return out
	}

	// The CRD first, and wait until the server serves it.
	apply(find(t, objs, "CustomResourceDefinition", crdName), false)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(crdGVR).Get(ctx, crdName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "NonStructuralSchema" && m["status"] == "True" {
				return false, fmt.Errorf("CRD schema is not structural: %v", m["message"])
			}
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("CRD %s not established: %v", crdName, err)
	}

	// Then the rest, the Namespace first; the DaemonSet also as a server-side dry run.
	var others []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() != "CustomResourceDefinition" {
			others = append(others, u)
		}
	}
	slices.SortStableFunc(others, func(a, b *unstructured.Unstructured) int {
		return boolInt(b.GetKind() == "Namespace") - boolInt(a.GetKind() == "Namespace")
	})
	for _, u := range others {
		if u.GetKind() == "DaemonSet" {
			apply(u, true)
		}
		apply(u, false)
	}
	ds, err := cp.Client.AppsV1().DaemonSets(namespace).Get(ctx, "srcip-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A Pod of the DaemonSet, as its controller would create it on node-1 (there is no
	// DaemonSet controller here): the server accepts it (priority class, Pod Security level of
	// the namespace) and defaults hostPort to 9464, so the scheduler keeps two such pods apart.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "srcip-agent-", Namespace: namespace, Labels: ds.Spec.Template.Labels},
		Spec:       *ds.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = "node-1"
	pod, err = cp.Client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("create a pod from the DaemonSet's template (dry run): %v", err)
	}
	if p := pod.Spec.Containers[0].Ports[0]; p.HostPort != 9464 {
		t.Errorf("pod hostPort %d, want 9464", p.HostPort)
	}
	if pod.Spec.Priority == nil || *pod.Spec.Priority < 2000000000 {
		t.Errorf("pod priority %v, want system-node-critical's", pod.Spec.Priority)
	}
	// Applying the same objects again changes nothing.
	gen := ds.Generation
	for _, u := range objs {
		apply(u, false)
	}
	if ds, err = cp.Client.AppsV1().DaemonSets(namespace).Get(ctx, "srcip-agent", metav1.GetOptions{}); err != nil || ds.Generation != gen {
		t.Errorf("second apply: DaemonSet generation %d -> %d (%v)", gen, ds.Generation, err)
	}

	t.Run("EgressGateway validation", func(t *testing.T) { testValidation(ctx, t, dyn) })
	t.Run("EgressGateway status subresource", func(t *testing.T) { testStatus(ctx, t, dyn, cp.RESTConfig) })
	t.Run("RBAC", func(t *testing.T) { testRBAC(ctx, t, cp.Client, cp.RESTConfig) })
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// mapping finds the resource of gvk through discovery (a new mapper each time, so that a CRD
// that has just been established is found).
func mapping(t *testing.T, c kubernetes.Interface, gvk schema.GroupVersionKind) *meta.RESTMapping {
	t.Helper()
	groups, err := restmapper.GetAPIGroupResources(c.Discovery())
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	m, err := restmapper.NewDiscoveryRESTMapper(groups).RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("no resource for %s: %v", gvk, err)
	}
	return m
}

// egressGateway returns a valid EgressGateway as JSON-like maps; mutate edits it.
func egressGateway(name string, mutate func(spec map[string]any)) *unstructured.Unstructured {
	spec := map[string]any{
		"namespaceSelector":   map[string]any{"matchLabels": map[string]any{"team": "payments"}},
		"podSelector":         map[string]any{"matchExpressions": []any{map[string]any{"key": "app", "operator": "In", "values": []any{"api", "worker"}}}},
		"destinations":        []any{"192.0.2.0/24", "198.51.100.0/24"},
		"egressIPs":           []any{"203.0.113.10"},
		"gatewayNodeSelector": map[string]any{"matchLabels": map[string]any{"node-role.kubernetes.io/egress": ""}},
	}
	if mutate != nil {
		mutate(spec)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ovs-srcip.io/v1alpha1",
		"kind":       "EgressGateway",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

func testValidation(ctx context.Context, t *testing.T, dyn dynamic.Interface) {
	egw := dyn.Resource(egwGVR)
	create := func(u *unstructured.Unstructured) error {
		_, err := egw.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
		return err
	}
	if err := create(egressGateway("valid", nil)); err != nil {
		t.Fatalf("a valid EgressGateway was rejected: %v", err)
	}
	valid := map[string]func(spec map[string]any){
		"ipv6": func(s map[string]any) {
			s["destinations"] = []any{"2001:db8::/32", "::/0"}
			s["egressIPs"] = []any{"2001:db8:ff::10"}
		},
		"pods-only": func(s map[string]any) { delete(s, "namespaceSelector") },
		"namespaces-only-any-gateway": func(s map[string]any) {
			delete(s, "podSelector")
			s["gatewayNodeSelector"] = map[string]any{}
		},
		"exists": func(s map[string]any) {
			s["podSelector"] = map[string]any{"matchExpressions": []any{map[string]any{"key": "egress", "operator": "Exists"}}}
		},
		"private-egress-ip": func(s map[string]any) { s["egressIPs"] = []any{"10.1.2.3"} },
		// Absent destinations: everything outside the cluster's networks (docs/egress.md).
		"default-destinations": func(s map[string]any) { delete(s, "destinations") },
		"excluded":             func(s map[string]any) { s["excludedDestinations"] = []any{"192.0.2.128/25"} },
		"two-ips":              func(s map[string]any) { s["egressIPs"] = []any{"203.0.113.10", "203.0.113.11"} },
	}
	for name, mutate := range valid {
		if err := create(egressGateway(name, mutate)); err != nil {
			t.Errorf("%s: a valid EgressGateway was rejected: %v", name, err)
		}
	}

	invalid := []struct {
		name   string
		mutate func(spec map[string]any)
		want   string // in the error message
	}{
		{"bad-cidr", func(s map[string]any) { s["destinations"] = []any{"192.0.2.0/33"} }, "must be a CIDR"},
		{"not-a-cidr", func(s map[string]any) { s["destinations"] = []any{"192.0.2.1"} }, "must be a CIDR"},
		{"host-bits", func(s map[string]any) { s["destinations"] = []any{"192.0.2.1/24"} }, "must be a network address without host bits"},
		{"duplicate-destinations", func(s map[string]any) { s["destinations"] = []any{"192.0.2.0/24", "192.0.2.0/24"} }, "Duplicate value"},
		{"bad-ip", func(s map[string]any) { s["egressIPs"] = []any{"203.0.113.300"} }, "must be an IPv4 or IPv6 address"},
		{"cidr-as-ip", func(s map[string]any) { s["egressIPs"] = []any{"203.0.113.0/24"} }, "must be an IPv4 or IPv6 address"},
		{"unspecified-ip", func(s map[string]any) { s["egressIPs"] = []any{"0.0.0.0"} }, "must be a unicast address"},
		{"multicast-ip", func(s map[string]any) { s["egressIPs"] = []any{"224.0.0.1"} }, "must be a unicast address"},
		{"missing-ip", func(s map[string]any) { delete(s, "egressIPs") }, "spec.egressIPs: Required value"},
		{"no-ips", func(s map[string]any) { s["egressIPs"] = []any{} }, "spec.egressIPs"},
		{"mixed-families", func(s map[string]any) { s["egressIPs"] = []any{"203.0.113.10", "2001:db8::10"} }, "one address family"},
		{"family-mismatch", func(s map[string]any) { s["destinations"] = []any{"192.0.2.0/24", "2001:db8::/32"} }, "address family"},
		{"missing-gateway-selector", func(s map[string]any) { delete(s, "gatewayNodeSelector") }, "spec.gatewayNodeSelector: Required value"},
		{"no-pod-selection", func(s map[string]any) {
			delete(s, "namespaceSelector")
			delete(s, "podSelector")
		}, "at least one of namespaceSelector and podSelector"},
		{"unknown-field", func(s map[string]any) { s["egressIP"] = "203.0.113.10" }, "unknown field"},
	}
	for _, tc := range invalid {
		u := egressGateway("invalid-"+tc.name, tc.mutate)
		// Server-side apply (dry run) rejects them all too, some already while building the
		// patch, with other errors.
		if _, err := egw.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: fieldManager, DryRun: []string{metav1.DryRunAll}}); err == nil {
			t.Errorf("%s: accepted by server-side apply", tc.name)
		}
		_, err := egw.Create(ctx, u, metav1.CreateOptions{FieldManager: fieldManager, FieldValidation: "Strict"})
		switch {
		case err == nil:
			t.Errorf("%s: accepted", tc.name)
		case !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err):
			t.Errorf("%s: rejected with %v, want a validation error", tc.name, err)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: error %q does not contain %q", tc.name, err, tc.want)
		}
	}
	if _, err := egw.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ovs-srcip.io/v1alpha1", "kind": "EgressGateway", "metadata": map[string]any{"name": "no-spec"},
	}}, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec: Required value") {
		t.Errorf("EgressGateway without spec: %v", err)
	}
}

func testStatus(ctx context.Context, t *testing.T, dyn dynamic.Interface, cfg *rest.Config) {
	egw := dyn.Resource(egwGVR)
	obj, err := egw.Apply(ctx, "status-test", egressGateway("status-test", nil), metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	gen := obj.GetGeneration()
	now := metav1.Now().Rfc3339Copy()
	status := map[string]any{
		"activeGateways": []any{map[string]any{"egressIP": "203.0.113.10", "node": "node-2"}},
		"conditions": []any{map[string]any{
			"type": "Ready", "status": "True", "reason": "GatewayElected", "message": "node-2 holds the lease",
			"lastTransitionTime": now.Format(time.RFC3339), "observedGeneration": gen,
		}},
	}
	// Writing status through the main resource is ignored...
	obj.Object["status"] = status
	obj, err = egw.Update(ctx, obj, metav1.UpdateOptions{FieldManager: fieldManager})
	if err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedMap(obj.Object, "status"); found {
		t.Errorf("status written through the main resource: %v", obj.Object["status"])
	}
	// ...and through /status, as the agent's ServiceAccount, it is written while spec changes
	// in the same request are ignored.
	sa := impersonate(t, cfg)
	saDyn, err := dynamic.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	obj.Object["status"] = status
	if err := unstructured.SetNestedStringSlice(obj.Object, []string{"198.51.100.99"}, "spec", "egressIPs"); err != nil {
		t.Fatal(err)
	}
	obj, err = saDyn.Resource(egwGVR).UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: fieldManager})
	if err != nil {
		t.Fatalf("update status as %s: %v", saUser, err)
	}
	if gws, _, _ := unstructured.NestedSlice(obj.Object, "status", "activeGateways"); len(gws) != 1 || gws[0].(map[string]any)["node"] != "node-2" {
		t.Errorf("status.activeGateways %v after UpdateStatus", gws)
	}
	if ips, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "egressIPs"); len(ips) != 1 || ips[0] != "203.0.113.10" {
		t.Errorf("spec.egressIPs changed to %q through /status", ips)
	}
	if obj.GetGeneration() != gen {
		t.Errorf("generation %d -> %d after a status update", gen, obj.GetGeneration())
	}
	// The agent patches status with server-side apply too.
	patch := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ovs-srcip.io/v1alpha1", "kind": "EgressGateway", "metadata": map[string]any{"name": "status-test"},
		"status": map[string]any{"nodes": []any{map[string]any{"node": "node-3", "observedGeneration": gen}}},
	}}
	if obj, err = saDyn.Resource(egwGVR).ApplyStatus(ctx, "status-test", patch, metav1.ApplyOptions{FieldManager: "srcip-agent", Force: true}); err != nil {
		t.Fatalf("apply status as %s: %v", saUser, err)
	} else if ns, _, _ := unstructured.NestedSlice(obj.Object, "status", "nodes"); len(ns) != 1 || ns[0].(map[string]any)["node"] != "node-3" {
		t.Errorf("status.nodes %v after ApplyStatus", ns)
	}
	// Conditions are validated like metav1.Condition.
	bad := obj.DeepCopy()
	if err := unstructured.SetNestedSlice(bad.Object, []any{map[string]any{
		"type": "Ready", "status": "Maybe", "reason": "no spaces allowed", "message": "",
		"lastTransitionTime": now.Format(time.RFC3339),
	}}, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	_, err = egw.UpdateStatus(ctx, bad, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.conditions[0].status") || !strings.Contains(err.Error(), "status.conditions[0].reason") {
		t.Errorf("invalid condition: %v", err)
	}
	// The printer columns are served.
	table := &metav1.Table{}
	raw, err := kubernetes.NewForConfigOrDie(cfg).Discovery().RESTClient().Get().AbsPath("/apis/ovs-srcip.io/v1alpha1/egressgateways/status-test").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, table); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if want := []string{"Name", "Egress IPs", "Gateways", "Ready", "Destinations", "Age"}; !slices.Equal(cols, want) {
		t.Errorf("columns %v, want %v", cols, want)
	}
	if len(table.Rows) != 1 || fmt.Sprint(table.Rows[0].Cells[1:4]) != `[["203.0.113.10"] node-2 True]` {
		t.Errorf("table rows %v", table.Rows)
	}
}

// impersonate returns cfg acting as the agent's ServiceAccount.
func impersonate(t *testing.T, cfg *rest.Config) *rest.Config {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: saUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	return c
}

func testRBAC(ctx context.Context, t *testing.T, admin kubernetes.Interface, cfg *rest.Config) {
	type check struct {
		verb, group, resource, sub, ns string
		allowed                        bool
	}
	checks := []check{
		{"list", "", "nodes", "", "", true},
		{"watch", "", "nodes", "", "", true},
		{"get", "", "nodes", "", "", true},
		{"list", "", "services", "", "", true},
		{"watch", "", "services", "", "", true},
		{"list", "discovery.k8s.io", "endpointslices", "", "", true},
		{"watch", "discovery.k8s.io", "endpointslices", "", "", true},
		{"list", "", "pods", "", "", true},
		{"watch", "", "pods", "", "", true},
		{"create", "", "events", "", "default", true},
		{"patch", "", "events", "", "kube-system", true},
		{"create", "events.k8s.io", "events", "", "default", true},
		{"patch", "events.k8s.io", "events", "", "default", true},
		{"list", "ovs-srcip.io", "egressgateways", "", "", true},
		{"watch", "ovs-srcip.io", "egressgateways", "", "", true},
		{"update", "ovs-srcip.io", "egressgateways", "status", "", true},
		{"patch", "ovs-srcip.io", "egressgateways", "status", "", true},
		{"get", "coordination.k8s.io", "leases", "", namespace, true},
		{"watch", "coordination.k8s.io", "leases", "", namespace, true},
		{"create", "coordination.k8s.io", "leases", "", namespace, true},
		{"update", "coordination.k8s.io", "leases", "", namespace, true},

		{"get", "", "secrets", "", namespace, false},
		{"list", "", "secrets", "", "", false},
		{"get", "", "configmaps", "", "kube-system", false},
		{"update", "", "services", "", "default", false},
		{"patch", "", "services", "", "default", false},
		{"update", "", "services", "status", "default", false},
		{"delete", "", "pods", "", "default", false},
		{"create", "", "pods", "", namespace, false},
		{"update", "", "pods", "status", "default", false},
		{"update", "", "nodes", "", "", false},
		{"patch", "", "nodes", "status", "", false},
		{"create", "discovery.k8s.io", "endpointslices", "", "default", false},
		{"delete", "", "events", "", "default", false},
		{"create", "ovs-srcip.io", "egressgateways", "", "", false},
		{"update", "ovs-srcip.io", "egressgateways", "", "", false},
		{"patch", "ovs-srcip.io", "egressgateways", "", "", false},
		{"delete", "ovs-srcip.io", "egressgateways", "", "", false},
		{"get", "coordination.k8s.io", "leases", "", "kube-system", false},
		{"update", "coordination.k8s.io", "leases", "", "kube-node-lease", false},
		{"delete", "coordination.k8s.io", "leases", "", namespace, false},
		{"get", "apiextensions.k8s.io", "customresourcedefinitions", "", "", false},
		{"create", "authentication.k8s.io", "serviceaccounts", "token", namespace, false},
	}
	for _, c := range checks {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   saUser,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: c.verb, Group: c.group, Resource: c.resource, Subresource: c.sub, Namespace: c.ns,
			},
		}}
		if c.resource == "serviceaccounts" {
			sar.Spec.ResourceAttributes.Group = ""
		}
		res, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		if res.Status.Allowed != c.allowed {
			t.Errorf("%s %s/%s/%s in %q: allowed=%v, want %v (%s)", c.verb, c.group, c.resource, c.sub, c.ns,
				res.Status.Allowed, c.allowed, res.Status.Reason)
		}
	}

	// The same through real requests as the ServiceAccount.
	sa, err := kubernetes.NewForConfig(impersonate(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list nodes as the agent: %v", err)
	}
	if _, err := sa.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.Errorf("list endpointslices as the agent: %v", err)
	}
	if _, err := sa.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-1"}); err != nil {
		t.Errorf("list this node's pods as the agent: %v", err)
	}
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "srcip-agent-", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: "default", Name: "web", APIVersion: "v1"},
		Reason:         "NoEndpoints", Message: "test", Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: "srcip-agent", Host: "node-1"},
	}
	if _, err := sa.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Errorf("create an event as the agent: %v", err)
	}
	if _, err := sa.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list secrets as the agent: %v, want Forbidden", err)
	}
	saDyn, err := dynamic.NewForConfig(impersonate(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := saDyn.Resource(egwGVR).Get(ctx, "valid", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get an EgressGateway as the agent: %v", err)
	}
	if err := unstructured.SetNestedField(obj.Object, "203.0.113.11", "spec", "egressIP"); err != nil {
		t.Fatal(err)
	}
	if _, err := saDyn.Resource(egwGVR).Update(ctx, obj, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("update an EgressGateway's spec as the agent: %v, want Forbidden", err)
	}
	if err := sa.CoreV1().Pods("default").Delete(ctx, "any", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("delete a pod as the agent: %v, want Forbidden", err)
	}
}
