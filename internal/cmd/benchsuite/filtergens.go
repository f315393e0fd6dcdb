package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// FilterGensCmd writes generation records for filter's benchmark: each
// prompt is a corpus conversation's first user turn, each answer is made
// of the assistant turns of the corpus (prose, lists, code, CJK) up to a
// long-tailed length like a model's (median about 2 kB), some with
// reasoning, and a few percent are the degenerate answers filter exists to
// catch. Deterministic for a seed; the corpus is read again and again
// until the output reaches --bytes.
type FilterGensCmd struct {
	Output string `short:"o" help:"Generation records ('-' is stdout)." default:"-"`
	Bytes  int64  `help:"Stop once this many bytes are written." default:"1000000000"`
	Seed   uint64 `help:"Seed of every draw." default:"1"`
	Corpus string `arg:"" help:"A corpus in the Infinity-Instruct layout (internal/cmd/corpus), read as many times as it takes."`
}

type filterTurn struct {
	From  string `json:"from"`
	Value string `json:"value"`
}

type filterConversation struct {
	ID            json.RawMessage `json:"id"`
	Conversations []filterTurn    `json:"conversations"`
}

type filterOutput struct {
	Text         string `json:"text"`
	Reasoning    string `json:"reasoning,omitempty"`
	FinishReason string `json:"finish_reason"`
	Usage        struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		CachedTokens     int `json:"cached_tokens"`
	} `json:"usage"`
	Model     string `json:"model"`
	Endpoint  string `json:"endpoint"`
	LatencyMS int    `json:"latency_ms"`
	Attempts  int    `json:"attempts"`
	Sample    int    `json:"sample"`
}

type filterMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type filterRecord struct {
	ID       string          `json:"id"`
	Messages []filterMessage `json:"messages"`
	Source   string          `json:"source"`
	Output   filterOutput    `json:"output"`
}

// Run writes the records and a summary line.
func (c *FilterGensCmd) Run(ctx context.Context, env *cli.Env) error {
	if c.Bytes <= 0 {
		return cli.Usagef("--bytes must be positive")
	}
	out, err := jsonl.Create(c.Output, env.Stdout, jsonl.WriterOptions{Force: true})
	if err != nil {
		return err
	}
	defer out.Abort()
	records, written, kinds, err := filterGens(ctx, c.Corpus, out, c.Bytes, c.Seed)
	if err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	env.Logf("%d records, %d bytes: %v", records, written, kinds)
	return nil
}

// filterGens writes the records to out until total bytes are written, and
// says how many of each kind (fit or a degenerate kind) it wrote.
func filterGens(ctx context.Context, corpus string, out *jsonl.Writer, total int64, seed uint64) (records, written int64, kinds map[string]int64, err error) {
	rng := rand.New(rand.NewPCG(seed, 99))
	kinds = map[string]int64{}
	var pool []string // assistant turns not used yet
	for rep := 0; written < total; rep++ {
		f, err := os.Open(corpus)
		if err != nil {
			return 0, 0, nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() && written < total {
			if records%4096 == 0 && ctx.Err() != nil {
				f.Close()
				return 0, 0, nil, context.Cause(ctx)
			}
			var c filterConversation
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				f.Close()
				return 0, 0, nil, fmt.Errorf("%s: %v", corpus, err)
			}
			prompt := ""
			for _, t := range c.Conversations {
				switch {
				case t.From == "human" && prompt == "":
					prompt = t.Value
				case t.From == "gpt":
					pool = append(pool, t.Value)
				}
			}
			if prompt == "" || len(pool) == 0 {
				continue
			}
			target := int(2000 * math.Exp(0.9*rng.NormFloat64()))
			var text strings.Builder
			for text.Len() < target && len(pool) > 0 {
				if text.Len() > 0 {
					text.WriteString("\n\n")
				}
				text.WriteString(pool[0])
				pool = pool[1:]
			}
			g := filterRecord{ID: fmt.Sprintf("%s-%d", strings.Trim(string(c.ID), `"`), rep), Source: "bench",
				Messages: []filterMessage{{Role: "user", Content: prompt}}}
			o := &g.Output
			o.Text, o.FinishReason, o.Model, o.Attempts = text.String(), "stop", "Qwen3.6-27B", 1
			if rng.IntN(5) == 0 {
				o.Reasoning = "The user asks: " + prompt
			}
			kind := "fit"
			switch u := rng.Float64(); {
			case u < 0.015:
				kind, o.FinishReason = "length", "length"
			case u < 0.020:
				kind = "loop"
				o.Text += strings.Repeat(" I hope this helps you with your question.", 30+rng.IntN(100))
			case u < 0.022:
				kind, o.Text = "empty", ""
			case u < 0.024:
				kind, o.Text = "think_residue", "<think>\n"+o.Reasoning+"\n</think>\n\n"+o.Text
			case u < 0.025:
				kind, o.Text, o.Reasoning = "reasoning_only", "", "The user asks: "+prompt
			}
			kinds[kind]++
			o.Usage.PromptTokens = len(prompt)/4 + 8
			o.Usage.CompletionTokens = len(o.Text)/4 + 1
			o.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", 30000+rng.IntN(8))
			o.LatencyMS = 120 + o.Usage.CompletionTokens*38
			line, err := json.Marshal(&g)
			if err == nil {
				err = out.Write(line)
			}
			if err != nil {
				f.Close()
				return 0, 0, nil, err
			}
			written += int64(len(line) + 1)
			records++
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return 0, 0, nil, err
		}
		if records == 0 {
			return 0, 0, nil, fmt.Errorf("%s holds no conversation with a user and an assistant turn", corpus)
		}
	}
	return records, written, kinds, nil
}
