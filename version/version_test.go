package version

import (
	"runtime"
	"testing"
)

func TestString(t *testing.T) {
	v, c := Version, Commit
	defer func() { Version, Commit = v, c }()
	Version, Commit = "v1.2.3", ""
	if got, want := String(), "v1.2.3 ("+runtime.Version()+")"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	Commit = "abc1234"
	if got, want := String(), "v1.2.3 (commit abc1234, "+runtime.Version()+")"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
