package agent

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

type val struct{ n, ignored int }

func valEqual(a, b *val) bool { return a.n == b.n }

func TestChangeTracker(t *testing.T) {
	v := func(n, ignored int) *val { return &val{n, ignored} }
	tests := []struct {
		name    string
		updates [][2]*val // {prev, cur} for key "k"
		want    *Change[val]
	}{
		{name: "add", updates: [][2]*val{{nil, v(1, 0)}}, want: &Change[val]{nil, v(1, 0)}},
		{name: "no-op update dropped", updates: [][2]*val{{v(1, 0), v(1, 7)}}},
		{name: "add then delete dropped", updates: [][2]*val{{nil, v(1, 0)}, {v(1, 0), nil}}},
		{name: "update and back dropped", updates: [][2]*val{{v(1, 0), v(2, 0)}, {v(2, 0), v(1, 0)}}},
		{name: "coalesced keeps first previous and last current",
			updates: [][2]*val{{v(1, 0), v(2, 0)}, {v(2, 0), v(3, 0)}, {v(3, 0), v(4, 0)}},
			want:    &Change[val]{v(1, 0), v(4, 0)}},
		{name: "delete", updates: [][2]*val{{v(1, 0), nil}}, want: &Change[val]{v(1, 0), nil}},
		{name: "delete then re-add different", updates: [][2]*val{{v(1, 0), nil}, {nil, v(2, 0)}},
			want: &Change[val]{v(1, 0), v(2, 0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewChangeTracker[string](valEqual)
			var pending bool
			for _, u := range tc.updates {
				pending = tr.Update("k", u[0], u[1])
			}
			assert.Equal(t, tc.want != nil, pending)
			got := tr.Checkout()
			if tc.want == nil {
				assert.Empty(t, got)
				return
			}
			assert.Equal(t, map[string]Change[val]{"k": *tc.want}, got)
			assert.Empty(t, tr.Checkout(), "checkout clears")
		})
	}
}

func TestChangeTrackerKeysIndependent(t *testing.T) {
	tr := NewChangeTracker[string](valEqual)
	tr.Update("a", nil, &val{n: 1})
	tr.Update("b", nil, &val{n: 2})
	tr.Update("b", &val{n: 2}, nil)
	assert.Equal(t, 1, tr.Pending())
	got := tr.Checkout()
	assert.Contains(t, got, "a")
	assert.NotContains(t, got, "b")
}
