package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func run1(mode string, states ...string) modeRun {
	r := modeRun{Mode: mode}
	for i, s := range states {
		r.Results = append(r.Results, result{Name: "[sig-network] t" + string(rune('a'+i)), State: s})
	}
	return r
}

// The verdict fails on a failure in plain or all, on differing pass sets, and on a mode that ran
// nothing (a focus matching no runnable spec must not read as a pass).
func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs []modeRun
		want string // "" passes; else a substring of the error
	}{
		{"equal", []modeRun{run1("plain", "passed", "listed"), run1("all", "passed", "listed")}, ""},
		{"failure in all", []modeRun{run1("plain", "passed", "passed"), run1("all", "passed", "failed")}, "mode all: 1 tests failed"},
		{"bridge failure only", []modeRun{run1("plain", "passed"), run1("bridge", "failed")}, ""},
		{"nothing ran", []modeRun{run1("plain", "listed", "skipped"), run1("all", "listed", "skipped")}, "mode plain ran no test"},
		{"empty mode", []modeRun{{Mode: "all"}}, "mode all ran no test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := verdict(tc.runs)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("verdict: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("verdict: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCookieAndPackets(t *testing.T) {
	c, pk, ok := cookieAndPackets(" cookie=0x5c10a1b2c3d4e5f6, duration=3.2s, table=0, n_packets=7, n_bytes=518, priority=200,tcp,nw_dst=10.89.0.11,tp_dst=30080 actions=group:3")
	if !ok || c != "0x5c10a1b2c3d4e5f6" || pk != 7 {
		t.Fatalf("got %q %d %v", c, pk, ok)
	}
	if _, _, ok := cookieAndPackets("NXST_FLOW reply (xid=0x4):"); ok {
		t.Fatal("header line read as a flow")
	}
}

// readReport counts a spec skipped by the skip list or by the user's -skip as "listed", and only
// a spec that skipped itself (ginkgo ran it, it called Skip) as "skipped"; unfocused specs are
// dropped.
func TestReadReportSkips(t *testing.T) {
	rep := `[{"SpecReports":[
	{"ContainerHierarchyTexts":["[sig-network] NetworkPolicy"],"LeafNodeType":"It","LeafNodeText":"x [Feature:NetworkPolicy]","State":"skipped"},
	{"ContainerHierarchyTexts":["[sig-network] Services"],"LeafNodeType":"It","LeafNodeText":"user-skipped one","State":"skipped"},
	{"ContainerHierarchyTexts":["[sig-network] [Feature:IPv6DualStack]"],"LeafNodeType":"It","LeafNodeText":"v6","State":"skipped"},
	{"ContainerHierarchyTexts":["[sig-network] Services"],"LeafNodeType":"It","LeafNodeText":"needs zones","State":"skipped"},
	{"ContainerHierarchyTexts":["[sig-network] Services"],"LeafNodeType":"It","LeafNodeText":"works","State":"passed"},
	{"ContainerHierarchyTexts":["[sig-storage] Volumes"],"LeafNodeType":"It","LeafNodeText":"unfocused","State":"skipped"},
	{"ContainerHierarchyTexts":[],"LeafNodeType":"SynchronizedBeforeSuite","LeafNodeText":"","State":"passed"}]}]`
	path := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(path, []byte(rep), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dual := range []bool{false, true} {
		r, err := readReport(path, regexp.MustCompile(`\[sig-network\]`), regexp.MustCompile(`user-skipped`), skipList(dual))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, x := range r.Results {
			got[x.Name] = x.State
		}
		want := map[string]string{
			"[sig-network] NetworkPolicy x [Feature:NetworkPolicy]": "listed",
			"[sig-network] Services user-skipped one":               "listed",
			"[sig-network] Services needs zones":                    "skipped",
			"[sig-network] Services works":                          "passed",
			// Listed on an IPv4-only lab; on a dual-stack one it ran and skipped itself.
			"[sig-network] [Feature:IPv6DualStack] v6": map[bool]string{false: "listed", true: "skipped"}[dual],
		}
		if len(got) != len(want) {
			t.Errorf("dual-stack %v: results %v, want %v", dual, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("dual-stack %v: %s: state %q, want %q", dual, k, got[k], v)
			}
		}
	}
}

// The IPv6 and dual-stack tests are skipped on an IPv4-only lab only, and skipList never
// modifies skips.
func TestSkipList(t *testing.T) {
	name := "[sig-network] [Feature:IPv6DualStack] should create pod, add ipv6 and ipv4 ip to pod ips"
	if _, ok := matches(skipList(false), name); !ok {
		t.Errorf("IPv4-only lab: %q not listed", name)
	}
	if _, ok := matches(skipList(true), name); ok {
		t.Errorf("dual-stack lab: %q listed", name)
	}
	// The IPv6 Internet test is listed on both: the lab has no route off the machine.
	for _, dual := range []bool{false, true} {
		if why, ok := matches(skipList(dual), "[sig-network] Networking should provide Internet connection for containers [Feature:Networking-IPv6] [Experimental][LinuxOnly]"); !ok || !strings.Contains(why, "Internet") {
			t.Errorf("dual-stack %v: [Feature:Networking-IPv6] listed %v (%q), want listed for the Internet", dual, ok, why)
		}
	}
	if len(skipList(false)) != len(skips)+1 || len(skipList(true)) != len(skips) {
		t.Errorf("skipList lengths %d, %d; skips %d", len(skipList(false)), len(skipList(true)), len(skips))
	}
}

// Bad flags are refused before anything is built or started.
func TestValidate(t *testing.T) {
	ok := options{e2eDir: "/x", modes: "plain,all,bridge", focus: `\[sig-network\]`, procs: 4}
	if err := validate(ok); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*options){
		"no e2e":            func(o *options) { o.e2eDir = "" },
		"unknown mode last": func(o *options) { o.modes = "plain,bogus" },
		"space after comma": func(o *options) { o.modes = "plain, all" },
		"empty modes":       func(o *options) { o.modes = "" },
		"bad focus":         func(o *options) { o.focus = "(" },
		"bad skip":          func(o *options) { o.skip = "[" },
		"no procs":          func(o *options) { o.procs = 0 },
	} {
		o := ok
		mod(&o)
		if err := validate(o); err == nil {
			t.Errorf("%s: accepted %+v", name, o)
		}
	}
}
