package deploy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const chart = "helm/ovs-srcip"

// helmBin builds (or finds in its cache) the Helm CLI of hack/helm (helm.sh/helm/v3 from the Go
// module proxy).
func helmBin(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("../hack/helm/build.sh").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("hack/helm/build.sh: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// helmTemplate renders the chart as `helm template ovs-srcip deploy/helm/ovs-srcip --namespace
// kube-system ARGS...`.
func helmTemplate(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	cmd := exec.Command(helmBin(t), append([]string{"template", "ovs-srcip", chart, "--namespace", "kube-system"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("helm template output: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

var generatedSuffix = regexp.MustCompile(`^(srcip-node-setup|srcip-agent)-[a-z0-9]{10}$`)

// normalize drops what is allowed to differ between the chart and the base: the objects' labels
// (the chart adds Helm's), the CRD's helm.sh/resource-policy, the pod template's config hash, and
// the hash suffix of the base's generated ConfigMap names (in the names and the references).
func normalize(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, u := range objs {
		u = u.DeepCopy()
		u.SetLabels(nil)
		a := u.GetAnnotations()
		delete(a, "helm.sh/resource-policy")
		if len(a) == 0 {
			a = nil
		}
		u.SetAnnotations(a)
		unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "annotations")
		b, err := json.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		s := regexp.MustCompile(`"(srcip-node-setup|srcip-agent)-[a-z0-9]{10}"`).ReplaceAllString(string(b), `"$1"`)
		name := u.GetName()
		if m := generatedSuffix.FindStringSubmatch(name); m != nil && u.GetKind() == "ConfigMap" {
			name = m[1]
		}
		out[u.GetKind()+"/"+u.GetNamespace()+"/"+name] = s
	}
	return out
}

func compare(t *testing.T, what string, helm, kustomize []*unstructured.Unstructured) {
	t.Helper()
	h, k := normalize(t, helm), normalize(t, kustomize)
	for key, kv := range k {
		hv, ok := h[key]
		switch {
		case !ok:
			t.Errorf("%s: helm template has no %s", what, key)
		case hv != kv:
			t.Errorf("%s: %s differs:\n helm      %s\n kustomize %s", what, key, hv, kv)
		}
	}
	for key := range h {
		if _, ok := k[key]; !ok {
			t.Errorf("%s: helm template has %s, kustomize build has not", what, key)
		}
	}
}

// The chart with its default values renders the objects of deploy/crds and deploy/, modulo
// labels; the CRD carries helm.sh/resource-policy: keep (helm uninstall leaves it and its
// EgressGateways) unless crds.keep=false, and is left out with crds.install=false.
func TestHelmTemplateMatchesKustomize(t *testing.T) {
	objs := helmTemplate(t)
	compare(t, "default values", objs, build(t))
	for _, u := range objs {
		if u.GetLabels()["app.kubernetes.io/part-of"] != "ovs-srcip" || u.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%s %s labels %v", u.GetKind(), u.GetName(), u.GetLabels())
		}
	}
	crd := find(t, objs, "CustomResourceDefinition", crdName)
	if crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("CRD annotations %v, want helm.sh/resource-policy: keep", crd.GetAnnotations())
	}
	crd = find(t, helmTemplate(t, "--set", "crds.keep=false"), "CustomResourceDefinition", crdName)
	if _, ok := crd.GetAnnotations()["helm.sh/resource-policy"]; ok {
		t.Errorf("crds.keep=false: CRD annotations %v", crd.GetAnnotations())
	}
	for _, u := range helmTemplate(t, "--set", "crds.install=false") {
		if u.GetKind() == "CustomResourceDefinition" {
			t.Errorf("crds.install=false renders the CRD")
		}
	}
	// The chart follows the release: appVersion and version are VERSION's.
	b, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nappVersion: " + release() + "\n", "\nversion: " + strings.TrimPrefix(release(), "v") + "\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Chart.yaml lacks %q", strings.TrimSpace(want))
		}
	}
}

// The real-kubelet lab's values (test/cluster/install/testdata/values.yaml: the lab's node set-up
// settings and the ovs-srcip.io/enabled node selector) render what its kustomize overlay does
// (testdata/overlay: the Component labelled-nodes), plus deploy/crds.
func TestHelmLabValuesMatchLabOverlay(t *testing.T) {
	objs := helmTemplate(t, "--values", "../test/cluster/install/testdata/values.yaml")
	kobjs := append(buildDir(t, "crds"), buildDir(t, "../test/cluster/install/testdata/overlay")...)
	compare(t, "lab values", objs, kobjs)
}

// The chart's agent values pass the cluster's settings (docs/install.md "The cluster's
// settings") as the agent's flags, each a flag of srcip-agent, after the base's args; extraArgs
// append to the agent's and to node-setup's. With the defaults none is passed
// (TestHelmTemplateMatchesKustomize).
func TestHelmAgentClusterValues(t *testing.T) {
	agentF, setupF := agentFlags(t), agentFlags(t, "node-setup")
	base := convert[appsv1.DaemonSet](t, find(t, helmTemplate(t), "DaemonSet", "srcip-agent"))
	ds := convert[appsv1.DaemonSet](t, find(t, helmTemplate(t,
		"--set", "agent.serviceCIDRs={10.96.0.0/12,10.97.0.0/16}",
		"--set", "agent.serviceNodePortRange=30000-32000",
		"--set", "agent.externalIPCIDRs={192.0.2.0/24}",
		"--set", "agent.nodePortAddresses={192.0.2.0/24}",
		"--set", "agent.extraArgs={--conntrack-zone-limit-percent=30}",
		"--set", "nodeSetup.extraArgs={--geneve-port=6082}",
	), "DaemonSet", "srcip-agent"))
	check := func(what string, got, base []string, added []string, flags map[string]bool) {
		t.Helper()
		n := len(base)
		if len(got) != n+len(added) || !slices.Equal(got[:n], base) || !slices.Equal(got[n:], added) {
			t.Errorf("%s args %v, want the defaults' + %v", what, got, added)
		}
		for _, a := range added {
			if name := strings.SplitN(strings.TrimPrefix(a, "--"), "=", 2)[0]; !flags[name] {
				t.Errorf("%s: %s is not a flag", what, a)
			}
		}
	}
	check("agent", ds.Spec.Template.Spec.Containers[0].Args, base.Spec.Template.Spec.Containers[0].Args,
		[]string{"--service-cidrs=10.96.0.0/12,10.97.0.0/16", "--service-node-port-range=30000-32000", "--external-ip-cidrs=192.0.2.0/24",
			"--nodeport-addresses=192.0.2.0/24", "--conntrack-zone-limit-percent=30"}, agentF)
	check("node-setup", ds.Spec.Template.Spec.InitContainers[0].Args, base.Spec.Template.Spec.InitContainers[0].Args,
		[]string{"--geneve-port=6082"}, setupF)
}

// routedPods (docs/routed-pods.md) fills the ConfigMap both containers read; values without
// routedPods (helm upgrade --reuse-values from a chart that had none) render it off.
func TestHelmRoutedPods(t *testing.T) {
	data := func(args ...string) map[string]string {
		t.Helper()
		cm := find(t, helmTemplate(t, args...), "ConfigMap", "srcip-node-setup")
		d, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		return d
	}
	d := data("--set", "routedPods.nonMasqueradeCIDRs={192.168.10.0/24,2001:db8:10::/64}", "--set", "routedPods.masqueradeLinkLocal=true")
	if d["NON_MASQUERADE_CIDRS"] != "192.168.10.0/24,2001:db8:10::/64" || d["MASQUERADE_LINK_LOCAL"] != "true" {
		t.Errorf("routedPods set: ConfigMap data %v", d)
	}
	d = data("--set", "routedPods=null")
	if v, ok := d["NON_MASQUERADE_CIDRS"]; !ok || v != "" || d["MASQUERADE_LINK_LOCAL"] != "false" {
		t.Errorf("without routedPods: ConfigMap data %v, want NON_MASQUERADE_CIDRS empty and MASQUERADE_LINK_LOCAL false", d)
	}
}
