// Package flowsnap is the node's flow snapshot: the agent's last applied flows and groups of
// br-int and br-ex, as the lines of an `ovs-ofctl bundle` file (openflow.Text, the shapes of the
// golden files), in one file that srcip-agent writes after its syncs and that `srcip-agent
// flow-restore` replays into a restarted ovs-vswitchd while no agent runs (docs/node-recovery.md).
//
// The file is plain text:
//
//	# ovs-srcip flow snapshot (docs/node-recovery.md); written by srcip-agent, do not edit
//	version 1
//	node node1
//	boot-id 0f2c...                    (/proc/sys/kernel/random/boot_id of the writer)
//	written 2026-12-01T16:00:00Z
//	bridge br-int 123                  (OVS bridge name, number of lines that follow)
//	group add_or_mod group_id=...      (every group line of the bridge first, then its flows)
//	flow add priority=...
//	bridge br-ex 45
//	...
//	sha256 <hex>                       (of every byte before this line)
//
// Decode refuses a file whose version is not Version, whose checksum does not match, or whose
// structure is broken; Check refuses a snapshot of another node or another boot (after a reboot
// the pods and their ports are gone and the flows would name ports that no longer exist).
package flowsnap

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Version is the format version Encode writes and Decode accepts.
const Version = 1

const header = "# ovs-srcip flow snapshot (docs/node-recovery.md); written by srcip-agent, do not edit\n"

// BootIDPath is where Linux gives the id of the running boot (random per boot).
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// Bridge is one bridge's part of a snapshot.
type Bridge struct {
	// Name is the OVS bridge name (e.g. "br-int").
	Name string
	// Lines are `ovs-ofctl bundle` lines ("group add_or_mod ...", "group insert_buckets ...",
	// "flow add ..."), groups before flows.
	Lines []string
}

// Snapshot is the content of a snapshot file.
type Snapshot struct {
	// Node is the node name of the agent that wrote it.
	Node string
	// BootID is the writer's boot id (BootIDPath), empty when unknown.
	BootID string
	// Written is when it was written (UTC, second precision in the file).
	Written time.Time
	// Bridges in replay order (br-int first, as the agent applies).
	Bridges []Bridge
}

// Lines returns the number of bundle lines of all bridges.
func (s *Snapshot) Lines() int {
	n := 0
	for _, b := range s.Bridges {
		n += len(b.Lines)
	}
	return n
}

// ErrCorrupt is wrapped by Decode's errors: the file is not a complete, unmodified snapshot of
// this version.
var ErrCorrupt = errors.New("corrupt flow snapshot")

// ErrStale is wrapped by Check's errors: the snapshot is intact but not for this node or boot.
var ErrStale = errors.New("stale flow snapshot")

// Encode renders s as a snapshot file (EncodeTo into memory).
func Encode(s *Snapshot) []byte {
	var b bytes.Buffer
	_ = EncodeTo(&b, s) // a bytes.Buffer does not fail
	return b.Bytes()
}

// EncodeTo writes s as a snapshot file to w, the bytes Encode returns, as it renders them: the
// file (about 20 MB at 10k Service ports) is never held in memory. The sha256 line is computed
// on the way. It returns w's first error.
func EncodeTo(w io.Writer, s *Snapshot) error {
	h := sha256.New()
	b := bufio.NewWriterSize(io.MultiWriter(w, h), 64<<10)
	b.WriteString(header)
	fmt.Fprintf(b, "version %d\nnode %s\nboot-id %s\nwritten %s\n", Version, s.Node, s.BootID, s.Written.UTC().Format(time.RFC3339))
	for _, br := range s.Bridges {
		fmt.Fprintf(b, "bridge %s %d\n", br.Name, len(br.Lines))
		for _, l := range br.Lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	if err := b.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "sha256 %s\n", hex.EncodeToString(h.Sum(nil)))
	return err
}

// Decode parses a snapshot file. Its errors wrap ErrCorrupt and say what is wrong: no or another
// version, a checksum that does not match (a torn or edited file), a bridge with fewer lines than
// announced, a line that is not a group or flow line.
func Decode(data []byte) (*Snapshot, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	body, sumLine, ok := cutLastLine(data)
	if !ok || !strings.HasPrefix(sumLine, "sha256 ") {
		return nil, bad("no sha256 line at the end (truncated?)")
	}
	sum := sha256.Sum256(body)
	if want := strings.TrimPrefix(sumLine, "sha256 "); want != hex.EncodeToString(sum[:]) {
		return nil, bad("checksum mismatch: the file says %.16s..., its content hashes to %.16s...", want, hex.EncodeToString(sum[:]))
	}
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	if len(lines) < 5 || lines[0]+"\n" != header {
		return nil, bad("not a flow snapshot (no header)")
	}
	v, ok := strings.CutPrefix(lines[1], "version ")
	if !ok {
		return nil, bad("no version line")
	}
	if n, err := strconv.Atoi(v); err != nil || n != Version {
		return nil, bad("version %q, this srcip-agent reads version %d", v, Version)
	}
	s := &Snapshot{}
	var err error
	for i, f := range []struct {
		key string
		dst *string
	}{{"node ", &s.Node}, {"boot-id ", &s.BootID}} {
		val, ok := strings.CutPrefix(lines[2+i], f.key)
		if !ok {
			return nil, bad("line %d: want %q", 3+i, strings.TrimSpace(f.key))
		}
		*f.dst = val
	}
	w, ok := strings.CutPrefix(lines[4], "written ")
	if !ok {
		return nil, bad("line 5: want written")
	}
	if s.Written, err = time.Parse(time.RFC3339, w); err != nil {
		return nil, bad("line 5: %v", err)
	}
	for i := 5; i < len(lines); {
		f := strings.Fields(lines[i])
		if len(f) != 3 || f[0] != "bridge" {
			return nil, bad("line %d: want \"bridge NAME COUNT\"", i+1)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 || i+1+n > len(lines) {
			return nil, bad("line %d: bridge %s announces %s lines, %d follow", i+1, f[1], f[2], len(lines)-i-1)
		}
		br := Bridge{Name: f[1], Lines: lines[i+1 : i+1+n]}
		for j, l := range br.Lines {
			if !strings.HasPrefix(l, "flow ") && !strings.HasPrefix(l, "group ") {
				return nil, bad("line %d: not a flow or group line", i+2+j)
			}
		}
		s.Bridges = append(s.Bridges, br)
		i += 1 + n
	}
	return s, nil
}

// cutLastLine splits data before its last line (which must end in a newline).
func cutLastLine(data []byte) (body []byte, last string, ok bool) {
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return nil, "", false
	}
	i := bytes.LastIndexByte(data[:len(data)-1], '\n')
	if i < 0 {
		return nil, "", false
	}
	return data[:i+1], string(data[i+1 : len(data)-1]), true
}

// Check returns an error wrapping ErrStale when s was written for another node (node non-empty)
// or in another boot than bootID (both non-empty).
func Check(s *Snapshot, node, bootID string) error {
	if node != "" && s.Node != node {
		return fmt.Errorf("%w: written for node %q, this is %q", ErrStale, s.Node, node)
	}
	if bootID != "" && s.BootID != "" && s.BootID != bootID {
		return fmt.Errorf("%w: written in boot %s, this is boot %s (a reboot: the pods and their ports are gone)", ErrStale, s.BootID, bootID)
	}
	if bootID != "" && s.BootID == "" {
		return fmt.Errorf("%w: written without a boot id, cannot tell it is from this boot", ErrStale)
	}
	return nil
}

// ReadBootID returns the running boot's id (BootIDPath), "" if it cannot be read.
func ReadBootID() string {
	b, err := os.ReadFile(BootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// WriteFile writes data to path atomically: a temporary file in path's directory, fsync, rename
// over path, fsync of the directory. A reader sees the old file or the new one, never a part.
func WriteFile(path string, data []byte) error {
	return writeAtomic(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteSnapshot writes s to path atomically, as WriteFile does with Encode(s), streaming it
// (EncodeTo) into the temporary file.
func WriteSnapshot(path string, s *Snapshot) error {
	return writeAtomic(path, func(w io.Writer) error { return EncodeTo(w, s) })
}

// writeAtomic is WriteFile with the content written by write.
func writeAtomic(path string, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("flow snapshot: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename: ENOENT, ignored
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("flow snapshot: write %s: %w", tmp, err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("flow snapshot: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("flow snapshot: fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("flow snapshot: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("flow snapshot: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// ReadFile reads and decodes the snapshot at path; a missing file is an error wrapping
// os.ErrNotExist.
func ReadFile(path string) (*Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
