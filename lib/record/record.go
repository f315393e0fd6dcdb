// Package record holds the record types every tokenmill stage exchanges
// (see the record contract in GUIDE.md) and the small helpers that edit a
// record's raw JSON without re-encoding the fields a stage does not own.
package record

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/segmentio/encoding/json"
)

// ID is a record id. Datasets use strings or integers; both are kept as the
// decimal or string text, and Numeric remembers which, so that an id written
// back out keeps its JSON type.
type ID struct {
	Text    string
	Numeric bool
}

// StringID builds an id.
func StringID(s string) ID { return ID{Text: s} }

func (id ID) String() string { return id.Text }
func (id ID) IsZero() bool   { return id.Text == "" }

// MarshalJSON writes the id with its original JSON type.
func (id ID) MarshalJSON() ([]byte, error) {
	if id.Numeric {
		return []byte(id.Text), nil
	}
	return json.Marshal(id.Text)
}

// UnmarshalJSON accepts a JSON string or an integer.
func (id *ID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*id = ID{}
		return nil
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*id = ID{Text: s}
		return nil
	case b[0] == '-' || (b[0] >= '0' && b[0] <= '9'):
		if _, err := strconv.ParseInt(string(b), 10, 64); err != nil {
			return fmt.Errorf("id %s is not an integer", b)
		}
		*id = ID{Text: string(b), Numeric: true}
		return nil
	}
	return fmt.Errorf("id must be a string or an integer, not %.20s", b)
}

// Message is one chat turn. Content is plain text: extract flattens arrays
// of content parts. ToolCalls, ToolCallID and Name are carried for
// tool-using datasets; ReasoningContent is an assistant turn's separated
// reasoning (not part of the prompt's identity). Weight is an assistant
// turn's training weight as the dataset gave it (OpenAI's "weight",
// ShareGPT's, xtuner's "loss", LLaMA-Factory's "loss_weight"; nil: none
// given, a target): 0 marks a turn that is context, not a target. It is not
// part of the prompt's identity and is never sent to a server.
type Message struct {
	Role             string          `json:"role"`
	Content          string          `json:"content"`
	Name             string          `json:"name,omitempty"`
	ToolCalls        json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID       string          `json:"tool_call_id,omitempty"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	Weight           *float64        `json:"weight,omitempty"`
}

// IsContext reports whether m is an assistant turn of weight 0: kept as
// context, neither regenerated nor trained on.
func (m *Message) IsContext() bool {
	return m.Role == "assistant" && m.Weight != nil && *m.Weight == 0
}

// ToolCall is one call of an assistant turn, in the OpenAI chat shape:
// Arguments is the arguments object as JSON text.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function a ToolCall calls.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Prompt is the part of a prompt record the stages read. The raw record is
// always what gets written, so fields not named here survive untouched.
// Tools are the tools the prompt offers the model, in any of the spellings
// AppendCanonicalTools reads.
type Prompt struct {
	ID       ID              `json:"id"`
	Messages []Message       `json:"messages,omitempty"`
	Prompt   *string         `json:"prompt,omitempty"`
	Tools    json.RawMessage `json:"tools,omitempty"`
	// ToolChoice and ParallelToolCalls are sent as the request's
	// tool_choice and parallel_tool_calls when set.
	ToolChoice        json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls json.RawMessage `json:"parallel_tool_calls,omitempty"`
	// System is a top-level system prompt (ShareGPT, Alpaca); it takes
	// the system slot by UsesSystem's rule.
	System string          `json:"system,omitempty"`
	Source string          `json:"source,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Meta   json.RawMessage `json:"meta,omitempty"`
	// Sample is set on generation records, and on prompt records that a
	// stage expanded per sample; absent means sample 0.
	Sample int `json:"sample,omitempty"`
}

// Usage is the token accounting of one answer.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// CachedTokens is the prompt tokens the server found in its prefix
	// cache, when it said (nil: it did not report them).
	CachedTokens *int `json:"cached_tokens,omitempty"`
}

// Finish reasons, in increasing order of how good an answer they mark.
// An answer that ends in tool calls (FinishToolCalls) is as complete as
// one that stops: the calls are the answer.
const (
	FinishAbort     = "abort"
	FinishLength    = "length"
	FinishStop      = "stop"
	FinishToolCalls = "tool_calls"
)

// MaxSample is the highest sample number a record may carry: infer refuses
// a prompt whose samples would pass it, and merge a record that does, so
// that a typo cannot ask for a billion to-do records.
const MaxSample = 1 << 20

// Output is what infer adds to a prompt record to make a generation record.
// A single answer has Text (and ToolCalls when the answer calls tools); a
// regenerated conversation (infer --regenerate, see ConversationOutput)
// has Messages, Turns and Truncated instead of Text.
type Output struct {
	Text      string `json:"text"`
	Reasoning string `json:"reasoning,omitempty"`
	// ReasoningField is the field the server sent the reasoning in:
	// reasoning_content (SGLang, llama.cpp, older vLLM) or reasoning
	// (current vLLM).
	ReasoningField string     `json:"reasoning_field,omitempty"`
	ToolCalls      []ToolCall `json:"tool_calls,omitempty"`
	// ContextShifted: the prompt and the answer passed the model's context,
	// so the server (Ollama) dropped the prompt's start while it wrote the
	// answer: an answer to less than its prompt.
	ContextShifted bool   `json:"context_shifted,omitempty"`
	FinishReason   string `json:"finish_reason"`
	Usage          Usage  `json:"usage"`
	// MaxTokens is the max_tokens sent, when infer lowered it to fit the
	// model's context.
	MaxTokens int    `json:"max_tokens,omitempty"`
	Model     string `json:"model,omitempty"`
	Endpoint  string `json:"endpoint,omitempty"`
	LatencyMS int64  `json:"latency_ms"`
	Attempts  int    `json:"attempts"`
	Sample    int    `json:"sample"`
	// SeedOffset is the --seed-offset of the run that asked (sample k of a
	// seeded request asks seed+offset+k), so that infer --append can ask
	// the file's prompts with seeds none of its answers took. Omitted when 0.
	SeedOffset int64 `json:"seed_offset,omitempty"`
	// Arm names the sampling mixture's arm the answer was asked under
	// (infer --mix), and ArmParams what its requests sent of the arm's
	// settings, the record's own params having won.
	Arm       string          `json:"arm,omitempty"`
	ArmParams json.RawMessage `json:"arm_params,omitempty"`
	// Settings is the hash of the settings that made the answer, and
	// SettingsFamily the hash of their family (see record.Settings): the
	// settings sidecar beside infer's output says what each is.
	Settings       string `json:"settings,omitempty"`
	SettingsFamily string `json:"settings_family,omitempty"`

	Messages  []Message   `json:"messages,omitempty"`
	Turns     []Turn      `json:"turns,omitempty"`
	Truncated *Truncation `json:"truncated,omitempty"`

	TokenIDs // infer --token-ids (tokens.go)
}

// ConversationOutput is the "output" of a regenerated conversation: the
// conversation with every assistant turn regenerated, and one Turn per
// regenerated answer. It has no "text": the answers are the turns.
type ConversationOutput struct {
	Messages     []Message   `json:"messages"`
	Turns        []Turn      `json:"turns"`
	Truncated    *Truncation `json:"truncated,omitempty"`
	FinishReason string      `json:"finish_reason"`
	Usage        TurnUsage   `json:"usage"`
	Model        string      `json:"model,omitempty"`
	Endpoint     string      `json:"endpoint,omitempty"`
	LatencyMS    int64       `json:"latency_ms"`
	Attempts     int         `json:"attempts"`
	Sample       int         `json:"sample"`
	SeedOffset   int64       `json:"seed_offset,omitempty"` // as Output's
	// Arm and ArmParams are as in Output (infer --mix), and so are
	// Settings and SettingsFamily.
	Arm            string          `json:"arm,omitempty"`
	ArmParams      json.RawMessage `json:"arm_params,omitempty"`
	Settings       string          `json:"settings,omitempty"`
	SettingsFamily string          `json:"settings_family,omitempty"`
	// ServedBy names the server of the first turn (infer --token-ids).
	ServedBy *ServedBy `json:"served_by,omitempty"`
}

// Turn is one regenerated assistant turn of a conversation: Message is its
// index in the output's messages.
type Turn struct {
	Message        int       `json:"message"`
	FinishReason   string    `json:"finish_reason"`
	ReasoningField string    `json:"reasoning_field,omitempty"` // as Output's
	ContextShifted bool      `json:"context_shifted,omitempty"` // as Output's
	Usage          TurnUsage `json:"usage"`
	MaxTokens      int       `json:"max_tokens,omitempty"`
	LatencyMS      int64     `json:"latency_ms"`
	Endpoint       string    `json:"endpoint,omitempty"`
	Attempts       int       `json:"attempts"`

	TokenIDs // infer --token-ids (tokens.go)
}

// TurnUsage is a turn's token accounting; cached_tokens appears only when
// the server reported cached tokens.
type TurnUsage struct {
	PromptTokens     int  `json:"prompt_tokens"`
	CompletionTokens int  `json:"completion_tokens"`
	CachedTokens     *int `json:"cached_tokens,omitempty"`
}

// AddCached adds the cached tokens of another turn, reported or not: the
// sum is reported when any turn's was.
func (u *TurnUsage) AddCached(n *int) {
	if n == nil {
		return
	}
	if u.CachedTokens == nil {
		u.CachedTokens = new(int)
	}
	*u.CachedTokens += *n
}

// Truncation says why a regenerated conversation ended before the
// original did, and at which turn (an index into the output's turns).
type Truncation struct {
	Reason string `json:"reason"`
	Turn   int    `json:"turn"`
	Detail string `json:"detail,omitempty"`
}

// Truncation reasons.
const (
	TruncToolUnpaired = "tool_unpaired"
	TruncToolRounds   = "tool_rounds"
	TruncContextFull  = "context_full"
)

// Error reasons: failures infer decided itself.
const (
	// ReasonPromptTooLong: the prompt leaves no room for an answer in the
	// model's context.
	ReasonPromptTooLong = "prompt_too_long"
	// ReasonAnswerTooLarge: the answer's record would pass the line limit.
	ReasonAnswerTooLarge = "answer_too_large"
	// ReasonToolsUnsupported: the server refuses a request that offers
	// tools (the model's template has none, or its tool parser is off);
	// records without tools are answered.
	ReasonToolsUnsupported = "tools_unsupported"
)

// Error is what infer adds to a prompt record it could not generate.
// Reason names failures infer decided itself (a prompt too long for the
// context, an answer too large to write); TurnsDone and Turn say, for a
// conversation, how many turns were regenerated and which one failed.
type Error struct {
	Status       int    `json:"status"`
	Message      string `json:"message"`
	Reason       string `json:"reason,omitempty"`
	PromptTokens int    `json:"prompt_tokens,omitempty"`
	Attempts     int    `json:"attempts"`
	Endpoint     string `json:"endpoint,omitempty"`
	Retriable    bool   `json:"retriable"`
	Sample       int    `json:"sample"`
	TurnsDone    *int   `json:"turns_done,omitempty"`
	Turn         *int   `json:"turn,omitempty"`
	// Arm is the sampling mixture's arm the answer was asked under.
	Arm string `json:"arm,omitempty"`
}

// Reject is what any stage adds to an input it could not use.
type Reject struct {
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
	File   string `json:"file"`
	Line   int64  `json:"line"`
}

// Generation is the view of a generation or error record that merge and
// stats read: the prompt fields plus whichever of output or error is set.
type Generation struct {
	Prompt
	Output *Output `json:"output,omitempty"`
	Error  *Error  `json:"error,omitempty"`
}

// Kind tells the three record kinds apart.
type Kind int

const (
	KindPrompt Kind = iota
	KindGeneration
	KindError
)

func (k Kind) String() string {
	switch k {
	case KindGeneration:
		return "generation"
	case KindError:
		return "error"
	}
	return "prompt"
}

// ParseFlags are the decoding flags every stage uses: the decoded strings
// may alias the input line, which lives until the next line is read, and
// field names match exactly, as the record contract spells them ("ID" is
// not "id"; encoding/json would take either).
const ParseFlags = json.ZeroCopy | json.DontMatchCaseInsensitiveStructFields

// Decode parses one raw record into v. Decoded strings alias raw, so v is
// valid only as long as raw is. The decoder fills reused slices element by
// element without clearing fields a record leaves out, so reset v (for
// example *v = Prompt{Messages: msgs[:0]} with msgs cleared) before reuse.
func Decode(raw []byte, v any) error {
	rest, err := json.Parse(raw, v, ParseFlags)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// ErrNotObject is returned by the raw editors for input that is not a JSON
// object.
var ErrNotObject = errors.New("record is not a JSON object")

// AppendField returns dst with raw (a JSON object) copied and the field
// key: value added before its closing brace. value must be valid JSON. The
// rest of the record is kept byte for byte, so unknown fields survive.
func AppendField(dst, raw []byte, key string, value []byte) ([]byte, error) {
	obj := bytes.TrimSpace(raw)
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return dst, ErrNotObject
	}
	body := bytes.TrimSpace(obj[1 : len(obj)-1])
	dst = append(dst, '{')
	dst = append(dst, body...)
	if len(body) > 0 {
		dst = append(dst, ',')
	}
	dst = json.AppendEscape(dst, key, 0)
	dst = append(dst, ':')
	dst = append(dst, value...)
	return append(dst, '}'), nil
}

// RawLine wraps an input line that is not valid JSON, so a reject record can
// still carry it: {"raw": "<line>"}.
func RawLine(line []byte) []byte {
	out := append([]byte(`{"raw":`), json.Escape(string(line))...)
	return append(out, '}')
}
