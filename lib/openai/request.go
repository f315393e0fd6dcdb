package openai

import (
	"bytes"
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
// each overriding the one before; with a seed, sample k uses
// seed+offset+k (offset: SetSeedOffset).
type Builder struct {
	api      API
	model    string
	sampling Sampling
	// seedOffset is added to every seed (--seed-offset).
	seedOffset int64
	// historyReasoning sends the history's reasoning_content back.
	historyReasoning bool
	// extra is --extra-body; for /generate its "sampling_params" object is
	// split out into extraSampling and merged into the sampling params.
	extra         []byte
	extraSampling []byte
	// arm is a sampling mixture's arm's params (WithArm), laid over extra
	// and under a record's params.
	arm []byte
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

// WithArm is b with an arm's params (a JSON object, checked by lib/mix)
// laid over the flags and --extra-body and under a record's own params;
// for /generate they go where a record's params go, into sampling_params
// under its names. nil params: b itself. The copy is cheap: infer makes
// one per request built, so that the model and the settings are b's.
func (b *Builder) WithArm(params []byte) *Builder {
	if len(params) == 0 {
		return b
	}
	c := *b
	c.arm = params
	return &c
}

// ArmSent is what the requests of a record whose params are params send
// of the arm's keys, after every layer (the record's params win; one that
// removes a key with null leaves it out), as a JSON object of the keys in
// their order; nil when none is sent. A max_tokens lowered to fit the
// context is not in it (infer records that as output.max_tokens).
func (b *Builder) ArmSent(params []byte, keys []string) (json.RawMessage, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	empty := ""
	p := record.Prompt{Params: params}
	if b.api != APIChat {
		p.Prompt = &empty
	}
	body, err := b.BodyMax(&p, nil, 0, 0)
	if err != nil {
		return nil, err
	}
	top := body
	if b.api == APIGenerate {
		if body, err = record.FieldValue(body, "sampling_params"); err != nil {
			return nil, err
		}
	}
	out := []byte{'{'}
	for _, key := range keys {
		name := key
		if b.api == APIGenerate {
			name = NativeSamplingName(key)
		}
		v, err := record.FieldValue(body, name)
		if err == nil && v == nil && b.api == APIGenerate {
			v, err = record.FieldValue(top, key)
		}
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = json.AppendEscape(out, key, 0)
		out = append(append(out, ':'), bytes.TrimSpace(v)...)
	}
	if len(out) == 1 {
		return nil, nil
	}
	return append(out, '}'), nil
}

// SetSeedOffset adds n to the seed of every request built from now on, so
// that a rerun of the same prompts samples other answers.
func (b *Builder) SetSeedOffset(n int64) { b.seedOffset = n }

// SetHistoryReasoning sends the reasoning_content of the history's
// assistant turns back to the server. By default it is left out, as the
// Qwen3 and DeepSeek chat templates drop it from earlier turns.
func (b *Builder) SetHistoryReasoning(on bool) { b.historyReasoning = on }

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
	ReasonBadTools        = "bad_tools"
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
	return b.CheckParams(p)
}

// CheckParams checks a record's tools and "params", and reads the seed
// its params may set.
func (b *Builder) CheckParams(p *record.Prompt) (paramSeed *int64, err error) {
	if b.api == APIChat {
		if _, _, err := record.AppendCanonicalTools(nil, p.Tools); err != nil {
			return nil, &PromptError{ReasonBadTools, err.Error()}
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
	return b.BodyMax(p, paramSeed, sample, 0)
}

// BodyMax is Body with max_tokens set to maxTokens (when > 0) over every
// other setting: the length infer chose to fit the model's context.
func (b *Builder) BodyMax(p *record.Prompt, paramSeed *int64, sample, maxTokens int) ([]byte, error) {
	var override []byte
	base := b.sampling.Seed
	if paramSeed != nil {
		base = paramSeed
	}
	seedName, maxName := "seed", "max_tokens"
	if b.api == APIGenerate {
		seedName, maxName = "sampling_seed", "max_new_tokens"
	}
	if base != nil || maxTokens > 0 {
		override = []byte{'{'}
		if base != nil {
			override = append(override, `"`+seedName+`":`...)
			override = strconv.AppendInt(override, *base+b.seedOffset+int64(sample), 10)
		}
		if maxTokens > 0 {
			if len(override) > 1 {
				override = append(override, ',')
			}
			override = append(override, `"`+maxName+`":`...)
			override = strconv.AppendInt(override, int64(maxTokens), 10)
		}
		override = append(override, '}')
	}
	switch b.api {
	case APIGenerate:
		return b.generateBody(p, override)
	case APICompletions:
		head, err := json.Marshal(CompletionRequest{Model: b.model, Prompt: *p.Prompt, Sampling: b.sampling})
		if err != nil {
			return nil, err
		}
		return mergeHead(head, b.extra, b.arm, p.Params, override)
	}
	req := ChatRequest{Model: b.model, Sampling: b.sampling, ToolChoice: nonNull(p.ToolChoice), ParallelToolCalls: nonNull(p.ParallelToolCalls)}
	msgs := ChatMessages(p)
	req.Messages = make([]Message, len(msgs))
	for i, m := range msgs {
		req.Messages[i] = Message{Role: m.Role, Content: m.Content, Name: m.Name, ToolCalls: nonNull(m.ToolCalls), ToolCallID: m.ToolCallID}
		if b.historyReasoning && m.Role == "assistant" {
			req.Messages[i].ReasoningContent = m.ReasoningContent
		}
	}
	if len(p.Tools) > 0 {
		tools, ok, err := record.AppendCanonicalTools(nil, p.Tools)
		if err != nil {
			return nil, err
		}
		if ok {
			req.Tools = tools
		}
	}
	head, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return mergeHead(head, b.extra, b.arm, p.Params, override)
}

// mergeHead is Merge of a head infer marshalled itself: with nothing to
// lay over it, the head as it is (it has no null field to remove, its
// fields being omitempty), not parsed and copied again for every request.
func mergeHead(head []byte, overrides ...[]byte) ([]byte, error) {
	for _, o := range overrides {
		if len(bytes.TrimSpace(o)) > 0 {
			return Merge(head, overrides...)
		}
	}
	return head, nil
}

// ChatMessages are the turns a chat request sends for p: its messages,
// with a top-level "system" first unless a system turn opens them (the
// one system slot, record.UsesSystem), or its "prompt" text as one user
// turn.
func ChatMessages(p *record.Prompt) []record.Message {
	msgs := p.Messages
	if p.Prompt != nil && len(msgs) == 0 {
		msgs = []record.Message{{Role: "user", Content: *p.Prompt}}
	}
	if record.UsesSystem(p.System, msgs) {
		msgs = append([]record.Message{{Role: "system", Content: p.System}}, msgs...)
	}
	return msgs
}

// nonNull is raw unless it is JSON null (or empty): a field set to null
// is left out of the request.
func nonNull(raw json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil
	}
	return raw
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
	arm, err := nativeParams(b.arm)
	if err != nil {
		return nil, err
	}
	if sp, err = Merge(sp, b.extraSampling, arm, params, seedOverride); err != nil {
		return nil, err
	}
	head := append([]byte(`{"text":`), json.Escape(*p.Prompt)...)
	head = append(head, `,"sampling_params":`...)
	head = append(append(head, sp...), '}')
	return mergeHead(head, b.extra)
}

// MaxTokens is the max_tokens a request of p asks for, after the layers
// (the flag, --extra-body, the record's params); 0 when none sets it (the
// server's default applies) or a layer removes it with null.
func (b *Builder) MaxTokens(p *record.Prompt) int {
	n := 0
	if b.sampling.MaxTokens != nil {
		n = *b.sampling.MaxTokens
	}
	layers := [][]byte{b.extra, b.arm, p.Params}
	names := []string{"max_tokens", "max_completion_tokens"}
	if b.api == APIGenerate {
		layers = [][]byte{b.extraSampling, b.arm, p.Params}
		names = []string{"max_new_tokens", "max_tokens"}
	}
	for _, layer := range layers {
		if len(layer) == 0 {
			continue
		}
		record.EachField(layer, func(key string, value []byte) error {
			for _, name := range names {
				if key == name {
					var v *int
					if json.Unmarshal(value, &v) == nil {
						n = 0
						if v != nil {
							n = *v
						}
					}
				}
			}
			return nil
		})
	}
	return n
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
