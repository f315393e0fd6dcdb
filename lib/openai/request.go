package openai

import (
	"fmt"
	"strconv"

	"github.com/segmentio/encoding/json"

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
		return PathCompletions
	case APIGenerate:
		return PathGenerate
	}
	return PathChat
}

// Parse reads a whole (not streamed) answer of the API.
func (a API) Parse(body []byte) (Completion, error) {
	switch a {
	case APICompletions:
		return ParseCompletion(body)
	case APIGenerate:
		return ParseGenerate(body)
	}
	return ParseChat(body)
}

// StreamKind is the shape of the API's streamed chunks.
func (a API) StreamKind() StreamKind {
	switch a {
	case APICompletions:
		return StreamCompletion
	case APIGenerate:
		return StreamGenerate
	}
	return StreamChat
}

// Builder turns prompt records into request bodies. Settings are layered:
// the sampling flags, then --extra-body, then the record's own "params",
// each overriding the one before; with a seed, sample k uses seed+k.
type Builder struct {
	api      API
	model    string
	sampling Sampling
	// extra is --extra-body; for /generate its "sampling_params" object is
	// split out into extraSampling and merged into the sampling params.
	extra         []byte
	extraSampling []byte
}

// NewBuilder builds requests of api for model (none for /generate) with
// the sampling flags and --extra-body (a JSON object, or empty).
func NewBuilder(api API, model string, sampling Sampling, extraBody []byte) (*Builder, error) {
	b := &Builder{api: api, model: model, sampling: sampling}
	if len(extraBody) == 0 {
		return b, nil
	}
	if err := ValidObject(extraBody); err != nil {
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
		if err := ValidObject(sp); err != nil {
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

// SetModel names the model of the requests built from now on (the one a
// server's /v1/models lists, when the flags named none).
func (b *Builder) SetModel(model string) { b.model = model }

// PromptError is a record that cannot be turned into a request; its
// Reason becomes the reject reason.
type PromptError struct {
	Reason, Detail string
}

func (e *PromptError) Error() string { return e.Reason + ": " + e.Detail }

// Reasons a prompt record cannot be sent for.
const (
	ReasonNoPrompt        = "no_prompt"
	ReasonNoUserTurn      = "no_user_turn"
	ReasonBadParams       = "bad_params"
	ReasonNeedsPromptText = "needs_prompt_text"
)

// Check tells whether p can be sent with this API, and reads the seed a
// record's params may set.
func (b *Builder) Check(p *record.Prompt) (paramSeed *int64, err error) {
	if !p.HasPrompt() {
		return nil, &PromptError{ReasonNoPrompt, `neither "messages" nor "prompt"`}
	}
	if b.api != APIChat && p.Prompt == nil {
		return nil, &PromptError{ReasonNeedsPromptText, fmt.Sprintf(`--api %s sends text: the record needs a "prompt" field (use --api chat for "messages")`, b.api)}
	}
	if b.api == APIChat && p.Prompt == nil {
		last := p.Messages[len(p.Messages)-1].Role
		if last != "user" && last != "tool" {
			return nil, &PromptError{ReasonNoUserTurn, fmt.Sprintf("the last message is a %q turn, not a user turn", last)}
		}
	}
	if len(p.Params) > 0 {
		if err := ValidObject(p.Params); err != nil {
			return nil, &PromptError{ReasonBadParams, `"params" ` + err.Error()}
		}
		var ps struct {
			Seed *int64 `json:"seed"`
		}
		if err := json.Unmarshal(p.Params, &ps); err != nil {
			return nil, &PromptError{ReasonBadParams, `"params": ` + err.Error()}
		}
		paramSeed = ps.Seed
	}
	return paramSeed, nil
}

// Body builds the request body for sample of p. paramSeed is what Check
// returned.
func (b *Builder) Body(p *record.Prompt, paramSeed *int64, sample int) ([]byte, error) {
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
		head, err := json.Marshal(CompletionRequest{Model: b.model, Prompt: *p.Prompt, Sampling: b.sampling})
		if err != nil {
			return nil, err
		}
		return Merge(head, b.extra, p.Params, seedOverride)
	}
	req := ChatRequest{Model: b.model, Sampling: b.sampling}
	if p.Prompt != nil && len(p.Messages) == 0 {
		req.Messages = []Message{{Role: "user", Content: *p.Prompt}}
	} else {
		req.Messages = make([]Message, len(p.Messages))
		for i, m := range p.Messages {
			req.Messages[i] = Message{Role: m.Role, Content: m.Content, Name: m.Name, ToolCalls: m.ToolCalls}
		}
	}
	head, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return Merge(head, b.extra, p.Params, seedOverride)
}

func (b *Builder) generateBody(p *record.Prompt, seedOverride []byte) ([]byte, error) {
	s := b.sampling
	sp, err := json.Marshal(GenerateSampling{MaxNewTokens: s.MaxTokens, Temperature: s.Temperature, TopP: s.TopP, SamplingSeed: s.Seed, Stop: s.Stop})
	if err != nil {
		return nil, err
	}
	params, err := nativeParams(p.Params)
	if err != nil {
		return nil, err
	}
	if sp, err = Merge(sp, b.extraSampling, params, seedOverride); err != nil {
		return nil, err
	}
	head := append([]byte(`{"text":`), json.Escape(*p.Prompt)...)
	head = append(head, `,"sampling_params":`...)
	head = append(append(head, sp...), '}')
	return Merge(head, b.extra)
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
		out = json.AppendEscape(out, NativeSamplingName(key), 0)
		out = append(out, ':')
		out = append(out, value...)
		return nil
	})
	return append(out, '}'), err
}
