// Command mkimage writes a docker-archive tarball (what `ctr images import` reads) of a one-layer
// image holding static binaries, for the real-kubelet lab (test/cluster): no registry, no docker.
//
//	mkimage -ref localhost/ovs-srcip/echo:test -out echo.tar -entrypoint /echo BIN...
//
// Each BIN lands as /<base name> (mode 0755); the entrypoint defaults to the first one.
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
	entry := flag.String("entrypoint", "", "entrypoint (default /<first binary>)")
	flag.Parse()
	if *ref == "" || *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: mkimage -ref REF -out OUT.tar [-entrypoint PATH] BIN...")
		os.Exit(2)
	}
	if err := run(*ref, *out, *entry, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(ref, out, entry string, bins []string) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, b := range bins {
		data, err := os.ReadFile(b)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.Base(b), Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
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
	if entry == "" {
		entry = "/" + filepath.Base(bins[0])
	}
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
