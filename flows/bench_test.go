package flows

import (
	"fmt"
	"net/netip"
	"testing"
)

// benchState is node1 of T3 (docs/field-cases.md#t3) with n opted-in Service ports of 3 endpoints each.
func benchState(n int) *State {
	svcs := make([]ServicePort, n)
	for i := range svcs {
		s := webTCP()
		s.Name = fmt.Sprintf("svc-%d", i)
		s.NodePort = uint16(30000 + i%2700)
		s.LoadBalancerIPs = []netip.Addr{netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)})}
		s.ExternalIPs = nil
		svcs[i] = s
	}
	return testState(svcs...)
}

// servicePorts lists st's Service ports (benchmarks pick one per iteration).
func servicePorts(st *State) []ServicePort {
	out := make([]ServicePort, 0, len(st.Services))
	for _, sp := range st.Services {
		out = append(out, sp)
	}
	return out
}

// BenchmarkBuild is the pure cost of a full build (every flow set rendered and fingerprinted).
func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		st := benchState(n)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := Build(st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuildServicePort is the cost of one partial rebuild: independent of cluster size.
func BenchmarkBuildServicePort(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		st := benchState(n)
		sps := servicePorts(st)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := BuildServicePort(st, &sps[i%n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
