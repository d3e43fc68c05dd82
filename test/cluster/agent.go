package cluster

import (
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// AgentLog is the node's agent log.
func (kn *KNode) AgentLog() string { return kn.path("agent.log") }

// AgentArgs is the agent's command line on this node: it runs in the node (netns and mount
// namespace, where the node's OVS is at the default /var/run/openvswitch) and watches the API
// server.
func (kn *KNode) AgentArgs() []string {
	c := kn.c
	args := []string{
		"--node-name=" + kn.Name,
		"--kubeconfig=" + c.Kubeconfig,
		"--bridge-ex=br-ex",
		"--bridge-int=br-int",
		"--uplink=eth0",
		"--external-ip-cidrs=203.0.113.0/24",
		"--geneve-port=6081",
		"--v=2",
	}
	return append(args, c.cfg.AgentArgs...)
}

// StartAgent starts srcip-agent in the node.
func (kn *KNode) StartAgent() error {
	kn.mu.Lock()
	defer kn.mu.Unlock()
	if kn.agent.running() {
		return fmt.Errorf("agent of %s already running (pid %d)", kn.Name, kn.agent.pid)
	}
	p, err := kn.c.start("agent "+kn.Name, kn.AgentLog(), append(append(kn.enter(), kn.c.cfg.AgentBin), kn.AgentArgs()...)...)
	if err != nil {
		return err
	}
	kn.agent = p
	return nil
}

// StopAgent stops the node's agent (SIGTERM, SIGKILL after 10 s).
func (kn *KNode) StopAgent() error {
	kn.mu.Lock()
	p := kn.agent
	kn.mu.Unlock()
	return p.stop(kn.c.logf, 10*time.Second)
}

// KillAgent SIGKILLs the node's agent, as a crash would (no step-down: its flows, its ARP
// answers and the Leases it holds stay until they expire), and waits until it has exited.
func (kn *KNode) KillAgent() error {
	kn.mu.Lock()
	p := kn.agent
	kn.mu.Unlock()
	if !p.running() {
		return fmt.Errorf("agent of %s is not running", kn.Name)
	}
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("agent of %s: SIGKILL pid %d: %w", kn.Name, p.pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("agent of %s: pid %d did not exit after SIGKILL", kn.Name, p.pid)
	}
}

// RestartAgent is StopAgent then StartAgent.
func (kn *KNode) RestartAgent() error {
	if err := kn.StopAgent(); err != nil {
		return err
	}
	return kn.StartAgent()
}

// AgentPid is the pid of the node's agent (0: never started).
func (kn *KNode) AgentPid() int {
	kn.mu.Lock()
	defer kn.mu.Unlock()
	if kn.agent == nil {
		return 0
	}
	return kn.agent.pid
}

// nodeSetup runs `srcip-agent node-setup` in the node: br-int, srcip-gw0 with the pod gateway
// address and the cluster route, the masquerade, srcip-cni + host-local + loopback + portmap in
// /opt/cni/bin and the conflist (in place) in /etc/cni/net.d. br-ex is the lab's (the node
// installer's), so no --nic.
func (kn *KNode) nodeSetup(extra ...string) error {
	c := kn.c
	argv := []string{c.cfg.AgentBin, "node-setup",
		"--node-name=" + kn.Name,
		"--kubeconfig=" + c.Kubeconfig,
		"--cluster-cidrs=" + c.clusterCIDRs(),
		"--cni-bin-dir=/opt/cni/bin",
		"--cni-conf-dir=/etc/cni/net.d",
		"--cni-source-dir=" + filepath.Join(c.dir, "cni-src"),
		"--state-dir=" + kn.path("node-setup"),
		"--mtu=" + strconv.Itoa(1400)}
	argv = append(argv, extra...)
	if !c.cfg.DualStack {
		_, err := kn.Exec(argv...)
		return err
	}
	// srcip-gw0 (and br-int) are created by node-setup and need IPv6 on (the lab's netns default
	// is off) for the IPv6 gateway address; br-int's tap goes back to off (no link-local address,
	// no MLD reports into the pipeline), as does the default for the pods' host ends.
	if err := kn.sysctl6("default", ipv6On); err != nil {
		return err
	}
	_, err := kn.Exec(argv...)
	if err2 := kn.sysctl6("default", ipv6Off); err == nil {
		err = err2
	}
	if err == nil {
		_, err = kn.c.run("ip", "netns", "exec", kn.Netns, "sh", "-c",
			"[ ! -e /proc/sys/net/ipv6/conf/br-int ] || sysctl -q -w net.ipv6.conf.br-int.disable_ipv6=1")
	}
	return err
}

// SetAgentArgs replaces the flags appended to every agent's command line (Config.AgentArgs); the
// agents started after it (StartAgent, RestartAgent) get them.
// Not safe to call while agents start.
func (c *Cluster) SetAgentArgs(args ...string) { c.cfg.AgentArgs = append([]string(nil), args...) }

// AgentArgsExtra returns the flags appended to every agent's command line (SetAgentArgs).
func (c *Cluster) AgentArgsExtra() []string { return append([]string(nil), c.cfg.AgentArgs...) }

// Values of net.ipv6.conf.*.disable_ipv6 (KNode.sysctl6).
const (
	ipv6On  = "0"
	ipv6Off = "1"
)
