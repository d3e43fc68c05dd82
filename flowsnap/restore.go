package flowsnap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// BaseFlow is the flow Restore gives the external bridge when it has nothing better: the same
// bootstrap flow node-setup installs (table 0, priority 0, NORMAL), with which br-ex forwards the
// node's own traffic between the NIC and its internal port. The agent's own table-0 NORMAL flow
// has the same match and replaces it.
const BaseFlow = "flow add table=0,priority=0,actions=NORMAL"

// Target is one bridge as Restore writes it (implemented by ofctl.OpenFlow).
type Target interface {
	// OwnedFlows counts the bridge's flows that carry the agent's cookie owner byte.
	OwnedFlows(ctx context.Context) (int, error)
	// BundleText applies `ovs-ofctl bundle` lines as one atomic bundle.
	BundleText(ctx context.Context, lines []string) error
}

// RestoreConfig says what Restore replays and where.
type RestoreConfig struct {
	// Path is the snapshot file.
	Path string
	// Node, when set, must be the snapshot's node.
	Node string
	// BootID, when set, must be the snapshot's boot (ReadBootID).
	BootID string
	// Bridges are the bridges to restore by OVS name, in order (br-int first, as the agent
	// applies).
	Bridges []NamedTarget
	// BaseBridge is the OVS name of the external bridge: it gets BaseFlow when the snapshot is
	// missing, refused, or has no part for it, or when Open vSwitch rejects its part.
	BaseBridge string
	// Rejected reports whether a BundleText error means that Open vSwitch refused the lines
	// (ofctl.Error.Rejected) rather than that it could not be reached; nil: every error is
	// a refusal.
	Rejected func(error) bool
}

// NamedTarget is a Target with its OVS bridge name.
type NamedTarget struct {
	Name string
	Target
}

// Outcome is what Restore did to one bridge.
type Outcome struct {
	Bridge string
	// Action is one of: "restored" (the snapshot's lines), "base" (BaseFlow), "skipped" (the
	// bridge already holds the agent's flows: an agent or an earlier restore wrote them),
	// "none" (nothing to restore and no base flow for this bridge).
	Action string
	// Lines is the number of lines written.
	Lines int
	// Reason says why the snapshot was not used, when it was not.
	Reason string
}

func (o Outcome) String() string {
	s := fmt.Sprintf("%s: %s", o.Bridge, o.Action)
	if o.Lines > 0 {
		s += fmt.Sprintf(" (%d lines)", o.Lines)
	}
	if o.Reason != "" {
		s += ": " + o.Reason
	}
	return s
}

// Restore replays the snapshot into every bridge of cfg that holds none of the agent's flows:
// a bridge whose ovs-vswitchd restarted while no agent was running. A bridge that holds any is
// left alone (the agent, or an earlier restore, got there first; the agent reconciles by cookie).
// A missing, corrupt (Decode) or stale (Check) snapshot, or a bridge part that Open vSwitch
// rejects, is never half applied: each bridge's part is one atomic bundle, and the external
// bridge then gets BaseFlow, which carries the node's own traffic, so that the node reaches its
// API server and the agent can start and sync. The error is for bridges that cannot be reached
// (retry later; the others are restored all the same); refusals are in the outcomes.
func Restore(ctx context.Context, cfg RestoreConfig) ([]Outcome, error) {
	snap, reason := load(cfg)
	rejected := cfg.Rejected
	if rejected == nil {
		rejected = func(error) bool { return true }
	}
	var out []Outcome
	var errs []error
	for _, br := range cfg.Bridges {
		o, err := restoreBridge(ctx, cfg, br, snap, reason, rejected)
		if err != nil {
			// The other bridges still get theirs: br-ex's base flow must not wait for br-int.
			errs = append(errs, err)
			continue
		}
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}

// restoreBridge is Restore for one bridge.
func restoreBridge(ctx context.Context, cfg RestoreConfig, br NamedTarget, snap *Snapshot, reason string, rejected func(error) bool) (Outcome, error) {
	n, err := br.OwnedFlows(ctx)
	if err != nil {
		return Outcome{}, fmt.Errorf("%s: count the agent's flows: %w", br.Name, err)
	}
	if n > 0 {
		return Outcome{Bridge: br.Name, Action: "skipped", Reason: fmt.Sprintf("holds %d flows of the agent", n)}, nil
	}
	why := reason
	if snap != nil {
		part := snap.bridge(br.Name)
		if part == nil {
			why = "the snapshot has no part for this bridge"
		} else {
			err = br.BundleText(ctx, part.Lines)
			if err == nil {
				return Outcome{Bridge: br.Name, Action: "restored", Lines: len(part.Lines)}, nil
			}
			if !rejected(err) {
				return Outcome{}, fmt.Errorf("%s: replay the snapshot: %w", br.Name, err)
			}
			why = "Open vSwitch rejected the snapshot's bundle: " + firstLine(err.Error())
		}
	}
	if br.Name != cfg.BaseBridge {
		return Outcome{Bridge: br.Name, Action: "none", Reason: why}, nil
	}
	if err := br.BundleText(ctx, []string{BaseFlow}); err != nil {
		return Outcome{}, fmt.Errorf("%s: base flow: %w", br.Name, err)
	}
	return Outcome{Bridge: br.Name, Action: "base", Lines: 1, Reason: why}, nil
}

// load reads and checks cfg's snapshot; nil and the reason when it may not be replayed.
func load(cfg RestoreConfig) (*Snapshot, string) {
	snap, err := ReadFile(cfg.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "no snapshot at " + cfg.Path
	}
	if err != nil {
		return nil, err.Error()
	}
	if err := Check(snap, cfg.Node, cfg.BootID); err != nil {
		return nil, err.Error()
	}
	return snap, ""
}

func (s *Snapshot) bridge(name string) *Bridge {
	for i := range s.Bridges {
		if s.Bridges[i].Name == name {
			return &s.Bridges[i]
		}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
