// Command imagelist prints the images that hack/conformance/build.sh writes, one "NAME REFERENCE"
// a line, under the references the e2e suite of this module's k8s.io/kubernetes asks for
// (test/utils/image: GetE2EImage, GetPauseImageName) and the CoreDNS reference kubeadm deploys
// (cmd/kubeadm/app/images GetDNSImage with the default repository), so that the references follow
// the pins instead of being copied by hand. NAME is what build.sh knows how to build.
//
// The images are those of the [sig-network] tests (test/e2e/network) and of the framework helpers
// they call (test/e2e/framework/pod: BusyBox; the deployment tests' NginxNew rides along with
// Nginx, which is one rootfs).
package main

import (
	"fmt"

	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	kubeadmapiv1 "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/v1beta4"
	"k8s.io/kubernetes/cmd/kubeadm/app/constants"
	kubeadmimages "k8s.io/kubernetes/cmd/kubeadm/app/images"
	imageutils "k8s.io/kubernetes/test/utils/image"
)

func main() {
	for _, i := range []struct {
		name string
		id   imageutils.ImageID
	}{
		{"agnhost", imageutils.Agnhost},
		{"agnhost", imageutils.AgnhostPrev}, // the same agnhost under the previous tag
		{"busybox", imageutils.BusyBox},
		{"nginx", imageutils.Nginx},
		{"nginx", imageutils.NginxNew},
		{"glibc-dns-testing", imageutils.GlibcDnsTesting},
		{"distroless-iptables", imageutils.DistrolessIptables},
		{"regression-issue-74839", imageutils.RegressionIssue74839},
	} {
		fmt.Println(i.name, imageutils.GetE2EImage(i.id))
	}
	fmt.Println("pause", imageutils.GetPauseImageName())
	cfg := &kubeadmapi.ClusterConfiguration{ImageRepository: kubeadmapiv1.DefaultImageRepository}
	fmt.Println("coredns", kubeadmimages.GetDNSImage(cfg))
	fmt.Println("#coredns-version", constants.CoreDNSVersion)
}
