package flows

import (
	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// Secondary uplinks of br-ex (node-setup --egress-interface; docs/egress.md "Secondary NICs",
// field case C38). A secondary NIC is a port of br-ex on another segment; its addresses are on
// br-ex's internal port (LOCAL) beside the primary NIC's, and the host routes what is sourced in
// its subnets by its own routing table (node-setup's `ip rule from SUBNET`). br-ex keeps the two
// segments apart: node-setup gives the secondary port an isolating VLAN tag, so NORMAL (which
// serves the primary uplink) never floods into it, and these flows connect it to LOCAL only.

// secondaryUplinkFlows are the ExClassifier flows of every secondary uplink (part of BuildExBase):
//
//   - in_port=NIC: everything -> LOCAL (the host answers ARP for its own address on that NIC,
//     receives the replies of its connections). An egress IP inside the NIC's subnets is
//     answered and intercepted before this by BuildEgressAnnounce (prioEgressHook), on this
//     port only.
//   - in_port=LOCAL: IPv4 with nw_src or nw_dst in one of its subnets, ARP with arp_spa or
//     arp_tpa in one of them -> the NIC (the host's routing chose that segment: a source address
//     of the subnet, e.g. an egress IP's SNATed packet or the host's own address, or an on-link
//     neighbour of it). Everything else from LOCAL keeps NORMAL, which cannot reach the NIC.
//
// Geneve and Service entry points are served on the primary uplink only.
//
// Subnets that State.SecondaryUplinks refuses get no flow (its problems are the warnings).
func secondaryUplinkFlows(st *State) ([]of.Flow, []string) {
	var fl []of.Flow
	fromLocal := of.InPort(of.PortLocal)
	sec, problems := st.SecondaryUplinks()
	for _, s := range sec {
		if s.OFPort <= 0 {
			continue
		}
		fl = append(fl, flow(ExClassifier, prioHook, of.ProtoNone, s.OFPort, nil, outputLocal))
		for _, n := range s.Subnets {
			if !n.Addr().Is4() {
				continue
			}
			net := n.Masked()
			fl = append(fl,
				flow(ExClassifier, prioHook, of.ProtoIP, 0, []of.Match{fromLocal, of.IPv4SrcPrefix(net)}, output(s.OFPort)),
				flow(ExClassifier, prioHook, of.ProtoIP, 0, []of.Match{fromLocal, of.IPv4DstPrefix(net)}, output(s.OFPort)),
				flow(ExClassifier, prioHook, of.ProtoARP, 0, []of.Match{fromLocal, of.ARPSPAPrefix(net)}, output(s.OFPort)),
				flow(ExClassifier, prioHook, of.ProtoARP, 0, []of.Match{fromLocal, of.ARPTPAPrefix(net)}, output(s.OFPort)),
			)
		}
	}
	return fl, problems
}
