package record

import "github.com/segmentio/encoding/json"

// The layouts of instruction datasets: which fields a record's format is
// recognised by and read from. extract turns them into prompts; dedup
// --against reads benchmark files through them, so both read a dataset
// the same way.

// Formats, as named by extract --format.
const (
	FormatAuto       = "auto"
	FormatShareGPT   = "sharegpt"
	FormatOpenAI     = "openai"
	FormatAlpaca     = "alpaca"
	FormatMTBench    = "mt-bench"
	FormatOAsst      = "oasst"
	FormatPlain      = "plain"
	FormatPreference = "preference"
	FormatBatch      = "batch"
)

// Formats lists the formats in detection order: the first whose field a
// record has decides how it is read. A batch request line is recognised
// by its custom_id and request body before anything else, then a conversation beats a bare
// instruction, which beats a bare prompt (so a record that carries both
// the full conversation and a copy of its first prompt, as UltraChat's
// do, is read as the conversation). An OpenAssistant message (its prompt
// an object, or message_id + role + text) comes before the plain prompt
// fields it shares, then UltraChat's data (a field name too common to try
// before any other), and a preference pair comes last: when a pair also
// has an explicit prompt, instruction or conversation, that is the prompt.
var Formats = []string{FormatBatch, FormatShareGPT, FormatOpenAI, FormatAlpaca, FormatMTBench, FormatOAsst, FormatPlain, FormatPreference}

// Fields is every top-level field any format reads, kept as raw JSON that
// aliases the input line. Only the fields of the format chosen for a record
// are looked at further, so an unexpected type in a field the record's
// format does not use cannot cause a reject. It has a field for each name
// any format reads (51), so that one pass over a line fills all of them.
type Fields struct {
	ID               json.RawMessage `json:"id"`
	QuestionID       json.RawMessage `json:"question_id"`
	CustomID         json.RawMessage `json:"custom_id"`
	Conversation     json.RawMessage `json:"conversations"`
	LMSYS            json.RawMessage `json:"conversation"` // LMSYS-Chat-1M's name for it
	Messages         json.RawMessage `json:"messages"`
	System           json.RawMessage `json:"system"`
	Tools            json.RawMessage `json:"tools"`
	Instruction      json.RawMessage `json:"instruction"`
	Input            json.RawMessage `json:"input"`
	Context          json.RawMessage `json:"context"`  // Dolly's reference text
	Output           json.RawMessage `json:"output"`   // Alpaca's answer
	Response         json.RawMessage `json:"response"` // Dolly's
	History          json.RawMessage `json:"history"`
	Turns            json.RawMessage `json:"turns"`
	Category         json.RawMessage `json:"category"`
	Prompt           json.RawMessage `json:"prompt"`
	Question         json.RawMessage `json:"question"`
	Text             json.RawMessage `json:"text"`
	Chosen           json.RawMessage `json:"chosen"`
	Rejected         json.RawMessage `json:"rejected"`
	ChosenMessages   json.RawMessage `json:"chosen_messages"` // LLaMA-Factory v1 DPO
	RejectedMessages json.RawMessage `json:"rejected_messages"`
	MessageID        json.RawMessage `json:"message_id"` // OpenAssistant
	ParentID         json.RawMessage `json:"parent_id"`
	MessageTreeID    json.RawMessage `json:"message_tree_id"`
	Role             json.RawMessage `json:"role"`
	Body             json.RawMessage `json:"body"`
	URL              json.RawMessage `json:"url"`
	Langdetect       json.RawMessage `json:"langdetect"`
	SystemPrompt     json.RawMessage `json:"system_prompt"`  // OpenOrca, SlimOrca
	SystemMessage    json.RawMessage `json:"system_message"` // other spellings of the system slot
	Functions        json.RawMessage `json:"functions"`      // legacy OpenAI function calling
	FunctionCall     json.RawMessage `json:"function_call"`  // its request setting: tool_choice
	ToolChoice       json.RawMessage `json:"tool_choice"`
	ParallelCalls    json.RawMessage `json:"parallel_tool_calls"`
	Query            json.RawMessage `json:"query"`    // MetaMath, ToolBench
	APIList          json.RawMessage `json:"api_list"` // ToolBench's RapidAPI endpoints
	Problem          json.RawMessage `json:"problem"`  // NuminaMath
	Solution         json.RawMessage `json:"solution"`
	ToyInput         json.RawMessage `json:"toy_input"` // xtuner's custom-dataset example
	ToyOutput        json.RawMessage `json:"toy_output"`
	Data             json.RawMessage `json:"data"`             // UltraChat: alternating user and assistant texts
	Preferred        json.RawMessage `json:"preferred_output"` // OpenAI preference fine-tuning
	NonPreferred     json.RawMessage `json:"non_preferred_output"`
	Images           json.RawMessage `json:"images"` // media lists (LLaMA-Factory) and files (LLaVA)
	Audios           json.RawMessage `json:"audios"`
	Videos           json.RawMessage `json:"videos"`
	Image            json.RawMessage `json:"image"`
	Audio            json.RawMessage `json:"audio"`
	Video            json.RawMessage `json:"video"`
}

// LayoutTurn is one element of a conversation: ShareGPT's {from, value} or
// OpenAI's {role, content}; either spelling is accepted in either layout.
// A turn with neither a role nor a speaker but an input or an output is a
// question and its answer (Capybara, xtuner: {system, input, output}).
type LayoutTurn struct {
	From         json.RawMessage `json:"from"`
	Value        json.RawMessage `json:"value"`
	Role         json.RawMessage `json:"role"`
	Content      json.RawMessage `json:"content"`
	Name         json.RawMessage `json:"name"`
	ToolCalls    json.RawMessage `json:"tool_calls"`
	FunctionCall json.RawMessage `json:"function_call"` // legacy OpenAI function calling
	ToolCallID   json.RawMessage `json:"tool_call_id"`
	Reasoning    json.RawMessage `json:"reasoning_content"`
	ReasoningAlt json.RawMessage `json:"reasoning"`
	Thinking     json.RawMessage `json:"thinking"`
	Weight       json.RawMessage `json:"weight"`      // OpenAI fine-tuning, ShareGPT (axolotl)
	LossWeight   json.RawMessage `json:"loss_weight"` // LLaMA-Factory
	Loss         json.RawMessage `json:"loss"`        // xtuner: false for context
	Input        json.RawMessage `json:"input"`
	Output       json.RawMessage `json:"output"`
	System       json.RawMessage `json:"system"`
}

// LayoutPart is one element of an OpenAI content array; LLaMA-Factory spells
// the text field "value".
type LayoutPart struct {
	Type  json.RawMessage `json:"type"`
	Text  json.RawMessage `json:"text"`
	Value json.RawMessage `json:"value"`
}

// DetectLayout names the format of a record, or "" when none of the
// known fields is there.
func DetectLayout(f *Fields) string {
	switch {
	case Present(f.CustomID) && Present(f.Body) && f.Body[0] == '{':
		return FormatBatch
	case Present(f.Conversation) || Present(f.LMSYS):
		return FormatShareGPT
	case Present(f.Messages):
		return FormatOpenAI
	case Present(f.Instruction):
		return FormatAlpaca
	case Present(f.Turns):
		return FormatMTBench
	case f.IsOAsst():
		return FormatOAsst
	case f.IsPlain():
		return FormatPlain
	case f.IsUltraChat():
		return FormatShareGPT
	case f.IsPreference():
		return FormatPreference
	}
	return ""
}

// Present reports whether a raw field was given a non-null value.
func Present(raw []byte) bool {
	return len(raw) > 0 && !(len(raw) == 4 && string(raw) == "null")
}

// IsOAsst recognises an OpenAssistant message tree (its prompt is a
// message object) or one message of a flat export.
func (f *Fields) IsOAsst() bool {
	return (Present(f.Prompt) && f.Prompt[0] == '{') ||
		(Present(f.MessageID) && Present(f.Role) && Present(f.Text))
}

// IsPlain recognises a bare prompt: one of the plain fields.
func (f *Fields) IsPlain() bool {
	for _, raw := range f.PlainFields() {
		if Present(raw.Raw) {
			return true
		}
	}
	return false
}

// IsUltraChat recognises UltraChat's data: a list of texts.
func (f *Fields) IsUltraChat() bool { return Present(f.Data) && f.Data[0] == '[' }

// IsPreference recognises a preference pair.
func (f *Fields) IsPreference() bool {
	return (Present(f.Chosen) && Present(f.Rejected)) || (Present(f.ChosenMessages) && Present(f.RejectedMessages)) ||
		(Present(f.Preferred) && Present(f.NonPreferred))
}

// NamedField is a field's value with its name, for reject details.
type NamedField struct {
	Name string
	Raw  []byte
}

// PlainFields are the fields a plain prompt is read from, in the order
// they are tried: prompt (and TRL's), question (OpenOrca), query
// (MetaMath), problem (NuminaMath), toy_input (xtuner's example), text.
func (f *Fields) PlainFields() [6]NamedField {
	return [6]NamedField{{"prompt", f.Prompt}, {"question", f.Question}, {"query", f.Query},
		{"problem", f.Problem}, {"toy_input", f.ToyInput}, {"text", f.Text}}
}

// PlainAnswers are the answer fields read with a plain prompt, in the
// order they are tried: OpenOrca's and MetaMath's response, NuminaMath's
// solution, xtuner's toy_output.
func (f *Fields) PlainAnswers() [3]NamedField {
	return [3]NamedField{{"response", f.Response}, {"solution", f.Solution}, {"toy_output", f.ToyOutput}}
}
