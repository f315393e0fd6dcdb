package stats

import (
	"bufio"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"tokenmill/lib/jsonl"
)

// stdRecord is what FuzzParse reads of a record with the standard
// decoder.
type stdRecord struct {
	Messages []struct {
		Content string `json:"content"`
	} `json:"messages"`
	Prompt *string `json:"prompt"`
	Source string  `json:"source"`
	Output *struct {
		Text         string `json:"text"`
		Reasoning    string `json:"reasoning"`
		FinishReason string `json:"finish_reason"`
		Endpoint     string `json:"endpoint"`
		LatencyMS    int64  `json:"latency_ms"`
		MaxTokens    int64  `json:"max_tokens"`
		Messages     []struct {
			Content   string `json:"content"`
			Reasoning string `json:"reasoning_content"`
		} `json:"messages"`
		Turns []struct {
			Message   int   `json:"message"`
			MaxTokens int64 `json:"max_tokens"`
		} `json:"turns"`
	} `json:"output"`
	Error *struct {
		Status       int    `json:"status"`
		Message      string `json:"message"`
		Reason       string `json:"reason"`
		PromptTokens int64  `json:"prompt_tokens"`
	} `json:"error"`
}

// FuzzParse checks parse against the standard library: a line parse
// accepts is a JSON object whose figures the standard decoder agrees with,
// and a line it calls malformed is not JSON.
func FuzzParse(f *testing.F) {
	for _, b := range badLines {
		f.Add([]byte(b.line))
	}
	for _, name := range []string{"mixed.jsonl", "conversations.jsonl", "context.jsonl"} {
		if data, err := os.Open(filepath.Join(testdata, name)); err == nil {
			sc := bufio.NewScanner(data)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				f.Add([]byte(sc.Text()))
			}
			data.Close()
		}
	}
	f.Add([]byte(convLine))
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		f.Add(randomRecord(rng, 50, 2))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var got fact
		perr := parse(line, &got)
		valid := json.Valid(line)
		if perr != nil {
			if (perr.reason == jsonl.ReasonMalformedJSON) == valid {
				t.Fatalf("reason %s (%v) for %q, which json.Valid says is %v", perr.reason, perr.err, line, valid)
			}
			return
		}
		if !valid || !strings.HasPrefix(strings.TrimLeft(string(line), " \t\r\n"), "{") {
			t.Fatalf("accepted %q, which is not a JSON object", line)
		}
		var std stdRecord
		if err := json.Unmarshal(line, &std); err != nil {
			t.Fatalf("parse accepted %q, the standard decoder does not: %v", line, err)
		}
		chars := 0
		for _, m := range std.Messages {
			chars += utf8.RuneCountInString(m.Content)
		}
		if std.Prompt != nil {
			chars += utf8.RuneCountInString(*std.Prompt)
		}
		if got.prompt != chars || got.source != std.Source {
			t.Errorf("%q: prompt %d chars, source %q; the standard decoder: %d, %q", line, got.prompt, got.source, chars, std.Source)
		}
		if o := std.Output; o != nil {
			answer, reasoning := utf8.RuneCountInString(o.Text), utf8.RuneCountInString(o.Reasoning)
			if got.conversation != (len(o.Messages) > 0) {
				t.Fatalf("%q: conversation %v, the standard decoder finds %d messages", line, got.conversation, len(o.Messages))
			}
			if got.conversation {
				// A conversation's answer is its regenerated turns.
				answer, reasoning = 0, 0
				for _, tn := range o.Turns {
					answer += utf8.RuneCountInString(o.Messages[tn.Message].Content)
					reasoning += utf8.RuneCountInString(o.Messages[tn.Message].Reasoning)
				}
				if len(got.turns) != len(o.Turns) {
					t.Fatalf("%q: %d turns, the standard decoder %d", line, len(got.turns), len(o.Turns))
				}
				for i, tn := range o.Turns {
					if got.turns[i].maxTokens != tn.MaxTokens {
						t.Errorf("%q: turn %d max_tokens %d, the standard decoder %d", line, i, got.turns[i].maxTokens, tn.MaxTokens)
					}
				}
			}
			if got.answer != answer || got.reasoning != reasoning ||
				got.finish != o.FinishReason || got.endpoint != o.Endpoint || got.latency != o.LatencyMS || got.maxTokens != o.MaxTokens {
				t.Errorf("%q: output %+v; the standard decoder: %+v", line, got, *o)
			}
		} else if e := std.Error; e != nil && (got.status != e.Status || got.message != e.Message ||
			got.tooLong != (e.Reason == "prompt_too_long") || got.pTokens != e.PromptTokens) {
			t.Errorf("%q: error %d %q; the standard decoder: %+v", line, got.status, got.message, *e)
		}
	})
}
