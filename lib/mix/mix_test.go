package mix

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const thinkingMix = `
# Qwen3-style thinking on and off, and a hotter arm.
arms:
  - name: think
    weight: 5
    params:
      chat_template_kwargs: {enable_thinking: true}
      temperature: 0.6
      top_p: 0.95
      max_tokens: 8192
  - name: no_think
    weight: 3
    params:
      chat_template_kwargs: {enable_thinking: false}
      temperature: 0.7
      top_p: 0.8
      stop: ["###"]
  - name: effort_high
    weight: 2
    params: {reasoning_effort: high}
`

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name, file string
		names      []string
		params     []string
		shares     []float64
		err        string
	}{
		{name: "yaml", file: thinkingMix, names: []string{"think", "no_think", "effort_high"},
			params: []string{
				`{"chat_template_kwargs":{"enable_thinking":true},"max_tokens":8192,"temperature":0.6,"top_p":0.95}`,
				`{"chat_template_kwargs":{"enable_thinking":false},"stop":["###"],"temperature":0.7,"top_p":0.8}`,
				`{"reasoning_effort":"high"}`},
			shares: []float64{0.5, 0.3, 0.2}},
		{name: "json keeps the params as written", file: `{"arms": [{"name": "a", "weight": 1, "params": {"top_p": 0.9, "temperature": 1}}, {"name": "b", "weight": 3}]}`,
			names: []string{"a", "b"}, params: []string{`{"top_p":0.9,"temperature":1}`, ``}, shares: []float64{0.25, 0.75}},
		{name: "weight defaults to 1", file: "arms:\n  - name: a\n  - name: b\n", names: []string{"a", "b"}, params: []string{"", ""}, shares: []float64{0.5, 0.5}},
		{name: "no arms", file: "arms: []\n", err: "has no arms"},
		{name: "empty file", file: "", err: "has no arms"},
		{name: "unknown top-level field (yaml)", file: "arm:\n  - name: a\n", err: "field arm not found"},
		{name: "unknown top-level field (json)", file: `{"arms": [{"name": "a"}], "seed": 3}`, err: `unknown field "seed"`},
		{name: "unknown arm field", file: "arms:\n  - name: a\n    wieght: 2\n", err: "field wieght not found"},
		{name: "trailing json", file: `{"arms": [{"name": "a"}]} {}`, err: "data after the object"},
		{name: "no name", file: "arms:\n  - weight: 2\n", err: `arm 1: name "": want 1 to 64 characters`},
		{name: "bad name", file: "arms:\n  - name: a b\n", err: `want letters, digits`},
		{name: "duplicate", file: "arms:\n  - name: a\n  - name: a\n", err: `arm 2 ("a"): two arms are named "a"`},
		{name: "zero weight", file: "arms:\n  - name: a\n    weight: 0\n", err: "weight 0: want a positive number"},
		{name: "negative weight", file: `{"arms": [{"name": "a", "weight": -1}]}`, err: "weight -1: want a positive number"},
		{name: "infinite weight", file: "arms:\n  - name: a\n    weight: .inf\n", err: "weight +Inf"},
		{name: "weights past the largest number", file: `{"arms": [{"name": "a", "weight": 1e308}, {"name": "b", "weight": 1e308}]}`, err: "add up past the largest number"},
		{name: "params not an object", file: `{"arms": [{"name": "a", "params": [1]}]}`, err: "params: not a JSON object"},
		{name: "reserved seed", file: "arms:\n  - name: a\n    params: {seed: 3}\n", err: `"seed" is --seed's`},
		{name: "reserved messages", file: `{"arms": [{"name": "a", "params": {"messages": []}}]}`, err: `"messages" is the record's`},
		{name: "yaml off is a string", file: "arms:\n  - name: a\n    params:\n      chat_template_kwargs: {enable_thinking: off}\n", err: `chat_template_kwargs.enable_thinking: want true or false, got "off"`},
		{name: "temperature as text", file: "arms:\n  - name: a\n    params: {temperature: hot}\n", err: `temperature: want a number, got "hot"`},
		{name: "max_tokens zero", file: "arms:\n  - name: a\n    params: {max_tokens: 0}\n", err: "max_tokens: want a positive integer, got 0"},
		{name: "max_tokens fraction", file: `{"arms": [{"name": "a", "params": {"max_tokens": 1.5}}]}`, err: "max_tokens: want a positive integer"},
		{name: "stop list", file: `{"arms": [{"name": "a", "params": {"stop": ["a", 1]}}]}`, err: "stop: want a string or a list of strings"},
		{name: "null removes", file: `{"arms": [{"name": "a", "params": {"temperature": null}}]}`, names: []string{"a"}, params: []string{`{"temperature":null}`}, shares: []float64{1}},
		{name: "kwargs not an object", file: `{"arms": [{"name": "a", "params": {"chat_template_kwargs": true}}]}`, err: "chat_template_kwargs: want an object"},
		{name: "bad yaml", file: "arms: [\n", err: "reading the mixture as YAML"},
		{name: "bad json", file: `{"arms": [}`, err: "reading the mixture as JSON"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.file))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(m.Names(), ","); got != strings.Join(tt.names, ",") {
				t.Errorf("names %s, want %v", got, tt.names)
			}
			for i, a := range m.Arms {
				if string(a.Params) != tt.params[i] {
					t.Errorf("arm %s: params %s, want %s", a.Name, a.Params, tt.params[i])
				}
				if math.Abs(m.Share(i)-tt.shares[i]) > 1e-12 {
					t.Errorf("arm %s: share %v, want %v", a.Name, m.Share(i), tt.shares[i])
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mix.yaml")
	if err := os.WriteFile(path, []byte(thinkingMix), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Describe(); got != "think 50%, no_think 30%, effort_high 20%" {
		t.Errorf("Describe: %q", got)
	}
	if got := m.Arms[0].Keys; strings.Join(got, ",") != "chat_template_kwargs,max_tokens,temperature,top_p" {
		t.Errorf("keys %v", got)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "none.yaml")); err == nil {
		t.Error("a missing file loaded")
	}
	// A file past the bound, and a device that never ends, are refused
	// once the bound is read.
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, append([]byte(thinkingMix), bytes.Repeat([]byte("# pad\n"), MaxFileBytes/6)...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{big, "/dev/zero"} {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "larger than 1024 KiB") {
			t.Errorf("%s: %v, want it refused as too large", path, err)
		}
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("a directory loaded")
	}
}

// counts assigns n ids ("alpaca-00000", ...) of sample under seed.
func counts(m *Mix, seed int64, sample, n int) []int {
	c := make([]int, len(m.Arms))
	for i := 0; i < n; i++ {
		c[m.Pick(seed, fmt.Sprintf("alpaca-%05d", i), sample)]++
	}
	return c
}

// TestPickMatchesTheWeights: on 10,000 fixed ids, for each of ten fixed
// (seed, sample) pairs, the arms' counts pass a chi-square test of the
// weights at the 0.1% level (13.82 for two degrees of freedom), and each
// arm's count is within four binomial standard deviations of its
// expectation. The ids and seeds are fixed, so the test is deterministic:
// it checks that the hash spreads ids as the weights say.
func TestPickMatchesTheWeights(t *testing.T) {
	m, err := Parse([]byte(thinkingMix))
	if err != nil {
		t.Fatal(err)
	}
	const n = 10_000
	const critical = 13.816 // chi-square, 2 degrees of freedom, p = 0.001
	for seed := int64(0); seed < 5; seed++ {
		for sample := 0; sample < 2; sample++ {
			c := counts(m, seed, sample, n)
			chi := 0.0
			for i, got := range c {
				p := m.Share(i)
				want := n * p
				chi += (float64(got) - want) * (float64(got) - want) / want
				if sd := math.Sqrt(n * p * (1 - p)); math.Abs(float64(got)-want) > 4*sd {
					t.Errorf("seed %d sample %d: arm %s got %d of %d, want %.0f±%.0f", seed, sample, m.Arms[i].Name, got, n, want, 4*sd)
				}
			}
			t.Logf("seed %d sample %d: %v, chi-square %.2f", seed, sample, c, chi)
			if chi > critical {
				t.Errorf("seed %d sample %d: counts %v, chi-square %.2f > %.2f", seed, sample, c, chi, critical)
			}
		}
	}
}

// TestPickIsStable: an (id, sample)'s arm depends on the id, the sample,
// the seed and the arms alone: not on the order of the arms in the file,
// and another seed or sample draws anew.
func TestPickIsStable(t *testing.T) {
	m, _ := Parse([]byte(thinkingMix))
	reordered, _ := Parse([]byte(`{"arms": [{"name": "effort_high", "weight": 2}, {"name": "think", "weight": 5}, {"name": "no_think", "weight": 3}]}`))
	sameSeed, otherSeed, otherSample := 0, 0, 0
	for i := 0; i < 2000; i++ {
		id := fmt.Sprintf("p%d", i)
		a := m.Pick(7, id, 0)
		if b := m.Pick(7, id, 0); a != b {
			t.Fatalf("%s: arm %d, then %d", id, a, b)
		}
		if got := reordered.Arms[reordered.Pick(7, id, 0)].Name; got != m.Arms[a].Name {
			t.Errorf("%s: arm %s, with the arms reordered %s", id, m.Arms[a].Name, got)
		}
		sameSeed++
		if m.Pick(8, id, 0) != a {
			otherSeed++
		}
		if m.Pick(7, id, 1) != a {
			otherSample++
		}
	}
	// Independent draws differ 1 - (0.25+0.09+0.04) = 62% of the time.
	for what, n := range map[string]int{"another seed": otherSeed, "another sample": otherSample} {
		if share := float64(n) / float64(sameSeed); share < 0.55 || share > 0.69 {
			t.Errorf("%s changed the arm of %.0f%% of the ids, independent draws would change 62%%", what, 100*share)
		}
	}
}

// TestPickMovesOnlyToTheChangedArm: raising one arm's weight moves ids to
// it, from every other arm, and moves none between the others.
func TestPickMovesOnlyToTheChangedArm(t *testing.T) {
	before, _ := Parse([]byte(`{"arms": [{"name": "a", "weight": 1}, {"name": "b", "weight": 1}, {"name": "c", "weight": 1}]}`))
	after, _ := Parse([]byte(`{"arms": [{"name": "a", "weight": 1}, {"name": "b", "weight": 1}, {"name": "c", "weight": 2}]}`))
	moved := 0
	for i := 0; i < 5000; i++ {
		id := fmt.Sprintf("x%d", i)
		x, y := before.Pick(1, id, 0), after.Pick(1, id, 0)
		switch {
		case x == y:
		case y == 2:
			moved++
		default:
			t.Fatalf("%s moved from %s to %s, neither of which changed", id, before.Arms[x].Name, after.Arms[y].Name)
		}
	}
	// c's share goes from 1/3 to 1/2: a sixth of the ids move.
	if share := float64(moved) / 5000; math.Abs(share-1.0/6) > 0.03 {
		t.Errorf("%.1f%% of the ids moved to c, want about 16.7%%", 100*share)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{thinkingMix, `{"arms": [{"name": "a", "params": {"temperature": 1}}]}`, "arms:\n  - name: a\n", "arms: [\n", `{"arms":[{"name":"a","weight":1e308}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		total := 0.0
		for i, a := range m.Arms {
			if checkName(a.Name) != nil || !(a.Weight > 0) {
				t.Fatalf("arm %+v taken", a)
			}
			total += m.Share(i)
		}
		if math.Abs(total-1) > 1e-9 {
			t.Fatalf("shares add up to %v", total)
		}
		if i := m.Pick(1, "id", 0); i < 0 || i >= len(m.Arms) {
			t.Fatalf("picked %d of %d arms", i, len(m.Arms))
		}
	})
}

func TestArmMaxTokens(t *testing.T) {
	m, err := Parse([]byte(`{"arms": [{"name": "a", "params": {"max_tokens": 8192}}, {"name": "b", "params": {"max_completion_tokens": 100}},
		{"name": "c"}, {"name": "d", "params": {"max_tokens": null}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{8192, 100, 0, 0} {
		if got := m.Arms[i].MaxTokens(); got != want {
			t.Errorf("arm %s: %d, want %d", m.Arms[i].Name, got, want)
		}
	}
}
