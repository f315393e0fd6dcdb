package infer

import (
	"fmt"
	"strconv"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// API is the kind of request sent to the servers.
type API string

const (
	APIChat        API = "chat"
	APICompletions API = "completions"
	APIGenerate    API = "generate"
)

// Path is the route of the API on a server.
func (a API) Path() string {
	switch a {
	case APICompletions:
		return openai.PathCompletions
	case APIGenerate:
		return openai.PathGenerate
	}
	return openai.PathChat
}

// builder turns prompt records into request bodies. Settings are layered:
// the sampling flags, then --extra-body, then the record's own "params",
// each overriding the one before; with a seed, sample k uses seed+k.
type builder struct {
	api      API
	model    string
	sampling openai.Sampling
	// extra is --extra-body; for /generate its "sampling_params" object is
	// split out into extraSampling and merged into the sampling params.
	extra         []byte
	extraSampling []byte
}

func newBuilder(api API, model string, sampling openai.Sampling, extraBody []byte) (*builder, error) {
	b := &builder{api: api, model: model, sampling: sampling}
	if len(extraBody) == 0 {
		return b, nil
	}
	if err := openai.ValidObject(extraBody); err != nil {
		return nil, fmt.Errorf("--extra-body: %w", err)
	}
	if api != APIGenerate {
		b.extra = extraBody
		return b, nil
	}
	sp, err := record.FieldValue(extraBody, "sampling_params")
	if err != nil {
		return nil, fmt.Errorf("--extra-body: %w", err)
	}
	if sp != nil {
		if err := openai.ValidObject(sp); err != nil {
			return nil, fmt.Errorf("--extra-body sampling_params: %w", err)
		}
		b.extraSampling = sp
		if b.extra, err = record.WithoutFields(nil, extraBody, "sampling_params"); err != nil {
			return nil, err
		}
	} else {
		b.extra = extraBody
	}
	return b, nil
}

// promptError is a record that cannot be turned into a request; its
// reason becomes the reject reason.
type promptError struct {
	reason, detail string
}

func (e *promptError) Error() string { return e.reason + ": " + e.detail }

// Reasons a prompt record is rejected for, besides the reader's.
const (
	ReasonNoID            = "no_id"
	ReasonBadID           = "bad_id"
	ReasonNoPrompt        = "no_prompt"
	ReasonNoUserTurn      = "no_user_turn"
	ReasonBadParams       = "bad_params"
	ReasonNeedsPromptText = "needs_prompt_text"
)

// check tells whether p can be sent with this API, and reads the seed a
// record's params may set.
func (b *builder) check(p *record.Prompt) (paramSeed *int64, err error) {
	if !p.HasPrompt() {
		return nil, &promptError{ReasonNoPrompt, `neither "messages" nor "prompt"`}
	}
	if b.api != APIChat && p.Prompt == nil {
		return nil, &promptError{ReasonNeedsPromptText, fmt.Sprintf(`--api %s sends text: the record needs a "prompt" field (use --api chat for "messages")`, b.api)}
	}
	if b.api == APIChat && p.Prompt == nil {
		last := p.Messages[len(p.Messages)-1].Role
		if last != "user" && last != "tool" {
			return nil, &promptError{ReasonNoUserTurn, fmt.Sprintf("the last message is a %q turn, not a user turn", last)}
		}
	}
	if len(p.Params) > 0 {
		if err := openai.ValidObject(p.Params); err != nil {
			return nil, &promptError{ReasonBadParams, `"params" ` + err.Error()}
		}
		var ps struct {
			Seed *int64 `json:"seed"`
		}
		if err := json.Unmarshal(p.Params, &ps); err != nil {
			return nil, &promptError{ReasonBadParams, `"params": ` + err.Error()}
		}
		paramSeed = ps.Seed
	}
	return paramSeed, nil
}

// body builds the request body for sample of p. paramSeed is what check
// returned.
func (b *builder) body(p *record.Prompt, paramSeed *int64, sample int) ([]byte, error) {
	var seedOverride []byte
	base := b.sampling.Seed
	if paramSeed != nil {
		base = paramSeed
	}
	seedName := "seed"
	if b.api == APIGenerate {
		seedName = "sampling_seed"
	}
	if base != nil {
		seedOverride = []byte(`{"` + seedName + `":` + strconv.FormatInt(*base+int64(sample), 10) + `}`)
	}
	switch b.api {
	case APIGenerate:
		return b.generateBody(p, seedOverride)
	case APICompletions:
		head, err := json.Marshal(openai.CompletionRequest{Model: b.model, Prompt: *p.Prompt, Sampling: b.sampling})
		if err != nil {
			return nil, err
		}
		return openai.Merge(head, b.extra, p.Params, seedOverride)
	}
	req := openai.ChatRequest{Model: b.model, Sampling: b.sampling}
	if p.Prompt != nil && len(p.Messages) == 0 {
		req.Messages = []openai.Message{{Role: "user", Content: *p.Prompt}}
	} else {
		req.Messages = make([]openai.Message, len(p.Messages))
		for i, m := range p.Messages {
			req.Messages[i] = openai.Message{Role: m.Role, Content: m.Content, Name: m.Name, ToolCalls: m.ToolCalls}
		}
	}
	head, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return openai.Merge(head, b.extra, p.Params, seedOverride)
}

func (b *builder) generateBody(p *record.Prompt, seedOverride []byte) ([]byte, error) {
	s := b.sampling
	sp, err := json.Marshal(openai.GenerateSampling{MaxNewTokens: s.MaxTokens, Temperature: s.Temperature, TopP: s.TopP, SamplingSeed: s.Seed, Stop: s.Stop})
	if err != nil {
		return nil, err
	}
	params, err := nativeParams(p.Params)
	if err != nil {
		return nil, err
	}
	if sp, err = openai.Merge(sp, b.extraSampling, params, seedOverride); err != nil {
		return nil, err
	}
	head := append([]byte(`{"text":`), json.Escape(*p.Prompt)...)
	head = append(head, `,"sampling_params":`...)
	head = append(append(head, sp...), '}')
	return openai.Merge(head, b.extra)
}

// nativeParams renames a record's OpenAI-style params to /generate's
// sampling_params names (max_tokens -> max_new_tokens, seed ->
// sampling_seed).
func nativeParams(params []byte) ([]byte, error) {
	if len(params) == 0 {
		return nil, nil
	}
	out := []byte{'{'}
	err := record.EachField(params, func(key string, value []byte) error {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = json.AppendEscape(out, openai.NativeSamplingName(key), 0)
		out = append(out, ':')
		out = append(out, value...)
		return nil
	})
	return append(out, '}'), err
}
