// Package mix is a sampling mixture (infer --mix FILE): named arms, each
// a weight and a set of request parameters (chat_template_kwargs such as
// enable_thinking, reasoning_effort, temperature, top_p, max_tokens,
// stop, ...), and the rule that gives every (id, sample) its arm.
//
// The arm of an answer is a pure function of its id, its sample number,
// the run's seed and the arms' names and weights: the same prompt gets
// the same arm in every run, after --resume and --append, whatever the
// order the answers are sent in or the number of requests in flight. The
// rule is weighted rendezvous hashing: each arm draws a score from a hash
// of (seed, id, sample, arm name), -ln(u)/weight, and the lowest score
// wins, which gives arm i with probability weight_i / sum of weights. So
// the order of the arms in the file does not matter, and changing one
// arm's weight (or adding or removing an arm) moves answers only to or
// from that arm.
package mix

import (
	"bytes"
	"encoding/binary"
	stdjson "encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/segmentio/encoding/json"
	"github.com/zeebo/xxh3"
	"go.yaml.in/yaml/v3"

	"tokenmill/lib/record"
)

// Arm is one arm of a mixture.
type Arm struct {
	Name string
	// Weight is the arm's share of the answers, relative to the others'.
	Weight float64
	// Params is a JSON object of request fields, laid over --extra-body
	// and the flags, under a record's own "params"; nil: none.
	Params json.RawMessage
	// Keys are Params' top-level names, in the file's order.
	Keys []string
}

// Mix is a parsed mixture file.
type Mix struct {
	Arms []Arm
	// total is the sum of the weights.
	total float64
}

// MaxArms bounds a mixture: a file with more is a mistake, not a mix.
const MaxArms = 256

// reserved are the request fields an arm may not set: the record's
// (its prompt and tools), the run's (the model, streaming, one answer a
// request) and the seed, which --seed sets for every sample.
var reserved = map[string]string{
	"model": "the run's --model", "messages": "the record's", "prompt": "the record's", "text": "the record's",
	"input_ids": "the record's", "tools": "the record's", "stream": "infer's", "stream_options": "infer's",
	"n": "infer's (--samples gives several answers)", "seed": "--seed's (sample k uses seed+k)",
	"sampling_seed": "--seed's (sample k uses seed+k)",
}

// MaxFileBytes bounds a mixture file: a few arms are a few kilobytes, so
// a larger file (or a device that never ends) is refused after this much
// is read, not read whole into memory.
const MaxFileBytes = 1 << 20

// Load reads and checks the mixture file at path.
func Load(path string) (*Mix, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("larger than %d KiB: a mixture is a few arms", MaxFileBytes>>10)
	}
	return Parse(data)
}

// fileArm is an arm as the file spells it, in JSON.
type fileArm struct {
	Name   string             `json:"name"`
	Weight *float64           `json:"weight"`
	Params stdjson.RawMessage `json:"params"`
}

// yamlArm is an arm as the file spells it, in YAML.
type yamlArm struct {
	Name   string         `yaml:"name"`
	Weight *float64       `yaml:"weight"`
	Params map[string]any `yaml:"params"`
}

// Parse reads a mixture: JSON when its first character is '{', YAML
// otherwise. Unknown fields are refused, so that a misspelt key is an
// error rather than a setting silently left out.
func Parse(data []byte) (*Mix, error) {
	var arms []fileArm
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		// The standard decoder: it refuses unknown fields and trailing data.
		var f struct {
			Arms []fileArm `json:"arms"`
		}
		dec := stdjson.NewDecoder(bytes.NewReader(t))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("reading the mixture as JSON: %w", err)
		}
		if dec.More() {
			return nil, fmt.Errorf("reading the mixture as JSON: data after the object")
		}
		arms = f.Arms
	} else {
		var f struct {
			Arms []yamlArm `yaml:"arms"`
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil && err != io.EOF {
			return nil, fmt.Errorf("reading the mixture as YAML: %w", err)
		}
		for i, a := range f.Arms {
			fa := fileArm{Name: a.Name, Weight: a.Weight}
			if a.Params != nil {
				p, err := json.Marshal(a.Params)
				if err != nil {
					return nil, fmt.Errorf("arm %d (%q): params: %w", i+1, a.Name, err)
				}
				fa.Params = p
			}
			arms = append(arms, fa)
		}
	}
	return build(arms)
}

// build checks the arms and makes the mixture.
func build(arms []fileArm) (*Mix, error) {
	switch {
	case len(arms) == 0:
		return nil, fmt.Errorf(`the mixture has no arms: want "arms": [{"name": ..., "weight": ..., "params": {...}}, ...]`)
	case len(arms) > MaxArms:
		return nil, fmt.Errorf("the mixture has %d arms, more than %d", len(arms), MaxArms)
	}
	m := &Mix{}
	seen := map[string]bool{}
	for i, fa := range arms {
		what := fmt.Sprintf("arm %d", i+1)
		if fa.Name != "" {
			what = fmt.Sprintf("arm %d (%q)", i+1, fa.Name)
		}
		if err := checkName(fa.Name); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if seen[fa.Name] {
			return nil, fmt.Errorf("%s: two arms are named %q", what, fa.Name)
		}
		seen[fa.Name] = true
		a := Arm{Name: fa.Name, Weight: 1}
		if fa.Weight != nil {
			a.Weight = *fa.Weight
		}
		if !(a.Weight > 0) || math.IsInf(a.Weight, 0) {
			return nil, fmt.Errorf("%s: weight %v: want a positive number (leave an arm out to give it none)", what, a.Weight)
		}
		if t := bytes.TrimSpace(fa.Params); len(t) > 0 && string(t) != "null" {
			keys, err := checkParams(t)
			if err != nil {
				return nil, fmt.Errorf("%s: params: %w", what, err)
			}
			a.Params, a.Keys = compact(t), keys
		}
		m.total += a.Weight
		m.Arms = append(m.Arms, a)
	}
	if math.IsInf(m.total, 0) {
		return nil, fmt.Errorf("the weights add up past the largest number: make them smaller")
	}
	return m, nil
}

// checkName takes names that read well in a file name, a table and a
// Parquet column's values: letters, digits, '.', '_' and '-'.
func checkName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("name %q: want 1 to 64 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("name %q: want letters, digits, '.', '_' and '-' only", name)
		}
	}
	return nil
}

// checkParams checks an arm's params: a JSON object, no reserved field,
// and the fields whose type servers check of the right type, so that a
// YAML "enable_thinking: off" (a string) is refused rather than sent.
func checkParams(p []byte) ([]string, error) {
	var fields map[string]json.RawMessage
	if p[0] != '{' || json.Unmarshal(p, &fields) != nil {
		return nil, fmt.Errorf("not a JSON object: %.40s", p)
	}
	var keys []string
	if err := record.EachField(p, func(key string, _ []byte) error {
		if !slices.Contains(keys, key) {
			keys = append(keys, key)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	for _, key := range keys {
		if whose, ok := reserved[key]; ok {
			return nil, fmt.Errorf("%q is %s, not an arm's to set", key, whose)
		}
		if err := checkValue(key, fields[key]); err != nil {
			return nil, err
		}
	}
	if kw, ok := fields["chat_template_kwargs"]; ok && string(bytes.TrimSpace(kw)) != "null" {
		var kwargs map[string]json.RawMessage
		if json.Unmarshal(kw, &kwargs) != nil {
			return nil, fmt.Errorf("chat_template_kwargs: want an object, got %.40s", kw)
		}
		for _, k := range []string{"enable_thinking", "thinking"} {
			if v, ok := kwargs[k]; ok && !isKind(v, "bool") {
				return nil, fmt.Errorf("chat_template_kwargs.%s: want true or false, got %.40s", k, v)
			}
		}
	}
	return keys, nil
}

// kinds are the JSON kinds of the fields servers check.
var kinds = map[string]string{
	"temperature": "number", "top_p": "number", "top_k": "integer", "min_p": "number",
	"presence_penalty": "number", "frequency_penalty": "number", "repetition_penalty": "number",
	"max_tokens": "count", "max_completion_tokens": "count", "max_new_tokens": "count", "min_tokens": "integer",
	"stop": "stop", "reasoning_effort": "string", "chat_template_kwargs": "object", "separate_reasoning": "bool",
}

func checkValue(key string, v json.RawMessage) error {
	kind, ok := kinds[key]
	if !ok || isKind(v, "null") || isKind(v, kind) {
		return nil
	}
	want := map[string]string{"number": "a number", "integer": "an integer", "count": "a positive integer",
		"stop": "a string or a list of strings", "string": "a string", "object": "an object", "bool": "true or false"}[kind]
	return fmt.Errorf("%s: want %s, got %.40s", key, want, v)
}

// isKind tells whether v is JSON of kind.
func isKind(v json.RawMessage, kind string) bool {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return false
	}
	switch kind {
	case "null":
		return string(v) == "null"
	case "bool":
		return string(v) == "true" || string(v) == "false"
	case "string":
		return v[0] == '"'
	case "object":
		return v[0] == '{'
	case "number":
		var f float64
		return json.Unmarshal(v, &f) == nil && !math.IsInf(f, 0)
	case "integer", "count":
		var n int64
		return json.Unmarshal(v, &n) == nil && (kind == "integer" || n > 0)
	case "stop":
		var s string
		var l []string
		return json.Unmarshal(v, &s) == nil || json.Unmarshal(v, &l) == nil
	}
	return false
}

// compact is p without insignificant white space.
func compact(p []byte) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, p); err != nil {
		return json.RawMessage(p)
	}
	return json.RawMessage(b.Bytes())
}

// Share is arm i's expected share of the answers, from 0 to 1.
func (m *Mix) Share(i int) float64 { return m.Arms[i].Weight / m.total }

// Names are the arms' names, in the file's order.
func (m *Mix) Names() []string {
	names := make([]string, len(m.Arms))
	for i, a := range m.Arms {
		names[i] = a.Name
	}
	return names
}

// Index is the arm named name, or -1.
func (m *Mix) Index(name string) int {
	for i, a := range m.Arms {
		if a.Name == name {
			return i
		}
	}
	return -1
}

// Describe is the mixture in one line: "think 60%, no_think 40%".
func (m *Mix) Describe() string {
	parts := make([]string, len(m.Arms))
	for i, a := range m.Arms {
		parts[i] = fmt.Sprintf("%s %s", a.Name, percent(m.Share(i)))
	}
	return strings.Join(parts, ", ")
}

func percent(x float64) string {
	s := fmt.Sprintf("%.1f", 100*x)
	return strings.TrimSuffix(s, ".0") + "%"
}

// Pick is the arm of sample of the record id under seed (--seed; 0 when
// none is given): an index into Arms.
func (m *Mix) Pick(seed int64, id string, sample int) int {
	if len(m.Arms) == 1 {
		return 0
	}
	var stack [128]byte
	buf := append(stack[:0], id...)
	buf = append(buf, 0)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(sample))
	head := len(buf)
	best, bestScore := 0, math.Inf(1)
	for i, a := range m.Arms {
		buf = append(buf[:head], a.Name...)
		h := xxh3.HashSeed(buf, uint64(seed))
		// u in (0, 1): the top 53 bits, never 0 or 1.
		u := (float64(h>>11) + 0.5) / (1 << 53)
		if score := -math.Log(u) / a.Weight; score < bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// MaxTokens is the answer limit the arm sets (max_tokens,
// max_completion_tokens or max_new_tokens), 0 when it sets none.
func (a *Arm) MaxTokens() int {
	n := 0
	for _, key := range []string{"max_tokens", "max_completion_tokens", "max_new_tokens"} {
		v, err := record.FieldValue(a.Params, key)
		if err != nil || v == nil {
			continue
		}
		var k int
		if json.Unmarshal(v, &k) == nil && k > 0 {
			n = k
		}
	}
	return n
}
