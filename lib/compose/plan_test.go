package compose

import (
	"slices"
	"testing"
)

func TestApportion(t *testing.T) {
	for _, tt := range []struct {
		units   int64
		weights []float64
		want    []int64
	}{
		{10, []float64{0.5, 0.3, 0.2}, []int64{5, 3, 2}},
		{7, []float64{1, 1, 1}, []int64{3, 2, 2}},
		{70, []float64{0.4, 0.25, 0.2}, []int64{33, 21, 16}},
		{5, []float64{0, 1, 0}, []int64{0, 5, 0}},
		{3, []float64{0, 0}, []int64{0, 0}},
	} {
		if got := apportion(tt.units, tt.weights); !slices.Equal(got, tt.want) {
			t.Errorf("apportion(%d, %v) = %v, want %v", tt.units, tt.weights, got, tt.want)
		}
	}
}

// planOf builds a run of one level from counts per group, as the first
// pass would, and plans it.
func planOf(t *testing.T, spec *levelSpec, counts map[string]int64, order []string, total int64, repeat bool) map[string]*node {
	t.Helper()
	r := &run{spec: spec}
	r.root = newLevel(spec, nil, r)
	for _, g := range order {
		n := r.root.get(g, r)
		r.leaves[n.leaf].avail = counts[g]
	}
	r.total, r.repeat = total, repeat
	r.planGroups()
	out := map[string]*node{}
	for _, n := range r.root.nodes {
		out[n.name] = n
	}
	return out
}

func TestPlan(t *testing.T) {
	key := &key{name: "source"}
	counts := map[string]int64{"a": 1000, "b": 1000, "c": 50, "d": 400}
	order := []string{"a", "b", "c", "d"}
	spec := func(share, caps string, equal bool) *levelSpec {
		l, err := flagSpec("source", share, caps, equal, nil)
		if err != nil {
			t.Fatal(err)
		}
		l.key = key
		return l
	}
	taken := func(ns map[string]*node) map[string]int64 {
		m := map[string]int64{}
		for k, n := range ns {
			m[k] = n.taken
		}
		return m
	}
	check := func(name string, got, want map[string]int64) {
		t.Helper()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %v, want %v", name, got, want)
				return
			}
		}
	}
	// Exact shares; d is not in the mix.
	check("exact", taken(planOf(t, spec("a=0.5,b=0.3,c=0.2", "", false), counts, order, 200, false)), map[string]int64{"a": 100, "b": 60, "c": 40, "d": 0})
	// c falls 50 short of 100: a and b fill it 5:3.
	ns := planOf(t, spec("a=0.5,b=0.3,c=0.2", "", false), counts, order, 500, false)
	check("fill", taken(ns), map[string]int64{"a": 250 + 31, "b": 150 + 19, "c": 50})
	if ns["c"].target != 100 {
		t.Errorf("c's target %d, want 100", ns["c"].target)
	}
	// --repeat: c repeats its 50 records to 100.
	check("repeat", taken(planOf(t, spec("a=0.5,b=0.3,c=0.2", "", false), counts, order, 500, true)), map[string]int64{"a": 250, "b": 150, "c": 100})
	// The unnamed groups share what the named leave, in proportion.
	check("rest", taken(planOf(t, spec("a=0.5", "", false), counts, order, 1000, false)), map[string]int64{"a": 500, "b": 345, "c": 17, "d": 138})
	// ... or equally (0.2 each); c gives 50 of its 300, and the others
	// fill the 250 in proportion to their shares, 0.4 : 0.2 : 0.2.
	check("equal", taken(planOf(t, spec("a=0.4", "", true), counts, order, 1500, false)), map[string]int64{"a": 600 + 125, "b": 300 + 63, "c": 50, "d": 300 + 62})
	// A cap: d holds 10%, its excess goes to the others.
	check("cap", taken(planOf(t, spec("", "d=10%", false), counts, order, 1000, false)), map[string]int64{"d": 100})
	// No total: as many as every share can be given in full: c's 50 are 20%.
	ns = planOf(t, spec("a=0.5,b=0.3,c=0.2", "", false), counts, order, 0, false)
	check("full", taken(ns), map[string]int64{"a": 125, "b": 75, "c": 50})
	// Named shares that leave something, with no other group: scaled up.
	check("scaled", taken(planOf(t, spec("a=0.3,b=0.3", "", false), map[string]int64{"a": 1000, "b": 1000}, []string{"a", "b"}, 100, false)),
		map[string]int64{"a": 50, "b": 50})
}
