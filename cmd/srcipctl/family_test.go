package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ovs-srcip/ovs-srcip/agent"
)

// A dual-stack Service port is two flow sets: status and get services show the IPv6 one as
// "http/TCP/IPv6" beside "http/TCP", and the counters (one series per port) say they add both
// families up.
func TestDualStackPortsShownByFamily(t *testing.T) {
	dual := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "dual",
		Annotations: map[string]string{agent.AnnotationPreserveSourceIP: "true"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30093}}}}
	v6 := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "dual-v6",
		Labels: map[string]string{discoveryv1.LabelServiceName: "dual"}},
		AddressType: discoveryv1.AddressTypeIPv6,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"fd00:10:244:1::5"}, NodeName: ptr.To("node1")}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}}}
	rep := demoReport(t, dual, v6)
	var fams []string
	for _, s := range rep.Services {
		if s.Name == "dual" {
			for _, p := range s.Ports {
				fams = append(fams, p.Family)
			}
		}
	}
	require.Equal(t, []string{"IPv4", "IPv6"}, fams)
	var st, ls bytes.Buffer
	writeStatus(&st, rep, map[counterKey]*serviceCounters{{"demo", "dual", "http", "TCP"}: {}})
	writeServices(&ls, rep, true)
	assert.Contains(t, st.String(), "  port http/TCP 80 nodePort 30093: ")
	assert.Contains(t, st.String(), "  port http/TCP/IPv6 80 nodePort 30093: ")
	assert.Contains(t, st.String(), "    counters (IPv4 and IPv6 together): ")
	assert.Contains(t, ls.String(), "demo/dual  http/TCP/IPv6")
	assert.Contains(t, ls.String(), "fd00:10:244:1::5")
}
