package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// GenerationsCmd answers prompt records with made-up generation records,
// as infer would write them after a run against a flaky fleet: most
// prompts answered (finish stop, or length at --max-tokens), some failed
// (error records), and a second file, the rerun, answering the failures
// and redoing half of the answers cut at the limit. Everything is derived
// from each record's bytes, so the same input gives the same output.
type GenerationsCmd struct {
	Output       string   `short:"o" help:"Generation and error records ('-' is stdout)." default:"-"`
	Rerun        string   `help:"Also write the rerun's records here (empty: none)."`
	MedianTokens float64  `help:"Median answer length in tokens (lengths are log-normal)." default:"100"`
	MaxTokens    int      `help:"Answers reaching this length finish with length." default:"1024"`
	ErrorRate    float64  `help:"Fraction of prompts that get an error record instead of an answer." default:"0.02"`
	Endpoints    int      `help:"Endpoints the answers are spread over." default:"8"`
	Seed         uint64   `help:"Changes every draw." default:"1"`
	Files        []string `arg:"" optional:"" help:"Prompt records (JSONL). None or - reads stdin."`
}

// words make up the answers: plain ASCII, so no escaping is needed.
var words = []string{"the", "model", "answer", "data", "token", "of", "and", "a", "to", "in", "is", "that",
	"for", "with", "as", "on", "this", "by", "be", "are", "from", "or", "an", "it", "which", "can", "more",
	"first", "process", "result", "value", "example", "function", "training", "language", "question"}

// Run writes the records and a summary line.
func (c *GenerationsCmd) Run(ctx context.Context, env *cli.Env) error {
	if c.Endpoints < 1 || c.MaxTokens < 1 || c.MedianTokens <= 0 || c.ErrorRate < 0 || c.ErrorRate > 1 {
		return cli.Usagef("--endpoints, --max-tokens and --median-tokens must be positive, --error-rate in [0,1]")
	}
	out, err := jsonl.Create(c.Output, env.Stdout, jsonl.WriterOptions{Force: true})
	if err != nil {
		return err
	}
	defer out.Abort()
	var rerun *jsonl.Writer
	if c.Rerun != "" {
		if rerun, err = jsonl.Create(c.Rerun, env.Stdout, jsonl.WriterOptions{Force: true}); err != nil {
			return err
		}
		defer rerun.Abort()
	}
	in := jsonl.NewReader(ctx, env, c.Files, env.Stdin, jsonl.Options{})
	defer in.Close()
	var n, errs, reruns int64
	var buf []byte
	for {
		if n%4096 == 0 && ctx.Err() != nil {
			return context.Cause(ctx)
		}
		rec, err := in.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		n++
		g := c.draw(rec.Data)
		if buf, err = g.append(buf[:0], rec.Data, false); err != nil {
			return fmt.Errorf("%s:%d: %v", rec.File, rec.Line, err)
		}
		if err := out.Write(buf); err != nil {
			return err
		}
		if g.failed {
			errs++
		}
		if rerun != nil && g.rerun {
			reruns++
			if buf, err = g.append(buf[:0], rec.Data, true); err != nil {
				return err
			}
			if err := rerun.Write(buf); err != nil {
				return err
			}
		}
	}
	if rerun != nil {
		if err := rerun.Close(); err != nil {
			return err
		}
	}
	if err := out.Close(); err != nil {
		return err
	}
	env.Logf("answered %d prompts: %d error records; %d records in the rerun", n, errs, reruns)
	return nil
}

// generation is what was drawn for one prompt.
type generation struct {
	seed      uint64
	digest    uint64
	tokens    int // answer length; in the rerun, the redone answer's
	finish    string
	failed    bool // an error record in the first run
	rerun     bool // the rerun answers this prompt again
	endpoint  int
	promptTok int
	maxTokens int
	endpoints int
}

func (c *GenerationsCmd) draw(data []byte) generation {
	h := xxh3.Hash(data) ^ c.Seed*0x9e3779b97f4a7c15
	rng := rand.New(rand.NewPCG(h, c.Seed))
	g := generation{seed: h, digest: xxh3.Hash(data), endpoint: rng.IntN(c.Endpoints), promptTok: len(data)/4 + 8, maxTokens: c.MaxTokens, endpoints: c.Endpoints}
	g.tokens = max(1, int(c.MedianTokens*math.Exp(rng.NormFloat64())))
	g.finish = "stop"
	if g.tokens >= c.MaxTokens {
		g.tokens, g.finish = c.MaxTokens, "length"
	}
	switch {
	case rng.Float64() < c.ErrorRate:
		g.failed, g.rerun = true, true
	case g.finish == "length" && rng.IntN(2) == 0:
		g.rerun = true
	}
	return g
}

// append writes the generation (or error) record for prompt raw: the
// first run's, or the rerun's, which always finishes with stop.
func (g generation) append(dst, raw []byte, rerun bool) ([]byte, error) {
	if g.failed && !rerun {
		ep := strconv.Itoa(30000 + g.endpoint)
		return record.AppendField(dst, raw, "error", []byte(`{"status":503,"message":"Service Unavailable","attempts":5,"endpoint":"http://127.0.0.1:`+ep+`","retriable":true,"sample":0}`))
	}
	tokens, finish, endpoint := g.tokens, g.finish, g.endpoint
	seed := g.seed
	if rerun {
		seed = ^seed
		rng := rand.New(rand.NewPCG(seed, 7))
		tokens, finish, endpoint = 1+rng.IntN(max(1, g.maxTokens-1)), "stop", (endpoint+1)%g.endpoints
	}
	var v []byte
	v = append(v, `{"text":"`...)
	v = append(v, fmt.Sprintf("%016x", g.digest)...)
	rng := rand.New(rand.NewPCG(seed, 3))
	for range tokens {
		v = append(v, ' ')
		v = append(v, words[rng.IntN(len(words))]...)
	}
	v = append(v, `","finish_reason":"`...)
	v = append(v, finish...)
	v = append(v, `","usage":{"prompt_tokens":`...)
	v = strconv.AppendInt(v, int64(g.promptTok), 10)
	v = append(v, `,"completion_tokens":`...)
	v = strconv.AppendInt(v, int64(tokens), 10)
	v = append(v, `,"cached_tokens":0},"model":"Qwen3.6-27B","endpoint":"http://127.0.0.1:`...)
	v = strconv.AppendInt(v, int64(30000+endpoint), 10)
	v = append(v, `","latency_ms":`...)
	v = strconv.AppendInt(v, int64(g.promptTok/25+tokens*38+120), 10)
	attempts := 1
	if rerun {
		attempts = 2
	}
	v = append(v, `,"attempts":`...)
	v = strconv.AppendInt(v, int64(attempts), 10)
	v = append(v, `,"sample":0}`...)
	return record.AppendField(dst, raw, "output", v)
}
