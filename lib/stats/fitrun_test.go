package stats

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

// fitContext is the simulated model's context in these runs.
const fitContext = 4096

// longTailedWords is a prompt length in words (about a token each for
// llmsim) from a long-tailed distribution: most a few hundred to a few
// thousand, some past the context.
func longTailedWords(rng *rand.Rand, median float64) int {
	return max(min(int(math.Exp(math.Log(median)+0.9*rng.NormFloat64())), 3*fitContext), 16)
}

// writeLongTailed writes n prompts for the fitting runs: chat prompts of
// long-tailed lengths, every tenth within 60 tokens of the context, or
// (conversations) 1-4 user turns each with an answer to regenerate, every
// seventh opening past the context.
func writeLongTailed(t *testing.T, path string, n int, conversations bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(fitContext, uint64(n)))
	var b strings.Builder
	for i := range n {
		msgs := []map[string]string{{"role": "system", "content": "Be brief."}}
		turns := 1
		if conversations {
			turns = 1 + i%4
		}
		for k := range turns {
			words := longTailedWords(rng, 1200)
			switch {
			case !conversations && i%10 == 3:
				words = fitContext - 60 + rng.IntN(60)
			case conversations:
				words = longTailedWords(rng, 500)
				if k == 0 && i%7 == 5 {
					words = fitContext + rng.IntN(fitContext)
				}
			}
			msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("Question %d.%d.", i, k) + strings.Repeat(" word", words)})
			if conversations {
				msgs = append(msgs, map[string]string{"role": "assistant", "content": "An answer to regenerate."})
			}
		}
		line, err := json.Marshal(map[string]any{"id": fmt.Sprintf("p%03d", i), "messages": msgs})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startLLMSim starts the llmsim binary with one endpoint and the context
// and returns its URL.
func startLLMSim(t *testing.T, dir string) string {
	t.Helper()
	ready := filepath.Join(dir, "llmsim.urls")
	p := testbin.Start(t, "llmsim", "--listen", "127.0.0.1:0", "--ready-file", ready, "--instant",
		"--context-length", strconv.Itoa(fitContext))
	deadline := time.After(waitBound)
	for {
		if b, err := os.ReadFile(ready); err == nil && len(strings.Fields(string(b))) == 1 {
			return strings.TrimSpace(string(b))
		}
		select {
		case <-p.Done():
			t.Fatalf("llmsim exited before it was ready: %+v", p.Wait(t, 0))
		case <-deadline:
			t.Fatalf("llmsim wrote no ready file within %v", waitBound)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// fileCounts is what a run's output and error files hold, read with the
// standard decoder.
type fileCounts struct {
	ids                                 map[string]int
	answers, turns, loweredA, loweredT  int64
	refused, refusedCounted, full       int64
	over50, over90                      int64 // answers' and turns' prompts above 50% and 90% of the context
	singlePrompts, turnPrompts, refusal []int64
}

func readRunFiles(t *testing.T, out, errs string) fileCounts {
	t.Helper()
	c := fileCounts{ids: map[string]int{}}
	prompt := func(p int64) {
		if float64(p) > 0.5*fitContext {
			c.over50++
		}
		if float64(p) > 0.9*fitContext {
			c.over90++
		}
	}
	for _, path := range []string{out, errs} {
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) && path == errs {
			continue // infer writes no errors file when nothing failed
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var r struct {
				ID     string
				Output *struct {
					MaxTokens int64 `json:"max_tokens"`
					Usage     struct {
						PromptTokens int64 `json:"prompt_tokens"`
					}
					Messages []json.RawMessage
					Turns    []struct {
						MaxTokens int64 `json:"max_tokens"`
						Usage     struct {
							PromptTokens int64 `json:"prompt_tokens"`
						}
					}
					Truncated *struct{ Reason string }
				}
				Error *struct {
					Reason       string
					PromptTokens int64 `json:"prompt_tokens"`
				}
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			c.ids[r.ID]++
			switch o, e := r.Output, r.Error; {
			case o != nil && len(o.Messages) > 0:
				for _, tn := range o.Turns {
					c.turns++
					c.turnPrompts = append(c.turnPrompts, tn.Usage.PromptTokens)
					prompt(tn.Usage.PromptTokens)
					if tn.MaxTokens > 0 {
						c.loweredT++
					}
				}
				if o.Truncated != nil && o.Truncated.Reason == "context_full" {
					c.full++
				}
			case o != nil:
				c.answers++
				c.singlePrompts = append(c.singlePrompts, o.Usage.PromptTokens)
				prompt(o.Usage.PromptTokens)
				if o.MaxTokens > 0 {
					c.loweredA++
				}
			case e != nil && e.Reason == "prompt_too_long":
				c.refused++
				if e.PromptTokens > 0 {
					c.refusedCounted++
					c.refusal = append(c.refusal, e.PromptTokens)
				}
			}
		}
	}
	return c
}

// inferSummary is infer's closing line on fitting: requests lowered and
// prompts refused.
var inferSummary = regexp.MustCompile(`context of ([0-9,]+) tokens: ([0-9,]+) requests' max_tokens lowered to fit, ([0-9,]+) prompts too long`)

// TestFittedRun runs the real binaries: llmsim with a 4,096-token context,
// infer --max-tokens 4096 over long-tailed prompts (single answers, and
// conversations regenerated), then stats over what infer wrote: its
// lowered, refused and context_full counts are what the files hold and
// what infer said.
func TestFittedRun(t *testing.T) {
	for _, tt := range []struct {
		name          string
		prompts       int
		conversations bool
	}{
		{"single answers", 150, false},
		{"conversations", 60, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			in, out, errs := filepath.Join(dir, "prompts.jsonl"), filepath.Join(dir, "gen.jsonl"), filepath.Join(dir, "gen.errors.jsonl")
			writeLongTailed(t, in, tt.prompts, tt.conversations)
			args := []string{"-e", startLLMSim(t, dir), "--model", "Qwen3.6-27B", "--max-tokens", "4096", "-o", out, "--progress", "0", in}
			if tt.conversations {
				args = append([]string{"--regenerate"}, args...)
			}
			res := testbin.Run(t, "", nil, nil, "infer", args...)
			if res.Code != 0 && res.Code != 3 {
				t.Fatalf("infer exit %d:\n%s", res.Code, res.Stderr)
			}
			files := readRunFiles(t, out, errs)
			for i := range tt.prompts {
				if id := fmt.Sprintf("p%03d", i); files.ids[id] != 1 {
					t.Errorf("id %s is in the output and errors %d times", id, files.ids[id])
				}
			}
			if len(files.ids) != tt.prompts {
				t.Errorf("%d ids in the output and errors for %d prompts", len(files.ids), tt.prompts)
			}
			if files.loweredA+files.loweredT == 0 || files.refused == 0 || tt.conversations && files.full == 0 {
				t.Fatalf("the run exercises too little: %+v\n%s", files, res.Stderr)
			}

			t.Logf("%d answers (%d lowered), %d turns (%d lowered), %d refused, %d context_full", files.answers, files.loweredA,
				files.turns, files.loweredT, files.refused, files.full)
			r := runJSON(t, 0, "--context-length", strconv.Itoa(fitContext), out, errs)
			c := r.Context
			if c == nil {
				t.Fatal("no context section")
			}
			got := []int64{c.Answers.Records, c.Turns.Records, c.LoweredAnswers, c.LoweredTurns, c.Refused.Records,
				int64(c.Refused.PromptTokens.Count), c.ContextFull, c.Answers.Share.AboveHalf + c.Turns.Share.AboveHalf,
				c.Answers.Share.Above90 + c.Turns.Share.Above90}
			want := []int64{files.answers, files.turns, files.loweredA, files.loweredT, files.refused,
				files.refusedCounted, files.full, files.over50, files.over90}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("stats: answers, turns, lowered answers, lowered turns, refused, refused with a count, context_full, >50%%, >90%% = %v\nthe files: %v", got, want)
			}
			for _, x := range []struct {
				name string
				got  float64
				all  []int64
			}{{"answers", c.Answers.PromptTokens.Max, files.singlePrompts}, {"turns", c.Turns.PromptTokens.Max, files.turnPrompts},
				{"refused", c.Refused.PromptTokens.Max, files.refusal}} {
				var most int64
				for _, v := range x.all {
					most = max(most, v)
				}
				if int64(x.got) != most {
					t.Errorf("%s: max prompt tokens %v, the files' %d", x.name, x.got, most)
				}
			}
			m := inferSummary.FindStringSubmatch(res.Stderr)
			if m == nil {
				t.Fatalf("infer did not sum up the fitting:\n%s", res.Stderr)
			}
			if m[1] != num(fitContext) || m[2] != num(c.LoweredAnswers+c.LoweredTurns) || m[3] != num(c.Refused.Records) {
				t.Errorf("infer says %q; stats: %d+%d lowered, %d refused", m[0], c.LoweredAnswers, c.LoweredTurns, c.Refused.Records)
			}

			// Without --context-length it is inferred from the lowered
			// requests, a few tokens off at most: infer's count of a
			// prompt and the server's usage differ by the template.
			inf := runJSON(t, 0, out, errs).Context
			if inf.Source != "inferred" || inf.Inferred == nil || inf.Inferred.Requests != c.LoweredAnswers+c.LoweredTurns ||
				math.Abs(float64(inf.Length-fitContext)) > 0.01*fitContext {
				t.Errorf("inferred %d tokens from %+v (source %s), want about %d from every lowered request", inf.Length, inf.Inferred, inf.Source, fitContext)
			}
		})
	}
}
