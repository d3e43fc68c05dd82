// Command mkimage writes a one-layer container image of files from this machine, without a
// registry or docker: the image writer of the real-kubelet lab (test/cluster) and of the release
// (make image, hack/image.sh). Both formats are what `ctr -n k8s.io images import` reads on a
// containerd node.
//
//	mkimage -ref REF -out OUT.tar [-format docker|oci] [-entrypoint PATH] [-label K=V]...
//	        [-programs PROG,...] FILE...
//
// A FILE is SRC (it lands as /<base name of SRC>) or SRC=/DST; modes are kept (directories 0755),
// times are zero (the same files give the same image digest). -programs adds programs looked up
// in PATH with every shared library they load (DT_NEEDED, recursively, and the ELF interpreter),
// each under the path it is looked up by: an image that runs this machine's dynamically linked
// binaries (ovs-ofctl, nft) as they run here. The entrypoint defaults to the first FILE's path in
// the image.
//
// -format docker (default) writes a docker-archive tarball (manifest.json, RepoTags REF); oci
// writes an OCI image layout (oci-layout, index.json, blobs/sha256/) as a tarball whose index
// names the image REF (annotations io.containerd.image.name, the full reference, and
// org.opencontainers.image.ref.name, its tag). -label sets the image config's labels, e.g.
// org.opencontainers.image.version=v0.1.0.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type labels map[string]string

func (l labels) String() string { return fmt.Sprint(map[string]string(l)) }
func (l labels) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", s)
	}
	l[k] = v
	return nil
}

func main() {
	ref := flag.String("ref", "", "image reference, e.g. localhost/ovs-srcip/echo:test")
	out := flag.String("out", "", "output tarball")
	entry := flag.String("entrypoint", "", "entrypoint (default: the first FILE's path in the image)")
	format := flag.String("format", "docker", "docker (docker-archive tarball) or oci (OCI image layout tarball)")
	progs := flag.String("programs", "", "comma-separated programs from PATH to add with their shared libraries")
	lbls := labels{}
	flag.Var(lbls, "label", "KEY=VALUE label of the image config (repeatable)")
	flag.Parse()
	if *ref == "" || *out == "" || flag.NArg() == 0 || (*format != "docker" && *format != "oci") {
		fmt.Fprintln(os.Stderr, "usage: mkimage -ref REF -out OUT.tar [-format docker|oci] [-entrypoint PATH] [-label K=V]... [-programs PROG,...] SRC[=/DST]...")
		os.Exit(2)
	}
	files := flag.Args()
	if *progs != "" {
		deps, err := withLibraries(strings.Split(*progs, ",")...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mkimage:", err)
			os.Exit(1)
		}
		for _, f := range deps {
			files = append(files, f+"="+f)
		}
	}
	if err := run(*ref, *out, *entry, *format, lbls, files); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(ref, out, entry, format string, lbls labels, files []string) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	dirs := map[string]bool{}
	seen := map[string]bool{}
	for i, f := range files {
		src, dst, ok := strings.Cut(f, "=")
		if !ok {
			dst = "/" + filepath.Base(src)
		}
		if !strings.HasPrefix(dst, "/") {
			return fmt.Errorf("%s: destination must be absolute", f)
		}
		if i == 0 && entry == "" {
			entry = dst
		}
		name := strings.TrimPrefix(filepath.Clean(dst), "/")
		if seen[name] {
			continue // a library two programs load
		}
		seen[name] = true
		// Parent directories first.
		for d, parts := "", strings.Split(filepath.Dir(name), "/"); d != "." && len(parts) > 0 && parts[0] != "."; parts = parts[1:] {
			d = filepath.Join(d, parts[0])
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0), Typeflag: tar.TypeDir}); err != nil {
					return err
				}
			}
		}
		st, err := os.Stat(src)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: name, Mode: int64(st.Mode().Perm()), Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
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
	var lopts []tarball.LayerOption
	base := empty.Image
	if format == "oci" {
		// OCI media types throughout (docker-archive keeps docker's).
		lopts = append(lopts, tarball.WithMediaType(types.OCILayer))
		base = mutate.ConfigMediaType(mutate.MediaType(base, types.OCIManifestSchema1), types.OCIConfigJSON)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layer.Bytes())), nil
	}, lopts...)
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(base, l)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = v1.Config{Entrypoint: []string{entry}}
	if len(lbls) > 0 {
		cfg.Config.Labels = lbls
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	if format == "docker" {
		return tarball.WriteToFile(out, tag, img)
	}
	return writeOCI(out, tag, img)
}

// writeOCI writes img as an OCI image layout in a tarball, its index entry named tag.
func writeOCI(out string, tag name.Tag, img v1.Image) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".mkimage-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          tag.Name(),
		"org.opencontainers.image.ref.name": tag.TagStr(),
	})); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Mode: 0o755, ModTime: time.Unix(0, 0), Typeflag: tar.TypeDir})
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// withLibraries returns the paths of programs (looked up in PATH) and of every shared library
// they load (DT_NEEDED, recursively, and the ELF interpreter), sorted.
func withLibraries(progs ...string) ([]string, error) {
	seen := map[string]bool{}
	var walk func(path string) error
	walk = func(path string) error {
		if seen[path] {
			return nil
		}
		seen[path] = true
		// The image gets the file under the name it is looked up by; a symlink's target is read.
		if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
			return walkELF(real, walk)
		}
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
