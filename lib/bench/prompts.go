package bench

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// prompts builds the streamed request bodies: the input's first usable
// records, or generated prompts.
func (c *Bench) prompts(env *cli.Env, b *openai.Builder) ([][]byte, string, error) {
	var bodies [][]byte
	if len(c.Inputs) == 0 {
		for k := 0; k < c.Sample; k++ {
			text := benchPromptText(k, c.PromptTokens)
			p := record.Prompt{}
			if c.API == openai.APIChat {
				p.Messages = []record.Message{{Role: "user", Content: text}}
			} else {
				p.Prompt = &text
			}
			if c.IgnoreEOS {
				p.Params = []byte(`{"ignore_eos":true}`)
			}
			body, err := b.Body(&p, nil, 0)
			if err != nil {
				return nil, "", err
			}
			bodies = append(bodies, body)
		}
		return bodies, fmt.Sprintf("%s generated prompts of %s tokens", cli.Thousands(len(bodies)), cli.Thousands(c.PromptTokens)), nil
	}
	rd := jsonl.NewReader(c.Inputs, env.Stdin, jsonl.Options{})
	defer rd.Close()
	skipped := 0
	for len(bodies) < c.Sample {
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
			return nil, "", err
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
		body, err := b.Body(&p, seed, p.Sample)
		if err != nil {
			skipped++
			continue
		}
		bodies = append(bodies, body)
	}
	if len(bodies) == 0 {
		return nil, "", fmt.Errorf("no usable prompt records in the input (%d skipped)", skipped)
	}
	note := fmt.Sprintf("%s sample prompts", cli.Thousands(len(bodies)))
	if skipped > 0 {
		note += fmt.Sprintf(" (%d unusable records skipped)", skipped)
	}
	return bodies, note, nil
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
