package extract

import (
	"slices"
	"testing"
)

// TestOATakes: which messages of a tree each --turns mode ends a prompt
// at, unusable branches (a broken message and all below it) left out.
//
//	0 prompter (root)
//	├─ 1 assistant
//	│  └─ 2 prompter
//	│     └─ 3 assistant
//	├─ 4 assistant
//	│  └─ 5 prompter        broken: it and 6 are not usable
//	│     └─ 6 assistant
//	└─ 7 assistant
func TestOATakes(t *testing.T) {
	type node struct {
		parent int
		role   string
		broken bool
	}
	tree := []node{
		{-1, roleUser, false}, {0, roleAssistant, false}, {1, roleUser, false}, {2, roleAssistant, false},
		{0, roleAssistant, false}, {4, roleUser, true}, {5, roleAssistant, false}, {0, roleAssistant, false},
	}
	tests := []struct {
		turns string
		want  []int
	}{
		{TurnsFirst, []int{0}},
		{TurnsEach, []int{0, 2}},
		{TurnsAllButLast, []int{2}}, // 0 has a prompter (2) below it
		{TurnsAll, []int{3, 4, 7}},  // the usable leaves: 4's only reply is broken
	}
	for _, tt := range tests {
		t.Run(tt.turns, func(t *testing.T) {
			x, err := NewExtractor(Options{Turns: tt.turns})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range tree {
				on := oaNode{parent: n.parent, role: n.role}
				if n.broken {
					on.bad = reject(ReasonUnknownRole, "broken")
				}
				x.nodes = append(x.nodes, on)
			}
			x.oaBranches()
			var got []int
			for i := range x.nodes {
				if x.oaUsable(i) && x.oaTakes(i) {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("--turns %s takes %v, want %v", tt.turns, got, tt.want)
			}
			for i, want := range []bool{true, true, true, true, true, false, false, true} {
				if x.oaUsable(i) != want {
					t.Errorf("node %d usable = %v, want %v", i, !want, want)
				}
			}
		})
	}
}
