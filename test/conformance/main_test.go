package main

import (
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
