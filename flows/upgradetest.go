package flows

import of "github.com/ovs-srcip/ovs-srcip/openflow"

// upgradeTestLayout is empty in every normal build. Only the "new" image of the rolling-upgrade
// test (test/cluster/install TestRollingUpgrade) stamps it, through hack/image.sh -l, which
// passes -ldflags "-X github.com/ovs-srcip/ovs-srcip/flows.upgradeTestLayout=1": a flow layout
// that the older build does not have, so that the upgrade and the downgrade both change the
// layout whatever the two commits differ in. When set, br-int's base flow set (KindIntBase) gets
// one more flow, in UpgradeTestTable, which nothing resubmits to (no packet ever reaches it); the
// base set's fingerprint, and so its cookie, changes with it.
var upgradeTestLayout string

// UpgradeTestTable (br-int table 58) holds the one flow of upgradeTestLayout; no other flow is
// ever written there. Unnamed on purpose: it is no table of the pipeline.
const UpgradeTestTable Table = 58

// UpgradeTestLayout reports whether this build carries the upgrade test's layout change.
func UpgradeTestLayout() bool { return upgradeTestLayout != "" }

// upgradeTestFlows returns the flow upgradeTestLayout adds to KindIntBase (none in normal builds).
func upgradeTestFlows() []of.Flow {
	if !UpgradeTestLayout() {
		return nil
	}
	return []of.Flow{flow(UpgradeTestTable, prioDefault, of.ProtoNone, 0, nil, DropFor(DropNoRoute))}
}
