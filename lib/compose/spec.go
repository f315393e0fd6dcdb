package compose

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"tokenmill/lib/jsonl"
)

// A mix is a tree of levels: each level groups the records that reach it
// by one key and gives its groups shares of its records; a group may be
// split again by another key (nesting, --spec only).

// levelSpec is one level: its key and its named groups.
type levelSpec struct {
	key    *key
	groups []*groupSpec // in the order named
	byName map[string]*groupSpec
	// equal: the groups without a share split what is left equally, not
	// in proportion to their records.
	equal bool
	// named is the sum of the named shares.
	named float64
}

// groupSpec is one named group.
type groupSpec struct {
	name  string
	share float64 // < 0: none (the group shares what is left with the unnamed ones)
	max   float64 // a cap on the group's share of its level; 0: none
	child *levelSpec
}

// shareSlack absorbs the rounding of written fractions (0.1+0.2+0.7).
const shareSlack = 1e-9

// rest is whether the groups without a share take part: the named
// shares leave something.
func (l *levelSpec) rest() bool { return l.named < 1-shareSlack }

// takes tells whether the mix takes records of the group g (nil: a
// group the level does not name): one with a share above 0, or one
// without a share when the named shares leave something.
func (l *levelSpec) takes(g *groupSpec) bool {
	if g == nil || g.share < 0 {
		return l.rest()
	}
	return g.share > 0
}

// descends tells whether the records of group g are grouped again by a
// nested level.
func (l *levelSpec) descends(g *groupSpec) bool {
	return g != nil && g.child != nil && l.takes(g)
}

// add names a group, refusing a second mention.
func (l *levelSpec) add(g *groupSpec) error {
	if l.byName == nil {
		l.byName = map[string]*groupSpec{}
	}
	if _, dup := l.byName[g.name]; dup {
		return fmt.Errorf("group %q named twice", g.name)
	}
	l.byName[g.name] = g
	l.groups = append(l.groups, g)
	if g.share > 0 {
		l.named += g.share
	}
	return nil
}

// check refuses shares that do not fit in one.
func (l *levelSpec) check(where string) error {
	if l.named > 1+shareSlack {
		return fmt.Errorf("%sthe shares sum to %s, more than 1: give fractions of the whole (e.g. a=0.5,b=0.3,c=0.2) or percentages (a=50%%)", where, trimFloat(l.named))
	}
	for _, g := range l.groups {
		if g.child != nil {
			if err := g.child.check(fmt.Sprintf("%sgroup %q: ", where, g.name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// keys lists every key of the tree, for the fields records are read for.
func (l *levelSpec) keys(out []*key) []*key {
	out = append(out, l.key)
	for _, g := range l.groups {
		if g.child != nil {
			out = g.child.keys(out)
		}
	}
	return out
}

// parseFraction reads a share or cap: a number from 0 to 1, or a
// percentage.
func parseFraction(s string) (float64, error) {
	s = strings.TrimSpace(s)
	scale := 1.0
	if strings.HasSuffix(s, "%") {
		s, scale = strings.TrimSpace(strings.TrimSuffix(s, "%")), 0.01
	}
	v, err := strconv.ParseFloat(s, 64)
	v *= scale
	if err != nil || math.IsNaN(v) || v < 0 || v > 1+shareSlack {
		return 0, fmt.Errorf("%q is not a share: want a fraction from 0 to 1 (0.25) or a percentage (25%%)", s)
	}
	return v, nil
}

// parseAssignments reads NAME=VALUE,NAME=VALUE (a name may hold "=": the
// last one splits).
func parseAssignments(flag, s string) ([][2]string, error) {
	var out [][2]string
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		i := strings.LastIndexByte(part, '=')
		if i <= 0 {
			return nil, fmt.Errorf("%s %q: want GROUP=SHARE pairs separated by commas, e.g. %s code=0.3,math=0.2", flag, part, flag)
		}
		out = append(out, [2]string{strings.TrimSpace(part[:i]), strings.TrimSpace(part[i+1:])})
	}
	return out, nil
}

// flagSpec builds the one-level mix of --by, --share, --max and --equal.
func flagSpec(by, share, caps string, equal bool, buckets []int) (*levelSpec, error) {
	k, err := parseKey(by, buckets)
	if err != nil {
		return nil, fmt.Errorf("--by: %v", err)
	}
	l := &levelSpec{key: k, equal: equal}
	pairs, err := parseAssignments("--share", share)
	if err != nil {
		return nil, err
	}
	for _, p := range pairs {
		v, err := parseFraction(p[1])
		if err != nil {
			return nil, fmt.Errorf("--share %s: %v", p[0], err)
		}
		if err := l.add(&groupSpec{name: p[0], share: v}); err != nil {
			return nil, fmt.Errorf("--share: %v", err)
		}
	}
	capPairs, err := parseAssignments("--max", caps)
	if err != nil {
		return nil, err
	}
	for _, p := range capPairs {
		v, err := parseFraction(p[1])
		if err != nil {
			return nil, fmt.Errorf("--max %s: %v", p[0], err)
		}
		if g := l.byName[p[0]]; g != nil {
			g.max = v
			continue
		}
		if err := l.add(&groupSpec{name: p[0], share: -1, max: v}); err != nil {
			return nil, fmt.Errorf("--max: %v", err)
		}
	}
	return l, l.check("")
}

// fileSpec is what a --spec file holds besides the tree.
type fileSpec struct {
	total  int64
	repeat bool
	seed   *uint64
}

// maxSpecBytes bounds a --spec file: a mix is a few kilobytes.
const maxSpecBytes = 1 << 20

// loadSpec reads a --spec file (YAML, or JSON, which YAML reads too).
func loadSpec(path string, buckets []int) (*levelSpec, *fileSpec, error) {
	data, err := jsonl.ReadRegular(path, maxSpecBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("--spec: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("--spec %s: %v", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil, fmt.Errorf("--spec %s is empty: it names the key (by:) and the groups' shares (groups:)", path)
	}
	fs := &fileSpec{}
	l, err := readLevel(doc.Content[0], buckets, fs, true)
	if err != nil {
		return nil, nil, fmt.Errorf("--spec %s: %v", path, err)
	}
	if err := l.check(""); err != nil {
		return nil, nil, fmt.Errorf("--spec %s: %v", path, err)
	}
	return l, fs, nil
}

// at names a node's line for messages.
func at(n *yaml.Node) string { return fmt.Sprintf("line %d: ", n.Line) }

// readLevel reads a level: by, groups, equal (and at the top, total,
// repeat and seed).
func readLevel(n *yaml.Node, buckets []int, fs *fileSpec, top bool) (*levelSpec, error) {
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%sa level is a mapping with the keys by and groups", at(n))
	}
	l := &levelSpec{}
	var groups *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Value == "by":
			key, err := parseKey(v.Value, buckets)
			if err != nil {
				return nil, fmt.Errorf("%s%v", at(v), err)
			}
			l.key = key
		case k.Value == "groups":
			groups = v
		case k.Value == "equal":
			if err := v.Decode(&l.equal); err != nil {
				return nil, fmt.Errorf("%sequal: want true or false", at(v))
			}
		case top && k.Value == "total":
			if err := v.Decode(&fs.total); err != nil || fs.total < 0 {
				return nil, fmt.Errorf("%stotal: want a whole number of records", at(v))
			}
		case top && k.Value == "repeat":
			if err := v.Decode(&fs.repeat); err != nil {
				return nil, fmt.Errorf("%srepeat: want true or false", at(v))
			}
		case top && k.Value == "seed":
			var s uint64
			if err := v.Decode(&s); err != nil {
				return nil, fmt.Errorf("%sseed: want a whole number", at(v))
			}
			fs.seed = &s
		default:
			allowed := "by, groups, equal"
			if top {
				allowed += ", total, repeat, seed"
			}
			return nil, fmt.Errorf("%sunknown field %q (a level has %s)", at(k), k.Value, allowed)
		}
	}
	if l.key == nil {
		return nil, fmt.Errorf("%sa level needs by: (source, lang, length, tools, thinking, arm or a field's path)", at(n))
	}
	if groups == nil {
		return l, nil
	}
	if groups.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%sgroups: a mapping of group names to shares", at(groups))
	}
	for i := 0; i+1 < len(groups.Content); i += 2 {
		g, err := readGroup(groups.Content[i], groups.Content[i+1], buckets)
		if err != nil {
			return nil, err
		}
		if err := l.add(g); err != nil {
			return nil, fmt.Errorf("%s%v", at(groups.Content[i]), err)
		}
	}
	return l, nil
}

// readGroup reads a group: a share, or a mapping of share, max and a
// nested level (by, groups, equal).
func readGroup(k, v *yaml.Node, buckets []int) (*groupSpec, error) {
	g := &groupSpec{name: k.Value, share: -1}
	if v.Kind == yaml.ScalarNode {
		s, err := parseFraction(v.Value)
		if err != nil {
			return nil, fmt.Errorf("%sgroup %q: %v", at(v), g.name, err)
		}
		g.share = s
		return g, nil
	}
	if v.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%sgroup %q: a share (0.3, 30%%) or a mapping of share, max, by and groups", at(v), g.name)
	}
	nested := &yaml.Node{Kind: yaml.MappingNode, Line: v.Line}
	for i := 0; i+1 < len(v.Content); i += 2 {
		fk, fv := v.Content[i], v.Content[i+1]
		switch fk.Value {
		case "share", "max":
			s, err := parseFraction(fv.Value)
			if err != nil {
				return nil, fmt.Errorf("%sgroup %q: %s: %v", at(fv), g.name, fk.Value, err)
			}
			if fk.Value == "share" {
				g.share = s
			} else {
				g.max = s
			}
		case "by", "groups", "equal":
			nested.Content = append(nested.Content, fk, fv)
		default:
			return nil, fmt.Errorf("%sgroup %q: unknown field %q (a group has share, max, by, groups, equal)", at(fk), g.name, fk.Value)
		}
	}
	if len(nested.Content) > 0 {
		child, err := readLevel(nested, buckets, nil, false)
		if err != nil {
			return nil, err
		}
		g.child = child
	}
	return g, nil
}

// trimFloat writes a share without trailing zeros.
func trimFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
