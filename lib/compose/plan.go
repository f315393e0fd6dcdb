package compose

import (
	"math"
	"slices"
)

// The plan: how many records each group gives, from the counts of the
// first pass. Every level splits what it is asked for among its groups by
// their weights (largest remainders, so each group is within one record
// of its exact share); a group that cannot give its part gives what it
// has, and the rest is asked of the others in proportion to their weights
// (or, with --repeat, a leaf repeats its records).

// node is a group at run time: a named group of the mix, or a value of
// the level's key the mix does not name.
type node struct {
	name  string
	spec  *groupSpec // nil: unnamed
	level *levelRun  // the level it is a group of
	child *levelRun  // nil: a leaf
	leaf  int        // index in run.leaves (leaves only)
	// avail counts the records that reached it; supply those of them
	// in the mix (its excluded descendants' left out).
	avail, supply int64
	// excluded: the mix takes none of its records (an unnamed group when
	// the named shares sum to 1, a group named with share 0).
	excluded bool
	weight   float64
	limit    int64 // its cap in records at the level's last ask (math.MaxInt64: none)
	// target is what its share asked of it at the level's last ask; ask
	// is what it was finally asked for after the others' shortfalls;
	// taken is what it gives (records written, repeats counted).
	target, ask, taken int64
}

// levelRun is a level at run time.
type levelRun struct {
	spec   *levelSpec
	nodes  []*node // named groups in the mix's order, then the others as first seen
	byName map[string]*node
	parent *node // nil at the top
	// slack is the share no group may take, when caps hold every group,
	// and its part of the last ask.
	slack       float64
	slackTarget int64
	// rescaled is the sum of the named shares when they leave something
	// and no other group has records, so that they were scaled to one
	// (0: not).
	rescaled float64
}

// newLevel makes the run-time level of spec, with its named groups.
func newLevel(spec *levelSpec, parent *node, r *run) *levelRun {
	lv := &levelRun{spec: spec, byName: map[string]*node{}, parent: parent}
	for _, g := range spec.groups {
		lv.addNode(g.name, g, r)
	}
	return lv
}

// addNode adds a group to the level.
func (lv *levelRun) addNode(name string, g *groupSpec, r *run) *node {
	n := &node{name: name, spec: g, level: lv, leaf: -1}
	n.excluded = !lv.spec.takes(g) || lv.excluded()
	if lv.spec.descends(g) && !n.excluded {
		n.child = newLevel(g.child, n, r)
	} else {
		n.leaf = len(r.leaves)
		r.leaves = append(r.leaves, &leafState{node: n})
	}
	lv.byName[name] = n
	lv.nodes = append(lv.nodes, n)
	return n
}

// excluded tells a level under an excluded group (none are made).
func (lv *levelRun) excluded() bool { return lv.parent != nil && lv.parent.excluded }

// get is the group named name, made on first sight.
func (lv *levelRun) get(name string, r *run) *node {
	if n := lv.byName[name]; n != nil {
		return n
	}
	return lv.addNode(name, nil, r)
}

// count adds up avail and supply from the leaves' counts.
func (lv *levelRun) count(r *run) (avail, supply int64) {
	for _, n := range lv.nodes {
		if n.child != nil {
			n.avail, n.supply = n.child.count(r)
		} else {
			n.avail = r.leaves[n.leaf].avail
			n.supply = n.avail
			if n.excluded {
				n.supply = 0
			}
		}
		avail += n.avail
		supply += n.supply
	}
	return avail, supply
}

// weigh gives every group its weight: a named share as it is; the
// groups without one split what the named shares leave, in proportion to
// their records (or equally); then caps, whose excess goes to the groups
// below their caps in proportion to their weights. What no group can
// take is the level's slack.
func (lv *levelRun) weigh() {
	var natural []*node
	var naturalSum float64
	for _, n := range lv.nodes {
		n.weight = 0
		switch {
		case n.excluded:
		case n.spec != nil && n.spec.share >= 0:
			n.weight = n.spec.share
		case n.supply > 0:
			natural = append(natural, n)
			if lv.spec.equal {
				naturalSum++
			} else {
				naturalSum += float64(n.supply)
			}
		}
	}
	lv.rescaled = 0
	if left := 1 - lv.spec.named; left > shareSlack {
		if naturalSum > 0 {
			for _, n := range natural {
				if lv.spec.equal {
					n.weight = left / naturalSum
				} else {
					n.weight = left * float64(n.supply) / naturalSum
				}
			}
		} else if lv.spec.named > 0 {
			// No other group has records: what the named shares leave
			// goes to them in proportion, as a shortfall would.
			lv.rescaled = lv.spec.named
			for _, n := range lv.nodes {
				n.weight /= lv.spec.named
			}
		}
	}
	// Caps, by water-filling: a capped group holds its cap, and its
	// excess goes to the groups not yet capped.
	capped := map[*node]bool{}
	bound := false
	for {
		excess := 0.0
		for _, n := range lv.nodes {
			if m := capOf(n); m > 0 && !capped[n] && n.weight > m+shareSlack {
				excess += n.weight - m
				n.weight = m
				capped[n] = true
			}
		}
		if excess <= 0 {
			break
		}
		bound = true
		free := 0.0
		for _, n := range lv.nodes {
			if !capped[n] && n.weight > 0 {
				free += n.weight
			}
		}
		if free <= 0 {
			break
		}
		for _, n := range lv.nodes {
			if !capped[n] && n.weight > 0 {
				n.weight += excess * n.weight / free
			}
		}
	}
	sum := 0.0
	for _, n := range lv.nodes {
		sum += n.weight
		if n.child != nil {
			n.child.weigh()
		}
	}
	lv.slack = 0
	if bound && sum < 1-shareSlack {
		lv.slack = 1 - sum
	}
}

func capOf(n *node) float64 {
	if n.spec == nil {
		return 0
	}
	return n.spec.max
}

// apportion splits units among weights by largest remainders: each part
// is the floor of its exact quota, and the units left go one each to the
// largest fractions (ties to the earlier). The parts sum to units when
// any weight is positive.
func apportion(units int64, weights []float64) []int64 {
	parts := make([]int64, len(weights))
	sum := 0.0
	for _, w := range weights {
		sum += w
	}
	if units <= 0 || sum <= 0 {
		return parts
	}
	type frac struct {
		i int
		f float64
	}
	var fracs []frac
	var given int64
	for i, w := range weights {
		if w <= 0 {
			continue
		}
		q := float64(units) * w / sum
		f := math.Floor(q)
		parts[i] = int64(f)
		given += parts[i]
		fracs = append(fracs, frac{i, q - f})
	}
	slices.SortStableFunc(fracs, func(a, b frac) int {
		switch {
		case a.f > b.f:
			return -1
		case a.f < b.f:
			return 1
		}
		return 0
	})
	for j := 0; given < units && len(fracs) > 0; j = (j + 1) % len(fracs) {
		parts[fracs[j].i]++
		given++
	}
	return parts
}

// deliver plans n for an ask of t records and returns what it gives.
func (n *node) deliver(t int64, repeat bool) int64 {
	n.ask = t
	switch {
	case n.excluded || t <= 0:
		n.taken = 0
		if n.child != nil {
			n.child.plan(0, repeat)
		}
	case n.child != nil:
		n.taken = n.child.plan(t, repeat)
	case repeat && n.supply > 0:
		n.taken = t
	default:
		n.taken = min(t, n.supply)
	}
	return n.taken
}

// plan splits an ask of t records among the level's groups and returns
// what they give.
func (lv *levelRun) plan(t int64, repeat bool) int64 {
	weights := make([]float64, len(lv.nodes)+1)
	for i, n := range lv.nodes {
		weights[i] = n.weight
		n.limit = math.MaxInt64
		if m := capOf(n); m > 0 {
			n.limit = int64(math.Floor(m*float64(t) + shareSlack))
		}
	}
	weights[len(lv.nodes)] = lv.slack
	asks := apportion(t, weights)
	lv.slackTarget = asks[len(lv.nodes)]
	deficit := lv.slackTarget
	closed := make([]bool, len(lv.nodes))
	for i, n := range lv.nodes {
		n.target = asks[i]
		n.ask = asks[i]
	}
	given := make([]int64, len(lv.nodes))
	for i, n := range lv.nodes {
		given[i] = n.deliver(n.ask, repeat)
	}
	for {
		for i, n := range lv.nodes {
			if closed[i] || given[i] >= n.ask {
				continue
			}
			// Short: it gives what it has, planned for exactly that (a
			// nested level's caps then hold of what it gives).
			closed[i] = true
			deficit += n.ask - given[i]
			for d := given[i]; ; {
				given[i] = n.deliver(d, repeat)
				if given[i] >= d {
					break
				}
				d = given[i]
			}
		}
		if deficit <= 0 {
			break
		}
		var open []int
		ws := make([]float64, 0, len(lv.nodes))
		for i, n := range lv.nodes {
			if !closed[i] && n.weight > 0 && n.ask < n.limit {
				open = append(open, i)
				ws = append(ws, n.weight)
			}
		}
		if len(open) == 0 {
			break
		}
		extra := apportion(deficit, ws)
		for j, i := range open {
			n := lv.nodes[i]
			e := min(extra[j], n.limit-n.ask)
			if e <= 0 {
				continue
			}
			deficit -= e
			given[i] = n.deliver(n.ask+e, repeat)
		}
	}
	var sum int64
	for _, g := range given {
		sum += g
	}
	return sum
}

// short tells a plan in which some group that has records gives less
// than its share asked (one with none is short at any total).
func (lv *levelRun) short() bool {
	for _, n := range lv.nodes {
		if (n.supply > 0 && n.taken < n.target) || (n.child != nil && n.child.short()) {
			return true
		}
	}
	return false
}

// fullTotal is the largest total every group can give its share of
// without repeats: the least, over the leaves, of a leaf's records over
// its share of the whole.
func (lv *levelRun) fullTotal() int64 {
	best := int64(-1)
	var walk func(lv *levelRun, w float64)
	walk = func(lv *levelRun, w float64) {
		for _, n := range lv.nodes {
			nw := w * n.weight
			if nw <= 0 || n.supply == 0 {
				continue // a group with no records is short at any total: the others fill it
			}
			if n.child != nil {
				walk(n.child, nw)
				continue
			}
			if t := int64(math.Floor(float64(n.supply)/nw + 1e-6)); best < 0 || t < best {
				best = t
			}
		}
	}
	walk(lv, 1)
	return max(best, 0)
}
