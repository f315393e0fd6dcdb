// Command filtergen writes generation records for filter's benchmark: each
// prompt is a corpus conversation's first user turn, each answer is made of
// the assistant turns of the corpus (prose, lists, code, CJK) up to a
// long-tailed length like a model's (median about 2 kB), some with
// reasoning, and a few percent are the degenerate answers filter exists
// to catch. Deterministic for a seed; the corpus is read again and again
// until the output reaches --bytes.
//
//	corpus -n 660000 -o corpus.jsonl
//	go run ./pipelines/bench/filtergen --bytes 1000000000 -o filter-gens.jsonl corpus.jsonl
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/segmentio/encoding/json"
)

type turn struct {
	From  string `json:"from"`
	Value string `json:"value"`
}

type conversation struct {
	ID            json.RawMessage `json:"id"`
	Conversations []turn          `json:"conversations"`
}

type output struct {
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

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type genRecord struct {
	ID       string    `json:"id"`
	Messages []message `json:"messages"`
	Source   string    `json:"source"`
	Output   output    `json:"output"`
}

func main() {
	out := flag.String("o", "-", "output file ('-': stdout)")
	total := flag.Int64("bytes", 1e9, "stop once this many bytes are written")
	seed := flag.Uint64("seed", 1, "seed of every draw")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: filtergen [-o FILE] [--bytes N] CORPUS.jsonl")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *out, *total, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "filtergen:", err)
		os.Exit(1)
	}
}

func run(corpus, outPath string, total int64, seed uint64) error {
	var w io.Writer = os.Stdout
	if outPath != "-" {
		f, err := os.Create(outPath)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	rng := rand.New(rand.NewPCG(seed, 99))
	var written, records int64
	kinds := map[string]int64{}
	var pool []string // assistant turns not used yet
	for rep := 0; written < total; rep++ {
		f, err := os.Open(corpus)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() && written < total {
			var c conversation
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				f.Close()
				return err
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
			g := genRecord{ID: fmt.Sprintf("%s-%d", strings.Trim(string(c.ID), `"`), rep), Source: "bench",
				Messages: []message{{Role: "user", Content: prompt}}}
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
			if err != nil {
				f.Close()
				return err
			}
			bw.Write(line)
			bw.WriteByte('\n')
			written += int64(len(line) + 1)
			records++
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return err
		}
		if records == 0 {
			return fmt.Errorf("%s holds no conversation with a user and an assistant turn", corpus)
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "filtergen: %d records, %d bytes: %v\n", records, written, kinds)
	return nil
}
