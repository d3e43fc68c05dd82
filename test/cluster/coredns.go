package cluster

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// CoreDNSServiceIP is the kube-dns Service's ClusterIP, the kubelets' clusterDNS in Conformance
// mode (kubeadm's: the tenth address of the service CIDR 10.96.0.0/16).
const CoreDNSServiceIP = "10.96.0.10"

// corefile is kubeadm's default Corefile. Its forward goes to the pod's /etc/resolv.conf, which
// for CoreDNS (dnsPolicy Default) is the lab's resolv.conf: the lab router, which serves no DNS.
const corefile = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
       disable success cluster.local
       disable denial cluster.local
    }
    loop
    reload
    loadbalance
}
`

// DeployCoreDNS deploys CoreDNS in kube-system the way kubeadm does (ServiceAccount coredns,
// ClusterRole system:coredns and its binding, ConfigMap coredns with kubeadm's Corefile,
// Deployment coredns with two replicas, Service kube-dns on CoreDNSServiceIP with dns, dns-tcp and
// metrics ports) from image (imported on the nodes, pull policy Never), and waits until both
// replicas are Ready.
func (c *Cluster) DeployCoreDNS(ctx context.Context, image string, timeout time.Duration) error {
	cs := c.Client
	const ns, name = "kube-system", "coredns"
	create := func(what string, err error) error {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("coredns %s: %w", what, err)
		}
		return nil
	}
	if err := create("ServiceAccount", func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, metav1.CreateOptions{})
		return err
	}()); err != nil {
		return err
	}
	if err := create("ClusterRole", func() error {
		_, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			},
		}, metav1.CreateOptions{})
		return err
	}()); err != nil {
		return err
	}
	if err := create("ClusterRoleBinding", func() error {
		_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:coredns"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
		}, metav1.CreateOptions{})
		return err
	}()); err != nil {
		return err
	}
	if err := create("ConfigMap", func() error {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Data:       map[string]string{"Corefile": corefile},
		}, metav1.CreateOptions{})
		return err
	}()); err != nil {
		return err
	}
	labels := map[string]string{"k8s-app": "kube-dns"}
	replicas := int32(2)
	var runAs int64 = 0
	if err := create("Deployment", func() error {
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						ServiceAccountName: name,
						PriorityClassName:  "system-cluster-critical",
						DNSPolicy:          corev1.DNSDefault,
						Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
							PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
								Weight: 100,
								PodAffinityTerm: corev1.PodAffinityTerm{
									LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
									TopologyKey:   "kubernetes.io/hostname",
								},
							}},
						}},
						Containers: []corev1.Container{{
							Name:            name,
							Image:           image,
							ImagePullPolicy: corev1.PullNever,
							Args:            []string{"-conf", "/etc/coredns/Corefile"},
							Ports: []corev1.ContainerPort{
								{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
								{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
								{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP},
							},
							VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
							LivenessProbe: &corev1.Probe{
								ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}},
								InitialDelaySeconds: 60, TimeoutSeconds: 5, FailureThreshold: 5,
							},
							ReadinessProbe: &corev1.Probe{
								ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
							},
							// Port 53 without CAP_NET_BIND_SERVICE juggling: the lab's containers run as root.
							SecurityContext: &corev1.SecurityContext{RunAsUser: &runAs},
						}},
						Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: name},
							Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
						}}}},
					},
				},
			},
		}, metav1.CreateOptions{})
		return err
	}()); err != nil {
		return err
	}
	if err := create("Service", func() error {
		_, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns, Labels: map[string]string{
				"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}},
			Spec: corev1.ServiceSpec{
				ClusterIP: CoreDNSServiceIP,
				Selector:  labels,
				Ports: []corev1.ServicePort{
					{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
					{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
				},
			},
		}, metav1.CreateOptions{})
		return err
	}()); err != nil {
		return err
	}
	return lab.WaitFor(func() error {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas < replicas {
			return fmt.Errorf("coredns: %d of %d replicas ready", d.Status.ReadyReplicas, replicas)
		}
		return nil
	}, timeout)
}
