package cluster

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

// withLibraries returns the paths of programs (looked up in PATH) and of every shared library
// they load (DT_NEEDED, recursively, and the ELF interpreter), for an image that runs the host's
// dynamically linked binaries.
func withLibraries(progs ...string) ([]string, error) {
	seen := map[string]bool{}
	var walk func(path string) error
	walk = func(path string) error {
		if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
			// The image gets the file under the name it is looked up by.
			if seen[path] {
				return nil
			}
			seen[path] = true
			return walkELF(real, walk)
		}
		if seen[path] {
			return nil
		}
		seen[path] = true
		return walkELF(path, walk)
	}
	for _, p := range progs {
		path, err := exec.LookPath(p)
		if err != nil {
			return nil, err
		}
		if err := walk(path); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu", "/lib64", "/lib", "/usr/lib"}

func walkELF(path string, walk func(string) error) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				interp := string(b[:len(b)-1])
				if err := walk(interp); err != nil {
					return err
				}
			}
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	for _, l := range libs {
		found := ""
		for _, d := range libDirs {
			if _, err := os.Stat(filepath.Join(d, l)); err == nil {
				found = filepath.Join(d, l)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("library %s of %s not found in %v", l, path, libDirs)
		}
		if err := walk(found); err != nil {
			return err
		}
	}
	return nil
}
