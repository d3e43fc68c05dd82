// Command mkimage writes a docker-archive tarball (what `ctr images import` reads) of a one-layer
// image holding static binaries, for the real-kubelet lab (test/cluster): no registry, no docker.
//
//	mkimage -ref localhost/ovs-srcip/echo:test -out echo.tar [-entrypoint PATH] FILE...
//
// A FILE is SRC (it lands as /<base name of SRC>) or SRC=/DST; modes are kept (directories 0755).
// The entrypoint defaults to the first FILE's path in the image.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	ref := flag.String("ref", "", "image reference, e.g. localhost/ovs-srcip/echo:test")
	out := flag.String("out", "", "output tarball")
	entry := flag.String("entrypoint", "", "entrypoint (default: the first FILE's path in the image)")
	flag.Parse()
	if *ref == "" || *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: mkimage -ref REF -out OUT.tar [-entrypoint PATH] SRC[=/DST]...")
		os.Exit(2)
	}
	if err := run(*ref, *out, *entry, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(ref, out, entry string, files []string) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	dirs := map[string]bool{}
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
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layer.Bytes())), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
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
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, tag, img)
}
