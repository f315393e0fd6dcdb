package infer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// weightSamples are our samples whose conversations have assistant turns
// of weight 0 (OpenAI's weight, ShareGPT's weight and loss_weight,
// xtuner's loss), with what extract makes of them: conversations and
// rejects.
var weightSamples = []struct {
	file            string
	wrote, rejected int
}{
	{"openai_finetune.jsonl", 3, 2},
	{"sharegpt_weights.json", 2, 1},
	{"xtuner_openai.jsonl", 3, 1},
}

// A turn of weight 0 from the dataset to the training file: extract keeps
// it on the turn, infer --regenerate keeps it as context (sent as history,
// never asked for, its weight never sent to the server), and merge writes
// it, weight included, in every form; the regenerated answers carry no
// weight. Every conversation extract wrote ends up in merge's output.
func TestWeightsThroughRegenerate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := filepath.Join(dir, "conv.jsonl")
	conv, wrote := extractedConversations(t, in)
	context, answers, nContext := weightPlan(t, conv)
	if len(answers) != wrote || nContext != 4 {
		t.Fatalf("%d conversations with answers to regenerate, %d context turns; want %d and 4", len(answers), nContext, wrote)
	}

	s := startSim(t, 2, "--instant", "--seed", "5")
	out := filepath.Join(dir, "regen.jsonl")
	p := startInfer(t, "-e", strings.Join(s.urls, ","), "--regenerate", "--seed", "3", "--max-tokens", "20", "-o", out, in, "--progress", "0")
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("infer: exit %d\n%s", code, p.stderr.String())
	}
	reqs := s.requests(t)
	raw, err := os.ReadFile(s.log)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(`"weight"`)) {
		t.Error("a weight was sent to the server")
	}
	checkWeightedTurns(t, readRecords(t, out), reqs, wrote, context, answers, nContext)
	for _, to := range []string{"conversations", "sharegpt"} {
		checkWeightsMerged(t, to, filepath.Join(dir, "train-"+to+".jsonl"), out, wrote, context, nContext)
	}
}

// extractedConversations writes the weight samples, as extract --turns all
// makes them, to path and returns them and how many conversations they hold.
func extractedConversations(t *testing.T, path string) ([]byte, int) {
	t.Helper()
	var conv bytes.Buffer
	wrote := 0
	for _, s := range weightSamples {
		r := testbin.Exec(t, testbin.Command("extract", "--turns", "all", filepath.Join("../../testdata/extract", s.file)))
		if r.Code != cli.ExitRejects || !strings.Contains(r.Stderr, fmt.Sprintf("wrote %d, rejected %d", s.wrote, s.rejected)) {
			t.Fatalf("extract %s: exit %d\n%s", s.file, r.Code, r.Stderr)
		}
		conv.Write(r.Stdout)
		wrote += s.wrote
	}
	if err := os.WriteFile(path, conv.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return conv.Bytes(), wrote
}

// weightPlan reads the extracted conversations for the context turns and
// the number of answers to regenerate of each, and counts context turns.
func weightPlan(t *testing.T, conv []byte) (map[string][]contextTurn, map[string]int, int) {
	t.Helper()
	// The context turns as extract wrote them, by conversation: the
	// message index and text of each assistant turn of weight 0.
	context := map[string][]contextTurn{}
	// The answers to regenerate (the simulator makes no tool calls): one
	// per exchange that a user turn, or a context turn and its results,
	// opens with an assistant turn of weight other than 0, and one for a
	// last question.
	answers := map[string]int{}
	nContext := 0
	for _, line := range bytes.Split(bytes.TrimSpace(conv), []byte("\n")) {
		var p record.Prompt
		if err := json.Unmarshal(line, &p); err != nil {
			t.Fatal(err)
		}
		prev := "" // the last turn but tool results: user, context or answer
		for i, m := range p.Messages {
			switch {
			case m.IsContext():
				context[p.ID.Text] = append(context[p.ID.Text], contextTurn{i, m.Content})
				nContext++
				prev = "context"
			case m.Role == "assistant":
				if prev == "user" || prev == "context" {
					answers[p.ID.Text]++
				}
				prev = "answer"
			case m.Role == "user":
				prev = "user"
			}
		}
		if prev == "user" {
			answers[p.ID.Text]++
		}
	}
	return context, answers, nContext
}

// checkWeightedTurns checks the regenerated conversations: each answer of
// weight other than 0 regenerated once, context turns kept in place and
// sent as history, and no weight on a regenerated turn.
func checkWeightedTurns(t *testing.T, gens []genRecord, reqs []loggedRequest, wrote int, context map[string][]contextTurn, answers map[string]int, nContext int) {
	t.Helper()
	if len(gens) != wrote {
		t.Fatalf("%d conversations regenerated of %d", len(gens), wrote)
	}
	turns := 0
	for _, g := range gens {
		o := g.Output
		if len(o.Turns) != answers[g.ID.Text] {
			t.Errorf("%s: %d turns regenerated, the conversation has %d answers of weight other than 0", g.ID.Text, len(o.Turns), answers[g.ID.Text])
		}
		turns += len(o.Turns)
		for _, c := range context[g.ID.Text] {
			m := o.Messages[c.at]
			if !m.IsContext() || m.Content != c.content {
				t.Errorf("%s: message %d is %+v, want the context turn %q of weight 0", g.ID.Text, c.at, m, c.content)
			}
			for _, turn := range o.Turns {
				if turn.Message == c.at {
					t.Errorf("%s: the context turn %d was regenerated", g.ID.Text, c.at)
				}
			}
		}
		for _, turn := range o.Turns {
			if o.Messages[turn.Message].Weight != nil {
				t.Errorf("%s: regenerated turn %d carries a weight", g.ID.Text, turn.Message)
			}
		}
	}
	if len(reqs) != turns {
		t.Errorf("%d requests for %d regenerated turns", len(reqs), turns)
	}
	// Every context turn was sent as history to the answers after it.
	sentAsHistory := 0
	for _, r := range reqs {
		for _, m := range r.Body.Messages {
			for _, cs := range context {
				for _, c := range cs {
					if m.Role == "assistant" && m.Content == c.content {
						sentAsHistory++
					}
				}
			}
		}
	}
	if sentAsHistory < nContext {
		t.Errorf("context turns were sent %d times as history, want at least once each (%d)", sentAsHistory, nContext)
	}
}

// checkWeightsMerged checks that merge --to to writes every conversation
// to train with weight 0 on exactly the context turns.
func checkWeightsMerged(t *testing.T, to, train, out string, wrote int, context map[string][]contextTurn, nContext int) {
	t.Helper()
	r := testbin.Exec(t, testbin.Command("merge", "--to", to, "-o", train, out))
	if r.Code != cli.ExitOK || !strings.Contains(r.Stderr, fmt.Sprintf("unique out %d,", wrote)) {
		t.Fatalf("merge --to %s: exit %d\n%s", to, r.Code, r.Stderr)
	}
	var recs []trainingRecord
	for _, line := range bytes.Split(bytes.TrimSpace(mustRead(t, train)), []byte("\n")) {
		var rec trainingRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if len(recs) != wrote {
		t.Fatalf("merge --to %s wrote %d records, want %d", to, len(recs), wrote)
	}
	zero, weighted := 0, 0
	for _, rec := range recs {
		for _, m := range rec.Conversations {
			if m.Weight == nil {
				continue
			}
			weighted++
			text := m.Content + m.Value
			if *m.Weight != 0 || !isContextOf(context[rec.ID.Text], text) {
				t.Errorf("--to %s, %s: a turn %q of weight %v", to, rec.ID.Text, text, *m.Weight)
			}
			zero++
		}
	}
	if zero != nContext || weighted != nContext {
		t.Errorf("--to %s: %d turns of weight 0 (%d weighted), want the %d context turns", to, zero, weighted, nContext)
	}
}

// contextTurn is an assistant turn of weight 0: its index in the
// conversation and its text.
type contextTurn struct {
	at      int
	content string
}

// trainingRecord is a merge --to conversations or sharegpt record.
type trainingRecord struct {
	ID            record.ID `json:"id"`
	Conversations []struct {
		Role, Content, From, Value string
		Weight                     *float64
	} `json:"conversations"`
}

func isContextOf(turns []contextTurn, text string) bool {
	for _, c := range turns {
		if c.content == text {
			return true
		}
	}
	return false
}
