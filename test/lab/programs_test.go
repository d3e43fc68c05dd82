package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hack/deps.sh installs every program of LabPrograms, ControlPlanePrograms, ClusterPrograms, RouterPrograms, ConformancePrograms and MakePrograms, from
// the same Debian package, and nothing else unnamed here.
func TestDepsInstallsEveryProgram(t *testing.T) {
	b, err := os.ReadFile("../../hack/deps.sh")
	require.NoError(t, err)
	deps := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*"(\S+)\s+(\S+)"`).FindAllStringSubmatch(string(b), -1) {
		deps[m[1]] = m[2]
	}
	want := map[string]string{}
	for _, l := range [][]Program{LabPrograms, ControlPlanePrograms, ClusterPrograms, RouterPrograms, ConformancePrograms, MakePrograms} {
		for _, p := range l {
			want[p.Name] = p.DebianPackage
		}
	}
	assert.Equal(t, want, deps, "hack/deps.sh's table and test/lab/programs.go differ")
}

// Every program the lab package, the e2e tests and the hack scripts execute by a literal name is
// in the lists: a new exec of an unlisted program fails here (then add it, with its package, to
// programs.go and hack/deps.sh).
func TestEveryExecutedProgramIsListed(t *testing.T) {
	listed := map[string]bool{"go": true} // the toolchain is a prerequisite (README)
	for _, l := range [][]Program{LabPrograms, ControlPlanePrograms, ClusterPrograms, RouterPrograms, ConformancePrograms, MakePrograms} {
		for _, p := range l {
			listed[p.Name] = true
		}
	}
	// argv[0] of exec.Command*, of "ip netns exec NS prog" and of the lab's run helpers.
	goExec := regexp.MustCompile(`(?:exec\.Command(?:Context)?\((?:ctx, )?|l\.run\(runOpts\{[^}]*\}, |nsExec\([^,]+, |Exec\([^,]+, |"exec", [a-zA-Z.]+, )"([a-z0-9][a-z0-9.-]*)"`)
	var files []string
	for _, dir := range []string{"../../test", "../../cmd", "../../ofctl", "../../agent", "../../deploy"} {
		require.NoError(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err == nil && strings.HasSuffix(p, ".go") {
				files = append(files, p)
			}
			return err
		}))
	}
	found := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range goExec.FindAllStringSubmatch(string(b), -1) {
			found[m[1]] = f
		}
	}
	// ovs tools run through ovsTool(node, "ovs-...") and ofctl's argv.
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, m := range regexp.MustCompile(`"(ovs(?:db)?-[a-z]+)"`).FindAllStringSubmatch(string(b), -1) {
			if m[1] != "ovs-srcip" && m[1] != "ovs-rundir" {
				found[m[1]] = f
			}
		}
	}
	// Shell scripts: the first word of each command line of the hack and testdata scripts is
	// checked against the same lists (shell builtins and coreutils aside).
	builtins := map[string]bool{}
	for _, w := range strings.Fields("set for do done if then else elif fi case esac in while until local return exit echo printf read export shift trap exec cd pwd test true false mapfile wait kill break continue") {
		builtins[w] = true
	}
	coreutils := map[string]bool{}
	for _, w := range strings.Fields("cat mkdir rm mv cp ln touch chmod mktemp dirname basename date sleep head tail cut tr uname sort uniq wc tee") {
		coreutils[w] = true
	}
	for _, f := range []string{"../../hack/controlplane/build.sh", "../../hack/controlplane/start.sh", "../../hack/controlplane/stop.sh", "../../hack/cluster/build.sh", "../../hack/conformance/build.sh", "testdata/fake-agent.sh"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`(?m)(?:^\s*|\$\(\s*\(?|\|\s*|&&\s*|\|\|\s*)([a-z][a-z0-9-]+)(?:[ \t;)]|$)`).FindAllStringSubmatch(string(b), -1) {
			w := m[1]
			if builtins[w] || coreutils[w] {
				continue
			}
			if _, err := exec.LookPath(w); err == nil {
				found[w] = f
			}
		}
	}
	for prog, f := range found {
		assert.True(t, listed[prog], "%s executes %s, which is not in test/lab/programs.go (and hack/deps.sh)", f, prog)
	}
	t.Logf("programs executed: %v", keys(found))
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A missing program is named with its Debian package and the way to install it.
func TestCheckProgramsNamesThePackage(t *testing.T) {
	require.NoError(t, CheckPrograms(LabPrograms))
	err := CheckPrograms([]Program{{"ip", "iproute2"}, {"srcip-no-such-program", "srcip-pkg"}})
	require.Error(t, err)
	assert.Equal(t, "missing programs: srcip-no-such-program (Debian package srcip-pkg); install them with hack/deps.sh (as root) or apt-get install srcip-pkg", err.Error())
}
