package stats

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/segmentio/encoding/json"
	"github.com/zeebo/xxh3"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/quality"
	"tokenmill/lib/record"
)

// Reject reasons of stats, besides the reader's line_too_long and unreadable.
const (
	ReasonMissingID = "missing_id" // no id, null, or ""
	ReasonWrongType = "wrong_type" // a field stats reads has the wrong JSON type
	ReasonNoPrompt  = "no_prompt"  // neither "messages" nor "prompt"
	ReasonBadValue  = "bad_value"  // a negative or absurd token count or latency
)

// maxValue bounds each token count and latency a record may carry, and
// their sum over a conversation's turns: 2^32 tokens is past any model's
// context, 2^32 ms is 49 days. So the report's int64 sums hold 2^31 records
// of such values without overflowing, and an absurd count is a bad record,
// not a negative total.
const maxValue = 1 << 32

// absurd tells a value past maxValue.
func absurd(vs ...int64) bool {
	for _, v := range vs {
		if v > maxValue {
			return true
		}
	}
	return false
}

// chars is the length in characters (Unicode code points) of a JSON string,
// counted on the raw literal so the text is never unescaped or copied: an
// escape counts as the one character it stands for. Invalid UTF-8 counts
// one per byte, as a decoder replacing it with U+FFFD would.
type chars struct {
	n     int
	set   bool // a string was present (null and absence leave it false)
	blank bool // ... and empty or white space only
}

func (c *chars) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("a text field (content, prompt, text or reasoning) should be a string, not %s", jsonKind(b))
	}
	c.n, c.set, c.blank = quality.CharsJSON(b[1:len(b)-1]), true, quality.BlankJSON(b)
	return nil
}

// rawID keeps the raw JSON of an id (a string or an integer) without
// decoding it; most ids are never looked at again.
type rawID []byte

func (r *rawID) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if b[0] == '"' {
		*r = b
		return nil
	}
	// Integers (and the error for anything else) as record.ID defines them.
	var id record.ID
	if err := id.UnmarshalJSON(b); err != nil {
		return err
	}
	*r = b
	return nil
}

// empty reports an absent, null or "" id.
func (r rawID) empty() bool { return len(r) == 0 || string(r) == `""` }

// text is the id as a person reads it: the string's text or the integer.
func (r rawID) text() record.ID {
	var id record.ID
	_ = id.UnmarshalJSON(r) // validated when parsed
	return id
}

// The small views of the record contract stats decodes: only the fields it
// reports, lengths as counts, strings aliasing the input line.
type (
	lineView struct {
		ID       rawID         `json:"id"`
		Messages []messageView `json:"messages"`
		Prompt   chars         `json:"prompt"`
		Source   string        `json:"source"`
		Sample   int           `json:"sample"`
		Output   *outputView   `json:"output"`
		Error    *errorView    `json:"error"`
	}
	messageView struct {
		Content chars `json:"content"`
	}
	outputView struct {
		Text         chars           `json:"text"`
		Reasoning    chars           `json:"reasoning"`
		FinishReason string          `json:"finish_reason"`
		Usage        *usageView      `json:"usage"`
		Endpoint     string          `json:"endpoint"`
		LatencyMS    int64           `json:"latency_ms"`
		Sample       int             `json:"sample"`
		ToolCalls    json.RawMessage `json:"tool_calls"`
		// MaxTokens is the max_tokens sent when infer lowered it to fit
		// the model's context (absent otherwise).
		MaxTokens int64 `json:"max_tokens"`
		// A regenerated conversation (infer --regenerate): the whole
		// conversation, and where its regenerated turns are in it.
		Messages  []convMessageView `json:"messages"`
		Turns     []turnView        `json:"turns"`
		Truncated *truncatedView    `json:"truncated"`
		// Arm is the sampling mixture's arm (infer --mix).
		Arm string `json:"arm"`
		// Settings and SettingsFamily are the hashes of the settings that
		// made the answer (settings.go).
		Settings       string `json:"settings"`
		SettingsFamily string `json:"settings_family"`
		// Only whether they are there: tokenAgg reads the ids.
		PromptTokenIDs json.RawMessage `json:"prompt_token_ids"`
	}
	usageView struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		// CachedTokens is nil when the server did not report it.
		CachedTokens *int64 `json:"cached_tokens"`
	}
	convMessageView struct {
		Content   chars `json:"content"`
		Reasoning chars `json:"reasoning_content"`
		// Only counted: an empty turn is one without calls.
		ToolCalls []struct{} `json:"tool_calls"`
	}
	turnView struct {
		Message      *int       `json:"message"`
		FinishReason string     `json:"finish_reason"`
		Usage        *usageView `json:"usage"`
		MaxTokens    int64      `json:"max_tokens"`
		// Only whether they are there, as in outputView.
		PromptTokenIDs json.RawMessage `json:"prompt_token_ids"`
	}
	truncatedView struct {
		Reason string `json:"reason"`
	}
	errorView struct {
		Status   int    `json:"status"`
		Message  string `json:"message"`
		Endpoint string `json:"endpoint"`
		Sample   int    `json:"sample"`
		// Reason and PromptTokens: a prompt infer found too long for the
		// context (prompt_too_long) and its tokens.
		Reason       string `json:"reason"`
		PromptTokens int64  `json:"prompt_tokens"`
		Arm          string `json:"arm"`
	}
)

// fact is what one record contributes to the report. Its strings alias the
// line it came from. It has a field for each thing a record tells the
// report (33): one parse fills them, and a worker hands the aggregator one
// value per record.
type fact struct {
	// parity is what --tokenizer found of the record's ids.
	parity    *parityFact
	kind      record.Kind
	id        rawID
	key       uint64 // hash of (kind class, id, sample) for the duplicate count
	sample    int
	source    string
	prompt    int // characters of all message contents, or of "prompt"
	usage     bool
	pTokens   int64
	cTokens   int64
	answer    int
	hasReas   bool
	reasoning int
	finish    string
	endpoint  string
	latency   int64
	status    int
	message   string
	// maxTokens is output.max_tokens (0: not lowered); tooLong marks an
	// error record prompt_too_long, pTokens then its error.prompt_tokens.
	maxTokens int64
	tooLong   bool
	// empty: an answer (or a regenerated turn) with no text and no tool
	// call.
	empty bool
	// A regenerated conversation: its turns, and why it was cut short
	// ("" when complete).
	conversation bool
	turns        []turnFact
	truncated    string
	// The quality checks (--checks): the reason of the first failure, as
	// filter counts it, the checks failed, and the first failure's turn
	// and detail.
	reason  string
	failed  uint8
	turn    int
	detail  string
	answers int
	// arm is output.arm or error.arm (infer --mix), "" for none.
	arm string
	// tokens: the output or one of its turns carries prompt_token_ids.
	tokens bool
	// settings and family are output.settings and settings_family ("":
	// none).
	settings, family string
}

// turnFact is what one regenerated turn contributes.
type turnFact struct {
	chars     int
	finish    string
	usage     bool
	cTokens   int64
	pTokens   int64
	cached    int64
	hasCached bool
	maxTokens int64
}

// parseError is a record stats cannot use, with its reject reason.
type parseError struct {
	reason string
	err    error
}

// parse reads one record into f.
func parse(data []byte, f *fact) *parseError {
	var v lineView
	if err := record.Decode(data, &v); err != nil {
		return classify(data, err)
	}
	if v.ID.empty() {
		return &parseError{ReasonMissingID, errors.New(`record has no "id"`)}
	}
	if v.Messages == nil && !v.Prompt.set {
		return &parseError{ReasonNoPrompt, errors.New(`record has neither "messages" nor "prompt"`)}
	}
	*f = fact{id: v.ID, source: v.Source, sample: v.Sample, prompt: v.Prompt.n}
	for _, m := range v.Messages {
		f.prompt += m.Content.n
	}
	class := byte('p') // prompts apart from answers: a prompt file and its generations share ids
	switch {
	case v.Output != nil:
		o := v.Output
		f.kind, f.sample, class = record.KindGeneration, o.Sample, 'g'
		f.answer, f.hasReas, f.reasoning = o.Text.n, o.Reasoning.n > 0, o.Reasoning.n
		f.empty = (!o.Text.set || o.Text.blank) && isNullRaw(o.ToolCalls)
		f.finish, f.endpoint, f.latency, f.arm = o.FinishReason, o.Endpoint, o.LatencyMS, o.Arm
		f.settings, f.family = o.Settings, o.SettingsFamily
		if o.Usage != nil {
			f.usage, f.pTokens, f.cTokens = true, o.Usage.PromptTokens, o.Usage.CompletionTokens
		}
		f.maxTokens = o.MaxTokens
		f.tokens = hasRaw(o.PromptTokenIDs)
		for i := range o.Turns {
			f.tokens = f.tokens || hasRaw(o.Turns[i].PromptTokenIDs)
		}
		if f.latency < 0 || f.pTokens < 0 || f.cTokens < 0 || f.maxTokens < 0 {
			return &parseError{ReasonBadValue, errors.New("negative latency_ms, token count or max_tokens")}
		}
		if absurd(f.latency, f.pTokens, f.cTokens, f.maxTokens) {
			return &parseError{ReasonBadValue, fmt.Errorf("latency_ms, a token count or max_tokens past %d", int64(maxValue))}
		}
		if len(o.Messages) > 0 {
			if perr := f.readConversation(o); perr != nil {
				return perr
			}
		}
	case v.Error != nil:
		e := v.Error
		f.kind, f.sample, class = record.KindError, e.Sample, 'g' // an error and an answer for one (id, sample) repeat it
		f.status, f.message, f.endpoint, f.arm = e.Status, e.Message, e.Endpoint, e.Arm
		f.tooLong, f.pTokens = e.Reason == record.ReasonPromptTooLong, e.PromptTokens
		if f.pTokens < 0 {
			return &parseError{ReasonBadValue, errors.New("negative error.prompt_tokens")}
		}
		if absurd(f.pTokens) {
			return &parseError{ReasonBadValue, fmt.Errorf("error.prompt_tokens past %d", int64(maxValue))}
		}
	default:
		f.kind = record.KindPrompt
	}
	f.key = idKey(class, v.ID, f.sample)
	return nil
}

// hasRaw tells a raw value that is there and not null.
func hasRaw(v json.RawMessage) bool { return len(v) > 0 && string(v) != "null" }

// readConversation reads a regenerated conversation's turns: the record's
// answer is all of them (their text and reasoning summed), empty if one
// of them is.
func (f *fact) readConversation(o *outputView) *parseError {
	f.conversation, f.empty, f.answer, f.reasoning = true, false, 0, 0
	if o.Truncated != nil {
		f.truncated = o.Truncated.Reason
		if f.truncated == "" {
			f.truncated = noneName
		}
	}
	f.turns = make([]turnFact, len(o.Turns))
	var sum [3]int64 // the turns' prompt, completion and cached tokens
	for i, t := range o.Turns {
		if t.Message == nil || *t.Message < 0 || *t.Message >= len(o.Messages) {
			return &parseError{ReasonBadValue, fmt.Errorf("output.turns[%d].message is not an index into output.messages", i)}
		}
		m := &o.Messages[*t.Message]
		tf := turnFact{chars: m.Content.n, finish: t.FinishReason, maxTokens: t.MaxTokens}
		if tf.maxTokens < 0 {
			return &parseError{ReasonBadValue, fmt.Errorf("output.turns[%d].max_tokens is negative", i)}
		}
		if u := t.Usage; u != nil {
			tf.usage, tf.pTokens, tf.cTokens = true, u.PromptTokens, u.CompletionTokens
			if u.CachedTokens != nil {
				tf.hasCached, tf.cached = true, *u.CachedTokens
			}
			if tf.pTokens < 0 || tf.cTokens < 0 || tf.cached < 0 {
				return &parseError{ReasonBadValue, fmt.Errorf("output.turns[%d]: a negative token count", i)}
			}
			sum[0], sum[1], sum[2] = sum[0]+tf.pTokens, sum[1]+tf.cTokens, sum[2]+tf.cached
			if absurd(tf.pTokens, tf.cTokens, tf.cached, tf.maxTokens, sum[0], sum[1], sum[2]) {
				return &parseError{ReasonBadValue, fmt.Errorf("output.turns[%d]: a token count (or the turns' sum) past %d", i, int64(maxValue))}
			}
		}
		f.turns[i] = tf
		f.answer += m.Content.n
		f.reasoning += m.Reasoning.n
		f.empty = f.empty || (!m.Content.set || m.Content.blank) && len(m.ToolCalls) == 0
	}
	f.hasReas = f.reasoning > 0
	return nil
}

func isNullRaw(v json.RawMessage) bool {
	return len(v) == 0 || string(v) == "null" || string(v) == "[]"
}

// idKey hashes (class, id, sample). 64 bits keep the set small; two
// different keys collide with probability about n²/2⁶⁵ (3e-8 for a million
// records), which could only add one false repeat to the count.
func idKey(class byte, id rawID, sample int) uint64 {
	var buf [96]byte
	b := append(buf[:0], class)
	b = strconv.AppendInt(b, int64(sample), 10)
	b = append(b, 0)
	switch {
	case len(id) > 0 && id[0] != '"':
		b = append(append(append(b, '"'), id...), '"') // 7 and "7" are one id, as in every tool
	case bytes.IndexByte(id, '\\') >= 0:
		b = append(append(append(b, '"'), id.text().Text...), '"') // "a\u0062" and "ab" are one id
	default:
		b = append(b, id...)
	}
	return xxh3.Hash(b)
}

// classify turns a decoding error into a reject reason.
func classify(data []byte, err error) *parseError {
	if !json.Valid(data) {
		return &parseError{jsonl.ReasonMalformedJSON, err}
	}
	if firstByte(data) != '{' {
		return &parseError{jsonl.ReasonNotObject, fmt.Errorf("record is %s, not an object", jsonKind(data))}
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		found := typeErr.Value
		if unquoted, err := strconv.Unquote(found); err == nil {
			found = unquoted // the rest of the line from the offending value on
		}
		return &parseError{ReasonWrongType, fmt.Errorf("%q should be %s, not %s", typeErr.Field, goKind(typeErr.Type), jsonKind([]byte(found)))}
	}
	return &parseError{ReasonWrongType, err}
}

// jsonKind names the kind of the JSON value b starts with.
func jsonKind(b []byte) string {
	switch firstByte(b) {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "a number"
	}
	return "something else"
}

// goKind names the JSON kind a decoding target wants.
func goKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "something else"
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.Kind().String()
}

func firstByte(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}
