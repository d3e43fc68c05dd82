package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// EchoDeployment is a Deployment of `echo serve` pods (TCP and UDP 8080), one per node
// (topology spread on the hostname), with TCP liveness and readiness probes, from the
// locally imported echo image.
func EchoDeployment(namespace, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	probe := func() *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1, FailureThreshold: 3, TimeoutSeconds: 1,
		}
	}
	zero := int64(0)
	no := false
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &zero,
					AutomountServiceAccountToken:  &no,
					EnableServiceLinks:            &no,
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
						WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector:     &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []corev1.Container{{
						Name: "echo", Image: EchoImage, ImagePullPolicy: corev1.PullNever,
						Args: []string{"serve", "--tcp", ":8080", "--udp", ":8080",
							"--name", "$(POD_NAME)", "--node", "$(NODE_NAME)"},
						Env: []corev1.EnvVar{
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
							{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
						},
						Ports: []corev1.ContainerPort{
							{ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
							{ContainerPort: 8080, Protocol: corev1.ProtocolUDP},
						},
						LivenessProbe:  probe(),
						ReadinessProbe: probe(),
					}},
				},
			},
		},
	}
}

// WaitPodsReady waits until the pods matching selector in namespace number want and are all Ready
// (and none is terminating); it returns them.
func (c *Cluster) WaitPodsReady(ctx context.Context, namespace, selector string, want int, timeout time.Duration) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := lab.WaitFor(func() error {
		l, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		pods = pods[:0]
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				pods = append(pods, p)
			}
		}
		if len(pods) != want {
			return fmt.Errorf("%d pods, want %d", len(pods), want)
		}
		for _, p := range pods {
			if !podReady(&p) {
				return fmt.Errorf("pod %s on %q not Ready (phase %s)", p.Name, p.Spec.NodeName, p.Status.Phase)
			}
		}
		return nil
	}, timeout)
	return pods, err
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodPid returns a process of the pod (its pause process or a container), found through the
// node's cgroups (kubelet's cgroupfs layout: <cgroupRoot>/kubepods/.../pod<uid>/<container>).
func (c *Cluster) PodPid(p *corev1.Pod) (int, error) {
	kn := c.KNodes[p.Spec.NodeName]
	if kn == nil {
		return 0, fmt.Errorf("pod %s: node %q is not a lab node", p.Name, p.Spec.NodeName)
	}
	root := filepath.Join(cgroupBase, "pids", kn.CgroupRoot)
	want := "pod" + string(p.UID)
	var pid int
	_ = filepath.WalkDir(root, func(path string, de os.DirEntry, err error) error {
		if err != nil || !de.IsDir() || pid != 0 || !strings.Contains(path, "/"+want+"/") {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pid = n
				return filepath.SkipAll
			}
		}
		return nil
	})
	if pid == 0 {
		return 0, fmt.Errorf("pod %s: no process under %s/**/%s", p.Name, root, want)
	}
	return pid, nil
}

// PodExec runs argv (a host binary) in the pod's network namespace.
func (c *Cluster) PodExec(p *corev1.Pod, argv ...string) (string, error) {
	pid, err := c.PodPid(p)
	if err != nil {
		return "", err
	}
	return c.run(append([]string{"nsenter", "--net=/proc/" + strconv.Itoa(pid) + "/ns/net"}, argv...)...)
}

// PodRequest runs `echo get` in the pod's netns against addr ("IP:PORT").
func (c *Cluster) PodRequest(p *corev1.Pod, proto, addr string) (lab.Reply, error) {
	out, err := c.PodExec(p, c.cfg.EchoBin, "get", "--proto", proto, "--addr", addr, "--timeout", "3s")
	if err != nil {
		return lab.Reply{}, err
	}
	var r lab.Reply
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		return lab.Reply{}, fmt.Errorf("bad reply %q: %w", out, err)
	}
	return r, nil
}
