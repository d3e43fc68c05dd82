// Command mkimage writes a docker-archive tarball (what `ctr -n k8s.io images import` reads) of a
// one-layer image put together from files of this machine, for the Kubernetes e2e images of
// hack/conformance/build.sh: no registry, no docker engine.
//
//	mkimage -ref REF -out OUT.tar [-entrypoint JSON] [-cmd JSON] [-env K=V]... [-workdir DIR]
//	        [-merged-usr] [-bin PROG]... [-file SRC=/DST]... [-tree SRC=/DST]... [-dir /DST]...
//	        [-link /DST=TARGET]... [-applets BUSYBOX]
//
//	-bin PROG         a program (a path, or a name looked up in PATH) at its path on this machine
//	                  (directories' symbolic links resolved), with every shared library it loads
//	                  (DT_NEEDED, recursively, the ELF interpreter) under the name it is looked up by
//	-file SRC=/DST    a file (symbolic links followed), mode kept
//	-tree SRC=/DST    a directory's content, recursively (symbolic links kept, modes kept)
//	-dir /DST         an empty directory (0755; /tmp-like 1777 with -dir /DST=1777)
//	-link /DST=TGT    a symbolic link
//	-applets BUSYBOX  the busybox at BUSYBOX (a -bin) and a link for each applet it lists
//	                  (`busybox --list-full`) whose name no program of the bin directories has
//	-merged-usr       /bin, /sbin, /lib, /lib64 are links into /usr (Debian 12's layout), and every
//	                  destination under them is written under /usr
//
// Owners are root, times are the epoch, entries are sorted: the same inputs give the same layer.
// Parent directories are created 0755. Later entries replace earlier ones at the same path, except
// that -applets links never replace anything.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, " ") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

// entry is one tar entry of the layer: a regular file read from src, a directory or a link.
type entry struct {
	typ    byte
	src    string // regular files
	mode   int64
	target string // links
}

type image struct {
	mergedUsr bool
	entries   map[string]entry // by path in the image, without the leading slash
}

func main() {
	var (
		ref, out, entrypoint, cmd, workdir, applets string
		mergedUsr                                   bool
		env, bins, files, trees, dirs, links        list
	)
	flag.StringVar(&ref, "ref", "", "image reference, e.g. registry.k8s.io/e2e-test-images/agnhost:2.66.1")
	flag.StringVar(&out, "out", "", "output tarball")
	flag.StringVar(&entrypoint, "entrypoint", "", `entrypoint, a JSON array, e.g. ["/agnhost"]`)
	flag.StringVar(&cmd, "cmd", "", `command, a JSON array, e.g. ["pause"]`)
	flag.StringVar(&workdir, "workdir", "", "working directory")
	flag.StringVar(&applets, "applets", "", "a static busybox: installed with a link per applet")
	flag.BoolVar(&mergedUsr, "merged-usr", false, "/bin, /sbin, /lib, /lib64 link into /usr")
	flag.Var(&env, "env", "K=V environment variable (repeatable)")
	flag.Var(&bins, "bin", "program with its shared libraries (repeatable)")
	flag.Var(&files, "file", "SRC=/DST file (repeatable)")
	flag.Var(&trees, "tree", "SRC=/DST directory tree (repeatable)")
	flag.Var(&dirs, "dir", "/DST[=MODE] empty directory (repeatable)")
	flag.Var(&links, "link", "/DST=TARGET symbolic link (repeatable)")
	flag.Parse()
	if ref == "" || out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: mkimage -ref REF -out OUT.tar [flags] (see the source's comment)")
		os.Exit(2)
	}
	img := &image{mergedUsr: mergedUsr, entries: map[string]entry{}}
	cfg := v1.Config{Env: env, WorkingDir: workdir}
	err := func() error {
		if err := jsonArray(entrypoint, &cfg.Entrypoint); err != nil {
			return fmt.Errorf("-entrypoint: %w", err)
		}
		if err := jsonArray(cmd, &cfg.Cmd); err != nil {
			return fmt.Errorf("-cmd: %w", err)
		}
		if mergedUsr {
			for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
				img.entries[d] = entry{typ: tar.TypeSymlink, target: "usr/" + d}
				img.entries["usr/"+d] = entry{typ: tar.TypeDir, mode: 0o755}
			}
		}
		for _, d := range dirs {
			dst, m, ok := strings.Cut(d, "=")
			mode := int64(0o755)
			if ok {
				v, err := strconv.ParseInt(m, 8, 32)
				if err != nil {
					return fmt.Errorf("-dir %s: %w", d, err)
				}
				mode = v
			}
			if err := img.add(dst, entry{typ: tar.TypeDir, mode: mode}); err != nil {
				return err
			}
		}
		for _, f := range files {
			src, dst, ok := strings.Cut(f, "=")
			if !ok {
				return fmt.Errorf("-file %s: want SRC=/DST", f)
			}
			if err := img.addFile(src, dst); err != nil {
				return err
			}
		}
		for _, t := range trees {
			src, dst, ok := strings.Cut(t, "=")
			if !ok {
				return fmt.Errorf("-tree %s: want SRC=/DST", t)
			}
			if err := img.addTree(src, dst); err != nil {
				return err
			}
		}
		if applets != "" {
			bins = append(bins, applets)
		}
		for _, b := range bins {
			if err := img.addProgram(b); err != nil {
				return err
			}
		}
		for _, l := range links {
			dst, target, ok := strings.Cut(l, "=")
			if !ok {
				return fmt.Errorf("-link %s: want /DST=TARGET", l)
			}
			if err := img.add(dst, entry{typ: tar.TypeSymlink, target: target}); err != nil {
				return err
			}
		}
		if applets != "" {
			if err := img.addApplets(applets); err != nil {
				return err
			}
		}
		return img.write(ref, out, cfg)
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func jsonArray(s string, v *[]string) error {
	if s == "" {
		return nil
	}
	return json.Unmarshal([]byte(s), v)
}

// key is a destination's path in the layer: clean, relative, under /usr for the merged top-level
// directories.
func (img *image) key(dst string) (string, error) {
	if !strings.HasPrefix(dst, "/") {
		return "", fmt.Errorf("%s: destination must be absolute", dst)
	}
	k := strings.TrimPrefix(path.Clean(dst), "/")
	if k == "" {
		return "", fmt.Errorf("%s: not a file's destination", dst)
	}
	if img.mergedUsr {
		for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
			if k == d || strings.HasPrefix(k, d+"/") {
				k = "usr/" + k
			}
		}
	}
	return k, nil
}

func (img *image) add(dst string, e entry) error {
	k, err := img.key(dst)
	if err != nil {
		return err
	}
	img.entries[k] = e
	return nil
}

func (img *image) addFile(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	return img.add(dst, entry{typ: tar.TypeReg, src: src, mode: int64(st.Mode().Perm())})
}

func (img *image) addTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if rel == "." && dst == "/" {
				return nil
			}
			return img.add(to, entry{typ: tar.TypeDir, mode: int64(info.Mode().Perm())})
		case info.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return img.add(to, entry{typ: tar.TypeSymlink, target: t})
		case info.Mode().IsRegular():
			return img.add(to, entry{typ: tar.TypeReg, src: p, mode: int64(info.Mode().Perm())})
		}
		return fmt.Errorf("%s: not a file, directory or link", p)
	})
}

// hostPath resolves the directory part of a path on this machine (so /bin/sh is /usr/bin/sh on a
// merged-usr system), keeping the file's own name.
func hostPath(p string) string {
	if d, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		return filepath.Join(d, filepath.Base(p))
	}
	return p
}

// addProgram adds a program and, recursively, the shared libraries and the interpreter it needs.
func (img *image) addProgram(prog string) error {
	p, err := exec.LookPath(prog)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var walk func(p string) error
	walk = func(p string) error {
		p = hostPath(p)
		if seen[p] {
			return nil
		}
		seen[p] = true
		if err := img.addFile(p, p); err != nil {
			return err
		}
		return walkELF(p, walk)
	}
	if err := walk(p); err != nil {
		return fmt.Errorf("%s: %w", prog, err)
	}
	return nil
}

var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// walkELF calls walk on the ELF interpreter and on each DT_NEEDED library of the file at p, found
// in its DT_RUNPATH / DT_RPATH directories or the standard ones. A file that is not ELF (a script)
// has no dependencies.
func walkELF(p string, walk func(string) error) error {
	f, err := elf.Open(p)
	if err != nil {
		if _, ok := err.(*elf.FormatError); ok {
			return nil
		}
		return err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				return err
			}
			if err := walk(strings.TrimRight(string(b), "\x00")); err != nil {
				return err
			}
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil // static
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(p)))
			}
		}
	}
	dirs = append(dirs, libDirs...)
	for _, l := range libs {
		found := ""
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, l)); err == nil {
				found = filepath.Join(d, l)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("library %s of %s not found in %v", l, p, dirs)
		}
		if err := walk(found); err != nil {
			return err
		}
	}
	return nil
}

// addApplets links each applet of a busybox to it, where no entry is yet.
func (img *image) addApplets(busybox string) error {
	p, err := exec.LookPath(busybox)
	if err != nil {
		return err
	}
	bb := "/" + mustKey(img, hostPath(p))
	listing, err := exec.Command(p, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("%s --list-full: %w", p, err)
	}
	// A program of its own in any of the bin directories shadows the applet of its name wherever
	// the applet would go: PATH order must not pick busybox's.
	own := map[string]bool{"linuxrc": true}
	for k := range img.entries {
		if d := path.Dir(k); d == "usr/bin" || d == "usr/sbin" || d == "usr/local/bin" || d == "usr/local/sbin" || d == "bin" || d == "sbin" {
			own[path.Base(k)] = true
		}
	}
	for _, a := range strings.Fields(string(listing)) {
		k, err := img.key("/" + a)
		if err != nil {
			return err
		}
		if _, taken := img.entries[k]; taken || own[path.Base(k)] || "/"+k == bb {
			continue
		}
		img.entries[k] = entry{typ: tar.TypeSymlink, target: bb}
	}
	return nil
}

func mustKey(img *image, p string) string {
	k, err := img.key(p)
	if err != nil {
		panic(err)
	}
	return k
}

func (img *image) write(ref, out string, cfg v1.Config) error {
	// Parent directories of every entry.
	for k := range img.entries {
		for d := path.Dir(k); d != "."; d = path.Dir(d) {
			if _, ok := img.entries[d]; !ok {
				img.entries[d] = entry{typ: tar.TypeDir, mode: 0o755}
			}
		}
	}
	keys := make([]string, 0, len(img.entries))
	for k := range img.entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, k := range keys {
		e := img.entries[k]
		hdr := &tar.Header{Name: k, Mode: e.mode, ModTime: time.Unix(0, 0), Typeflag: e.typ, Format: tar.FormatPAX}
		var data []byte
		switch e.typ {
		case tar.TypeDir:
			hdr.Name += "/"
		case tar.TypeSymlink:
			hdr.Linkname, hdr.Mode = e.target, 0o777
		case tar.TypeReg:
			b, err := os.ReadFile(e.src)
			if err != nil {
				return err
			}
			data, hdr.Size = b, int64(len(b))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layer.Bytes())), nil
	})
	if err != nil {
		return err
	}
	img2, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return err
	}
	cf, err := img2.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config = cfg
	if img2, err = mutate.ConfigFile(img2, cf); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, tag, img2)
}
