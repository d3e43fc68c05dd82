package cluster

import (
	"fmt"
	"syscall"
)

// SignalVswitchd sends sig to the node's ovs-vswitchd and waits until it has exited (lab
// SignalVswitchd): the userspace datapath stops forwarding, and its tap devices (br-ex, where the
// node IP is, and srcip-gw0) are gone with it, so the node's kubelet, kube-proxy and agent lose
// the API server too. RestartVswitchd brings the switch back.
func (kn *KNode) SignalVswitchd(sig syscall.Signal) error {
	return kn.c.Lab.SignalVswitchd(kn.Name, sig)
}

// RestartVswitchd starts the node's ovs-vswitchd again as the lab does (lab RestartVswitchd:
// br-ex's addresses and routes, the tunnel neighbours) and redoes what the recreated tap
// devices lost on this cluster's nodes: br-ex's IPv6 address and route (dual-stack) and
// srcip-gw0's addresses and routes, by running node-setup again (the real step, idempotent;
// without its check of the agent's metrics port, which the running agent holds). The agent
// replays its flows itself (it watches ovs-vswitchd's pidfile).
func (kn *KNode) RestartVswitchd() error {
	if err := kn.c.Lab.RestartVswitchd(kn.Name); err != nil {
		return err
	}
	if kn.c.cfg.DualStack {
		if err := kn.c.nodeIPv6(kn.Node); err != nil {
			return err
		}
	}
	if err := kn.nodeSetup("--metrics-bind-address=0"); err != nil {
		return fmt.Errorf("node %s: node-setup after the ovs-vswitchd restart: %w", kn.Name, err)
	}
	return nil
}
