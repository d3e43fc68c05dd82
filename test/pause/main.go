// Command pause is the pod sandbox ("infra") container of the real-kubelet lab (test/cluster):
// it holds the pod's namespaces, reaps children it inherits, and exits on SIGTERM or SIGINT.
// Static (CGO_ENABLED=0), so a one-file image runs it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
