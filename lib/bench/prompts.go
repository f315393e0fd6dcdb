package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"tokenmill/lib/cli"
	"tokenmill/lib/fleet"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
	"tokenmill/lib/tokens"
)

// fitter fits the bench's requests into the model's context as infer
// fits a run's: max_tokens lowered to what the prompt leaves, prompts
// that leave too little left out.
func (cfg *Config) fitter(p *fleet.Pool, model string) *fitting {
	counter := tokens.NewCounter(p, func() string { return model })
	counter.UseTokenizer(cfg.Tokenizer)
	return &fitting{flags: cfg.Fit, ctx: p.Context(), counter: counter}
}

// fitting builds fitted request bodies and counts what it changed.
type fitting struct {
	flags            tokens.FitFlags
	ctx              int
	counter          *tokens.Counter
	lowered, refused int
}

// body is p's request body built by b (the bench's builder, or it with an
// arm's params), fitted; nil when p does not fit at all.
func (f *fitting) body(b *openai.Builder, p *record.Prompt, seed *int64, sample int) ([]byte, error) {
	tools, _, err := record.AppendCanonicalTools(nil, p.Tools)
	if err != nil {
		return nil, err
	}
	ft := f.counter.Fit(f.flags, f.ctx, openai.ChatMessages(p), tools, b.MaxTokens(p), 0, false)
	switch {
	case ft.Refused || ft.Unsure:
		f.refused++
		return nil, nil
	case ft.Max > 0:
		f.lowered++
	}
	return b.BodyMax(p, seed, sample, ft.Max)
}

// note says what fitting changed, if anything.
func (f *fitting) note() string {
	if f.lowered+f.refused == 0 {
		return ""
	}
	return fmt.Sprintf("; fitted to the %s-token context: %s with max_tokens lowered, %s left out (too long)",
		cli.Thousands(f.ctx), cli.Thousands(f.lowered), cli.Thousands(f.refused))
}

// prompts builds the streamed request bodies: the input's first usable
// records, or generated prompts, fitted to the context.
func (cfg *Config) prompts(ctx context.Context, env *cli.Env, b *openai.Builder, fit *fitting) (sample, error) {
	var s sample
	add := func(arm int, body []byte) {
		if body != nil {
			s.bodies = append(s.bodies, body)
			s.arms = append(s.arms, arm)
		}
	}
	if len(cfg.Inputs) == 0 {
		for k := 0; k < cfg.Sample; k++ {
			text := benchPromptText(k, cfg.PromptTokens)
			p := record.Prompt{}
			if cfg.API == openai.APIChat {
				p.Messages = []record.Message{{Role: "user", Content: text}}
			} else {
				p.Prompt = &text
			}
			if cfg.IgnoreEOS {
				p.Params = []byte(`{"ignore_eos":true}`)
			}
			arm, ab := cfg.armOf(b, "bench-"+strconv.Itoa(k), 0)
			body, err := fit.body(ab, &p, nil, 0)
			if err != nil {
				return sample{}, err
			}
			add(arm, body)
		}
		if len(s.bodies) == 0 {
			return sample{}, fmt.Errorf("no generated prompt of %d tokens fits the model's %d-token context with --min-answer-tokens %d", cfg.PromptTokens, fit.ctx, cfg.Fit.MinAnswerTokens)
		}
		s.note = fmt.Sprintf("%s generated prompts of %s tokens", cli.Thousands(len(s.bodies)), cli.Thousands(cfg.PromptTokens)) + fit.note()
		return s, nil
	}
	rd := jsonl.NewReader(ctx, env, cfg.Inputs, env.Stdin, jsonl.Options{})
	defer rd.Close()
	skipped := 0
	for len(s.bodies) < cfg.Sample {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		var ie *jsonl.InputError
		if errors.As(err, &ie) {
			skipped++
			continue
		}
		if err != nil {
			return sample{}, err
		}
		var p record.Prompt
		if record.Decode(rec.Data, &p) != nil {
			skipped++
			continue
		}
		seed, err := b.Check(&p)
		if err != nil {
			skipped++
			continue
		}
		arm, ab := cfg.armOf(b, p.ID.Text, p.Sample)
		body, err := fit.body(ab, &p, seed, p.Sample)
		if err != nil {
			skipped++
			continue
		}
		add(arm, body)
	}
	if len(s.bodies) == 0 {
		return sample{}, fmt.Errorf("no usable prompt records in the input (%d skipped, %d too long for the context)", skipped, fit.refused)
	}
	s.note = fmt.Sprintf("%s sample prompts", cli.Thousands(len(s.bodies)))
	if skipped > 0 {
		s.note += fmt.Sprintf(" (%d unusable records skipped)", skipped)
	}
	s.note += fit.note()
	return s, nil
}

// benchWords fill generated prompts.
var benchWords = strings.Fields(`the model answers questions about history science language art music
mathematics cooking travel health law economics software design and writes clear detailed explanations
with examples steps reasons and comparisons for a general audience of curious readers`)

// benchPromptText is generated prompt k, about tokens tokens long (four
// characters a token), distinct from the others from its first words so
// that no server answers it from its prefix cache.
func benchPromptText(k, tokens int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Request %d. Write a long, detailed essay on these notes:", k)
	for i := 0; b.Len() < 4*tokens; i++ {
		b.WriteByte(' ')
		b.WriteString(benchWords[(k*7+i*13)%len(benchWords)])
	}
	return b.String()
}
