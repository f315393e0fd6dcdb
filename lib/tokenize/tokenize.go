// Package tokenize is the tokenize tool: a model's chat template and
// tokenizer (lib/tokenizer) applied to JSON Lines records, for people and
// scripts that want the text and ids a model sees.
package tokenize

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
	"tokenmill/lib/tokenizer"
)

// Description is tokenize's --help text.
const Description = `Render and tokenize records with a model's own chat template and tokenizer.

  tokenize --tokenizer models/Qwen3-8B prompts.jsonl
  echo '{"id":1,"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true}' | tokenize --tokenizer models/Qwen3-8B
  echo '{"id":1,"text":"Hello world"}' | tokenize --tokenizer models/Qwen3-8B
  echo '{"id":1,"ids":[9707,1879]}' | tokenize --tokenizer models/Qwen3-8B --decode

--tokenizer is a model's Hugging Face folder as huggingface-cli download leaves it
(tokenizer.json, tokenizer_config.json, and chat_template.jinja where the model
ships one); nothing is downloaded. Each record gives one line
{"id", "rendered", "ids"}:

  a record with "messages" is rendered with the chat template, as transformers'
  apply_chat_template renders it, with the record's "tools", its
  "add_generation_prompt" (default --add-generation-prompt) and its
  "chat_template_kwargs" (default --kwargs), then tokenized;
  a record with "text" (or a prompt record's "prompt") is tokenized as it is.

Special tokens spelt out in the text (<|im_end|>) become their ids, as the model's
tokenizer and the servers make them. The ids carry no added special token unless
--add-special (the begin-of-text token the model's configuration adds to a text).
--decode reads "ids" instead and writes {"id", "text"}. A record the template
raises for is rejected as template_error with the template's message; a bad
record is reported and counted, the stream goes on (exit 3).`

// Command is the tokenize tool.
type Command struct {
	cli.Globals
	Inputs              []string `arg:"" optional:"" help:"Records (JSONL, JSON arrays, Parquet; gzip/zstd recognised by content). None or - reads stdin."`
	Tokenizer           string   `required:"" placeholder:"DIR" help:"The model's Hugging Face folder: tokenizer.json, tokenizer_config.json (its chat_template), chat_template.jinja where shipped."`
	cli.OutputFlag      `set:"output_what=the rendered and tokenized records"`
	AddGenerationPrompt bool   `help:"Open the assistant's turn after the messages (add_generation_prompt) for records that do not say." default:"false"`
	Kwargs              string `placeholder:"JSON" help:"Chat template keyword arguments (a JSON object such as {\"enable_thinking\": false}) for records without chat_template_kwargs." default:""`
	AddSpecial          bool   `help:"Put the special tokens the configuration adds to a text (its begin-of-text token) before the ids." default:"false"`
	Decode              bool   `help:"Turn each record's \"ids\" back into text: {\"id\", \"text\"}." default:"false"`
	cli.RejectsFlag
	cli.ForceFlag   `set:"force_what=-o and --rejects"`
	cli.WorkersFlag `set:"workers_what=render and tokenize records"`
	cli.ProgressFlag
}

// Reasons a record is rejected.
const (
	ReasonNoInput       = "no_input"
	ReasonBadRecord     = "bad_record"
	ReasonTemplateError = tokenizer.ReasonTemplateError
	ReasonBadIDs        = "bad_ids"
)

// config is the command's flags, checked once.
type config struct {
	inputs          []string
	output, rejects string
	force           bool
	workers         int
	progress        time.Duration
	tok             *tokenizer.Tokenizer
	agp             bool
	kwargs          []byte
	addSpecial      bool
	decode          bool
}

// Run tokenizes the inputs.
func (c *Command) Run(ctx context.Context, env *cli.Env) error {
	return cli.RunConfig(ctx, env, c.config, (*config).run)
}

// run tokenizes the inputs cfg names.
func (cfg *config) run(ctx context.Context, env *cli.Env) error {
	outs, err := jsonl.CheckOutputs(env.Stdout, jsonl.InputsFrom(cfg.inputs, env.Stdin),
		[]jsonl.Output{{Flag: "-o", Path: cfg.output}, {Flag: "--rejects", Path: cfg.rejects}}, cfg.force)
	if err != nil {
		return err
	}
	if err := outs.Open(); err != nil {
		return err
	}
	defer outs.Abort()
	out, rejects := outs.Writer("-o"), outs.Rejects(env)
	var read, written atomic.Int64
	progress := cli.StartProgress(ctx, env, cfg.progress, func() []string {
		return []string{fmt.Sprintf("read %s records, wrote %s", cli.Thousands(read.Load()), cli.Thousands(written.Load()))}
	})
	in := jsonl.NewReader(ctx, env, cfg.inputs, env.Stdin, jsonl.Options{})
	err = jsonl.Parallel(ctx, in, cfg.workers, func(_ int, b *jsonl.Batch[result]) {
		for i := range b.Items {
			if it := &b.Items[i]; it.Err == nil {
				it.V = cfg.tokenize(it.Data)
			}
		}
	}, func(b *jsonl.Batch[result]) error {
		for i := range b.Items {
			it := &b.Items[i]
			if it.Err != nil {
				if err := rejects.Input(it.Err); err != nil {
					return err
				}
				continue
			}
			read.Add(1)
			if it.V.reason != "" {
				if err := rejects.Add(it.RawLine, it.V.reason, it.V.detail); err != nil {
					return err
				}
				continue
			}
			if err := out.Write(it.V.line); err != nil {
				return err
			}
			written.Add(1)
		}
		return nil
	})
	progress.Stop()
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	if err == nil {
		err = outs.Close()
	}
	if err != nil {
		return err
	}
	line := fmt.Sprintf("read %s, wrote %s", cli.Thousands(read.Load()), cli.Thousands(written.Load()))
	if rejects.Total() > 0 {
		line += ", " + rejects.Summary()
	}
	env.Logf("%s", line)
	return rejects.Err()
}

func (c *Command) config() (*config, error) {
	workers, err := c.Count()
	if err != nil {
		return nil, err
	}
	cfg := &config{inputs: c.Inputs, output: c.Output, rejects: c.Rejects, force: c.Force, workers: workers, progress: c.Progress,
		agp: c.AddGenerationPrompt, addSpecial: c.AddSpecial, decode: c.Decode}
	if c.Kwargs != "" {
		if v := bytes.TrimSpace([]byte(c.Kwargs)); len(v) == 0 || v[0] != '{' || !json.Valid(v) {
			return nil, cli.Usagef("--kwargs %q: want a JSON object, e.g. {\"enable_thinking\": false}", c.Kwargs)
		}
		cfg.kwargs = []byte(c.Kwargs)
	}
	tok, err := tokenizer.Load(c.Tokenizer)
	if err != nil {
		if errors.Is(err, tokenizer.ErrNoTokenizer) {
			return nil, cli.Usagef("--tokenizer %v", err)
		}
		return nil, cli.Usagef("--tokenizer: %v", err)
	}
	cfg.tok = tok
	return cfg, nil
}

// result is one record's line, or why it has none.
type result struct {
	line           []byte
	reason, detail string
}

func rejected(reason, format string, args ...any) result {
	return result{reason: reason, detail: fmt.Sprintf(format, args...)}
}

// input is the part of a record tokenize reads.
type input struct {
	ID                  json.RawMessage `json:"id,omitempty"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	Kwargs              json.RawMessage `json:"chat_template_kwargs"`
	Text                *string         `json:"text"`
	Prompt              *string         `json:"prompt"`
	IDs                 json.RawMessage `json:"ids"`
}

type encoded struct {
	ID       json.RawMessage `json:"id,omitempty"`
	Rendered string          `json:"rendered"`
	IDs      []int           `json:"ids"`
}

type decoded struct {
	ID   json.RawMessage `json:"id,omitempty"`
	Text string          `json:"text"`
}

func (cfg *config) tokenize(data []byte) result {
	if !json.Valid(data) {
		return rejected(jsonl.ReasonMalformedJSON, "not valid JSON")
	}
	if b := bytes.TrimSpace(data); len(b) == 0 || b[0] != '{' {
		return rejected(jsonl.ReasonNotObject, "a record must be a JSON object")
	}
	var in input
	if err := record.Decode(data, &in); err != nil {
		return rejected(ReasonBadRecord, "%v", err)
	}
	if cfg.decode {
		return cfg.decodeIDs(in)
	}
	out := encoded{ID: in.ID}
	switch {
	case len(in.Messages) > 0 && string(in.Messages) != "null":
		req := tokenizer.Request{Messages: in.Messages, Tools: in.Tools, AddGenerationPrompt: cfg.agp, Kwargs: cfg.kwargs}
		if in.AddGenerationPrompt != nil {
			req.AddGenerationPrompt = *in.AddGenerationPrompt
		}
		if len(in.Kwargs) > 0 && string(in.Kwargs) != "null" {
			req.Kwargs = in.Kwargs
		}
		text, err := cfg.tok.Render(req)
		var te *tokenizer.TemplateError
		switch {
		case errors.As(err, &te):
			return rejected(ReasonTemplateError, "%s", te.Message)
		case err != nil:
			return rejected(ReasonBadRecord, "%v", err)
		}
		out.Rendered = text
	case in.Text != nil:
		out.Rendered = *in.Text
	case in.Prompt != nil:
		out.Rendered = *in.Prompt
	default:
		return rejected(ReasonNoInput, `no "messages", "text" or "prompt" to tokenize`)
	}
	if cfg.addSpecial {
		out.IDs = cfg.tok.EncodeSpecial(out.Rendered)
	} else {
		out.IDs = cfg.tok.Encode(out.Rendered)
	}
	line, err := json.Append(nil, out, 0) // no HTML escaping: <|im_end|> as written
	if err != nil {
		return rejected(ReasonBadRecord, "%v", err)
	}
	return result{line: line}
}

func (cfg *config) decodeIDs(in input) result {
	if len(in.IDs) == 0 || string(in.IDs) == "null" {
		return rejected(ReasonNoInput, `no "ids" to decode`)
	}
	var ids []int
	if err := json.Unmarshal(in.IDs, &ids); err != nil {
		return rejected(ReasonBadIDs, `"ids" is not a list of integers: %v`, err)
	}
	for i, id := range ids {
		if _, ok := cfg.tok.TokenText(id); !ok {
			return rejected(ReasonBadIDs, "ids[%d] = %d is not in the vocabulary", i, id)
		}
	}
	line, err := json.Append(nil, decoded{ID: in.ID, Text: cfg.tok.Decode(ids)}, 0)
	if err != nil {
		return rejected(ReasonBadRecord, "%v", err)
	}
	return result{line: line}
}
