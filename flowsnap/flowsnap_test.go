package flowsnap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sample() *Snapshot {
	return &Snapshot{Node: "node1", BootID: "boot-a", Written: time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC),
		Bridges: []Bridge{
			{Name: "br-int", Lines: []string{
				"group add_or_mod group_id=7,type=select,bucket=bucket_id:1,actions=output:2",
				"flow add priority=10,table=0,cookie=0x5c01000000000001,actions=group:7",
			}},
			{Name: "br-ex", Lines: []string{"flow add priority=0,table=0,idle_timeout=0,cookie=0x5c01e949077b82f7,actions=normal"}},
			{Name: "br-empty"},
		}}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	s := sample()
	data := Encode(s)
	got, err := Decode(data)
	require.NoError(t, err)
	assert.Equal(t, s.Node, got.Node)
	assert.Equal(t, s.BootID, got.BootID)
	assert.True(t, s.Written.Equal(got.Written))
	require.Len(t, got.Bridges, 3)
	for i := range s.Bridges {
		assert.Equal(t, s.Bridges[i].Name, got.Bridges[i].Name)
		assert.Equal(t, len(s.Bridges[i].Lines), len(got.Bridges[i].Lines))
		for j := range s.Bridges[i].Lines {
			assert.Equal(t, s.Bridges[i].Lines[j], got.Bridges[i].Lines[j])
		}
	}
	assert.Equal(t, 3, got.Lines())
	assert.True(t, bytes.Equal(data, Encode(got)), "re-encoding gives the same bytes")
}

// Every way a file can be broken is refused with ErrCorrupt, never half read.
func TestDecodeRefusesCorrupt(t *testing.T) {
	good := Encode(sample())
	flip := append([]byte(nil), good...)
	flip[len(flip)/2] ^= 0x20
	cases := map[string][]byte{
		"empty":                       nil,
		"truncated":                   good[:len(good)-30],
		"no trailing nl":              good[:len(good)-1],
		"one byte flipped (checksum)": flip,
		"other version": resealed(t, func(s string) string {
			return strings.Replace(s, "version 1\n", "version 2\n", 1)
		}),
		"no header": resealed(t, func(s string) string {
			return strings.Replace(s, header, "# something else\n", 1)
		}),
		"count too large": resealed(t, func(s string) string {
			return strings.Replace(s, "bridge br-ex 1\n", "bridge br-ex 9\n", 1)
		}),
		"not a bundle line": resealed(t, func(s string) string {
			return strings.Replace(s, "flow add priority=0", "rm -rf priority=0", 1)
		}),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(data)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrCorrupt)
		})
	}
}

// resealed edits a good snapshot's body and gives it a correct checksum again.
func resealed(t *testing.T, edit func(string) string) []byte {
	t.Helper()
	good := Encode(sample())
	body, _, ok := cutLastLine(good)
	require.True(t, ok)
	return appendSum([]byte(edit(string(body))))
}

func TestCheckStale(t *testing.T) {
	s := sample()
	require.NoError(t, Check(s, "node1", "boot-a"))
	require.NoError(t, Check(s, "", ""))
	assert.ErrorIs(t, Check(s, "node2", "boot-a"), ErrStale)
	err := Check(s, "node1", "boot-b")
	assert.ErrorIs(t, err, ErrStale)
	assert.Contains(t, err.Error(), "reboot")
	s.BootID = ""
	assert.ErrorIs(t, Check(s, "node1", "boot-a"), ErrStale)
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "flows.snapshot")
	require.NoError(t, WriteFile(path, Encode(sample())))
	require.NoError(t, WriteFile(path, Encode(sample())))
	got, err := ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "node1", got.Node)
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, ents, 1, "no temporary file left")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

// fakeBridge records bundles; reject refuses every bundle but the base flow.
type fakeBridge struct {
	owned   int
	reject  bool
	down    bool
	bundles [][]string
}

var errRejected = errors.New("OFPBAC_BAD_OUT_PORT")

func (f *fakeBridge) OwnedFlows(context.Context) (int, error) {
	if f.down {
		return 0, errors.New("connection refused")
	}
	return f.owned, nil
}

func (f *fakeBridge) BundleText(_ context.Context, lines []string) error {
	if f.reject && (len(lines) != 1 || lines[0] != BaseFlow) {
		return errRejected
	}
	f.bundles = append(f.bundles, lines)
	return nil
}

func restoreWith(t *testing.T, data []byte, in, ex *fakeBridge, bootID string) []Outcome {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flows.snapshot")
	if data != nil {
		require.NoError(t, os.WriteFile(path, data, 0o600))
	}
	outs, err := Restore(context.Background(), RestoreConfig{Path: path, Node: "node1", BootID: bootID,
		Bridges: []NamedTarget{{"br-int", in}, {"br-ex", ex}}, BaseBridge: "br-ex"})
	require.NoError(t, err)
	return outs
}

func TestRestore(t *testing.T) {
	good := Encode(sample())
	t.Run("replays each bridge's part", func(t *testing.T) {
		in, ex := &fakeBridge{}, &fakeBridge{}
		outs := restoreWith(t, good, in, ex, "boot-a")
		assert.Equal(t, [][]string{sample().Bridges[0].Lines}, in.bundles)
		assert.Equal(t, [][]string{sample().Bridges[1].Lines}, ex.bundles)
		assert.Equal(t, "restored", outs[0].Action)
		assert.Equal(t, "restored", outs[1].Action)
	})
	t.Run("leaves a bridge with the agent's flows alone", func(t *testing.T) {
		in, ex := &fakeBridge{owned: 3}, &fakeBridge{}
		outs := restoreWith(t, good, in, ex, "boot-a")
		assert.Empty(t, in.bundles)
		assert.Equal(t, "skipped", outs[0].Action)
		assert.Equal(t, "restored", outs[1].Action)
	})
	for name, tc := range map[string]struct {
		data   []byte
		bootID string
		reason string
	}{
		"missing":           {nil, "boot-a", "no snapshot"},
		"corrupt":           {good[:len(good)-10], "boot-a", "corrupt"},
		"another boot":      {good, "boot-b", "reboot"},
		"another version":   {resealed(t, func(s string) string { return strings.Replace(s, "version 1\n", "version 0\n", 1) }), "boot-a", "version"},
		"another node file": {resealed(t, func(s string) string { return strings.Replace(s, "node node1\n", "node node9\n", 1) }), "boot-a", "node9"},
	} {
		t.Run("base flow only: "+name, func(t *testing.T) {
			in, ex := &fakeBridge{}, &fakeBridge{}
			outs := restoreWith(t, tc.data, in, ex, tc.bootID)
			assert.Empty(t, in.bundles, "nothing into br-int")
			assert.Equal(t, [][]string{{BaseFlow}}, ex.bundles)
			assert.Equal(t, "none", outs[0].Action)
			assert.Equal(t, "base", outs[1].Action)
			assert.Contains(t, outs[1].Reason, tc.reason)
		})
	}
	t.Run("a part Open vSwitch rejects falls back to the base flow", func(t *testing.T) {
		in, ex := &fakeBridge{reject: true}, &fakeBridge{reject: true}
		outs := restoreWith(t, good, in, ex, "boot-a")
		assert.Empty(t, in.bundles)
		assert.Equal(t, [][]string{{BaseFlow}}, ex.bundles)
		assert.Equal(t, "none", outs[0].Action)
		assert.Contains(t, outs[1].Reason, "rejected")
	})
	t.Run("an unreachable bridge is an error (retry), the others are restored", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s")
		require.NoError(t, os.WriteFile(path, good, 0o600))
		ex := &fakeBridge{}
		outs, err := Restore(context.Background(), RestoreConfig{Path: path, BaseBridge: "br-ex",
			Bridges: []NamedTarget{{"br-int", &fakeBridge{down: true}}, {"br-ex", ex}}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "br-int")
		require.Len(t, outs, 1)
		assert.Equal(t, "restored", outs[0].Action)
		assert.Equal(t, [][]string{sample().Bridges[1].Lines}, ex.bundles)
	})
}

// appendSum appends the sha256 line of body (as Encode ends a file).
func appendSum(body []byte) []byte {
	sum := sha256.Sum256(body)
	return fmt.Appendf(body, "sha256 %s\n", hex.EncodeToString(sum[:]))
}

// TestWriteSnapshotStreams: WriteSnapshot's file is Encode's bytes, whose last line is the
// sha256 of the rest.
func TestWriteSnapshotStreams(t *testing.T) {
	s := sample()
	path := filepath.Join(t.TempDir(), "snap")
	require.NoError(t, WriteSnapshot(path, s))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, Encode(s), got)
	body, _, ok := cutLastLine(got)
	require.True(t, ok)
	assert.Equal(t, appendSum(body), got)
}
