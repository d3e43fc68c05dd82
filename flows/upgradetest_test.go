package flows

import "testing"

// The upgrade test's layout switch (hack/image.sh -l) adds exactly one flow in UpgradeTestTable
// to br-int's base set and so changes its cookie; a normal build has no flow there.
func TestUpgradeTestLayout(t *testing.T) {
	count := func(fs *FlowSet) (n int) {
		for _, f := range fs.Flows {
			if Table(f.Table) == UpgradeTestTable {
				n++
			}
		}
		return n
	}
	plain, err := BuildIntBase(testState())
	if err != nil {
		t.Fatal(err)
	}
	if UpgradeTestLayout() || count(plain) != 0 {
		t.Fatalf("a normal build: switch %v, %d flows in table %d", UpgradeTestLayout(), count(plain), UpgradeTestTable)
	}
	upgradeTestLayout = "1"
	defer func() { upgradeTestLayout = "" }()
	marked, err := BuildIntBase(testState())
	if err != nil {
		t.Fatal(err)
	}
	if count(marked) != 1 || len(marked.Flows) != len(plain.Flows)+1 || marked.Cookie() == plain.Cookie() {
		t.Fatalf("with the switch: %d flows in table %d, %d flows (plain %d), cookie %s (plain %s)",
			count(marked), UpgradeTestTable, len(marked.Flows), len(plain.Flows), marked.Cookie(), plain.Cookie())
	}
}
