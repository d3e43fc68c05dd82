package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// annotateDump and the egress view read dump-flows lines through ofctl.ParseFlowLine: on a
// recorded OVS 3.1 dump with named tables, every flow gets its kind, its table and, for the
// group flow, its group; a drop of the pipeline gets its reason.
func TestAnnotateRecordedDump(t *testing.T) {
	b, err := os.ReadFile("../../ofctl/testdata/dump-ovs31.txt")
	require.NoError(t, err)
	s := string(b)
	start := strings.Index(s, "### --names dump-flows\n") + len("### --names dump-flows\n")
	dump := s[start : start+strings.Index(s[start:], "###")]
	lines := strings.Split(strings.TrimSpace(annotateDump(dump, flows.BrEx, nil)), "\n")
	require.Len(t, lines, 4)
	assert.True(t, strings.HasSuffix(lines[0], "  # ex-base; ExClassifier"), lines[0])
	assert.True(t, strings.HasSuffix(lines[1], "  # service-port; ExServiceLB"), lines[1])
	assert.Contains(t, lines[3], "  # service-port; ExServiceCT; group ")

	f, table, ok := parseDumpLine(strings.Split(dump, "\n")[3], flows.BrEx, nil)
	require.True(t, ok)
	assert.Equal(t, flows.ExServiceCT, table)
	assert.Equal(t, egressFlow{Bridge: "br-ex", Object: "service-port", Table: "ExServiceCT", Priority: 100,
		Flow: strings.TrimSpace(strings.Split(dump, "\n")[3])}, f)
	_, _, ok = parseDumpLine("OFPST_FLOW reply (OF1.5) (xid=0x2):", flows.BrEx, nil)
	assert.False(t, ok)
}
