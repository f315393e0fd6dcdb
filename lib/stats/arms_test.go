package stats

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/segmentio/encoding/json"
)

// TestArms: the per-arm section against the records themselves, summed
// here: answers, errors, tokens, shares, finish reasons and speed of each
// arm, the records without an arm under "(none)", the same section with
// one worker and four, and no section for an input without arms.
func TestArms(t *testing.T) {
	path := filepath.Join(testdata, "arms.jsonl")
	want, total := armSums(t, path)
	code, stdout, stderr := run(t, "", "--json", "--wall", "10m", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Arms) != len(want) || rep.Arms[len(rep.Arms)-1].Arm != "(none)" {
		t.Fatalf("arms %+v, want %d with (none) last", rep.Arms, len(want))
	}
	for _, a := range rep.Arms {
		w := want[a.Arm]
		finish := map[string]int64{}
		for _, c := range a.FinishReasons {
			finish[c.Name] = c.Count
		}
		if w == nil || a.Answers != w.answers || a.Errors != w.errors || a.CompletionTokens != w.tokens || a.WithReasoning != w.reasoned ||
			finish["stop"] != w.stop || finish["length"] != w.length {
			t.Errorf("arm %s: %+v, want %+v", a.Arm, a, w)
			continue
		}
		if math.Abs(a.Share-float64(w.answers)/float64(total)) > 1e-12 || math.Abs(a.MeanAnswerTokens-float64(w.tokens)/float64(w.answers)) > 1e-9 {
			t.Errorf("arm %s: share %v, mean %v", a.Arm, a.Share, a.MeanAnswerTokens)
		}
		if speed := float64(w.tokens) / (float64(w.latency) / 1000); math.Abs(a.TokPerSecPerRequest-speed) > 1e-9 || a.TokPerSec == nil || math.Abs(*a.TokPerSec-float64(w.tokens)/600) > 1e-9 {
			t.Errorf("arm %s: %v tok/s/req (want %v), tok/s %v", a.Arm, a.TokPerSecPerRequest, speed, a.TokPerSec)
		}
		if (a.AnswerTokens.Count == 0) != (a.Arm == "(none)") {
			t.Errorf("arm %s: %d answer token values distributed", a.Arm, a.AnswerTokens.Count)
		}
	}
	// The same records many times over under other ids: the section is
	// the same with one worker and four, each count the copies' multiple.
	const copies = 400
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var many bytes.Buffer
	for i := 0; i < copies; i++ {
		many.Write(bytes.ReplaceAll(data, []byte(`{"id":"m`), fmt.Appendf(nil, `{"id":"c%d-m`, i)))
	}
	manyPath := filepath.Join(t.TempDir(), "many.jsonl")
	if err := os.WriteFile(manyPath, many.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var first []Arm
	for _, workers := range []string{"1", "4"} {
		code, stdout, stderr := run(t, "", "--json", "--wall", "10m", "--workers", workers, manyPath)
		var r Report
		if err := json.Unmarshal([]byte(stdout), &r); code != 0 || err != nil {
			t.Fatalf("--workers %s: exit %d (%v)\n%s", workers, code, err, stderr)
		}
		for i, a := range r.Arms {
			if i >= len(rep.Arms) || a.Arm != rep.Arms[i].Arm || a.Answers != copies*rep.Arms[i].Answers || a.Errors != copies*rep.Arms[i].Errors ||
				a.CompletionTokens != copies*rep.Arms[i].CompletionTokens {
				t.Errorf("--workers %s: arm %+v, want %d times %+v", workers, a, copies, rep.Arms[min(i, len(rep.Arms)-1)])
			}
		}
		if first == nil {
			first = r.Arms
		} else if !reflect.DeepEqual(r.Arms, first) {
			t.Errorf("--workers %s: arms %+v, --workers 1 %+v", workers, r.Arms, first)
		}
	}

	_, stdout, _ = run(t, "", "--json", filepath.Join(testdata, "context.jsonl"))
	var plain Report
	if err := json.Unmarshal([]byte(stdout), &plain); err != nil || plain.Arms != nil || plain.Kinds.Generation == 0 {
		t.Errorf("an input without arms: arms %+v (%v)", plain.Arms, err)
	}
}

// armSum is what the records of one arm add up to.
type armSum struct {
	answers, errors, tokens, latency, stop, length, reasoned int64
}

// armSums adds up the records of path by arm, the plain way; total is
// the answers.
func armSums(t *testing.T, path string) (map[string]*armSum, int64) {
	t.Helper()
	want := map[string]*armSum{}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct {
			Output *struct {
				Arm          string `json:"arm"`
				FinishReason string `json:"finish_reason"`
				Reasoning    string `json:"reasoning"`
				LatencyMS    int64  `json:"latency_ms"`
				Usage        struct {
					CompletionTokens int64 `json:"completion_tokens"`
				} `json:"usage"`
			} `json:"output"`
			Error *struct {
				Arm string `json:"arm"`
			} `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		arm := func(a string) *armSum {
			if a == "" {
				a = "(none)"
			}
			if want[a] == nil {
				want[a] = &armSum{}
			}
			return want[a]
		}
		switch {
		case r.Output != nil:
			s := arm(r.Output.Arm)
			s.answers++
			total++
			s.tokens += r.Output.Usage.CompletionTokens
			s.latency += r.Output.LatencyMS
			if r.Output.FinishReason == "stop" {
				s.stop++
			} else {
				s.length++
			}
			if r.Output.Reasoning != "" {
				s.reasoned++
			}
		case r.Error != nil:
			arm(r.Error.Arm).errors++
		}
	}
	return want, total
}
