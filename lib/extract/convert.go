// Package extract pulls chat prompts out of instruction datasets: it reads
// each record in whichever common layout it comes (ShareGPT and
// Infinity-Instruct, OpenAI messages, Alpaca, MT-Bench, plain prompts,
// OpenAI batch requests), picks the turns to prompt with, and writes
// prompt records of the tokenmill record contract.
package extract

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// parseFlags decode without copying: strings and raw values alias the input
// line, which lives until the next record is read. Field names match
// exactly, as in the datasets.
const parseFlags = record.ParseFlags | json.DontCopyRawMessage | json.DontMatchCaseInsensitiveStructFields

// Turn modes, as named by --turns.
const (
	TurnsFirst      = "first"
	TurnsAllButLast = "all-but-last"
	TurnsEach       = "each"
)

// Reasons a record yields no prompt (rejects, exit 3).
const (
	ReasonMalformedJSON  = jsonl.ReasonMalformedJSON
	ReasonNotObject      = jsonl.ReasonNotObject
	ReasonUnknownLayout  = "unknown_layout"
	ReasonNoUserTurn     = "no_user_turn"
	ReasonEmpty          = "empty"
	ReasonUnansweredTurn = "unanswered_turn"
	ReasonUnknownRole    = "unknown_role"
	ReasonNonText        = "non_text_content"
	ReasonBadID          = "bad_id"
)

// Reasons a good prompt is left out on purpose (counted, not rejects).
const (
	FilterLang     = "lang"
	FilterTooShort = "too_short"
	FilterTooLong  = "too_long"
)

// Options choose what Convert makes of a record.
type Options struct {
	Format   string   // FormatAuto or one format
	Turns    string   // TurnsFirst, TurnsAllButLast or TurnsEach
	IDPrefix string   // put before every id
	IDField  string   // the dataset's id field; "" tries id, question_id, custom_id
	Keep     []string // fields copied into meta
	Source   string   // the record's "source"
	MinChars int      // 0: no minimum
	MaxChars int      // 0: no maximum
	Lang     []string // langdetect values to keep; empty keeps all
}

// Candidate is what one prompt a record could give came to: the prompt
// record, or the reason it was rejected or filtered out.
type Candidate struct {
	Out      []byte // the prompt record (one JSON line), nil if none
	Reason   string // why there is no prompt
	Detail   string
	Filtered bool // Reason is a filter, not a reject
}

// message is one chat turn of the record being converted. content is a
// JSON string token; name and toolCalls are raw JSON or nil.
type message struct {
	role      string
	content   []byte
	name      []byte
	toolCalls []byte
}

// Extractor converts records one at a time, reusing its buffers. It is not
// safe for concurrent use.
type Extractor struct {
	opts      Options
	target    any                // *struct{fields; extra fields...}, decoded into
	f         *fields            // the fields part of target
	rawFields []*json.RawMessage // every field of target, reset per record
	keep      []*json.RawMessage // --keep fields, in order
	keepNames [][]byte           // their escaped names
	idField   *json.RawMessage   // --id-field, or nil
	prefix    []byte             // --id-prefix, escaped, without quotes
	source    []byte             // --source as a JSON string, or nil
	lang      map[string]bool

	format     string
	msgs       []message
	completion []byte // a completion prompt's token, instead of msgs
	tools      []byte
	turns      []turn
	parts      []part
	users      []int
	arena      []byte // tokens built for this record
	scratch    []byte
	out        []byte
	canon      []byte
	recMsgs    []record.Message
	cands      []Candidate
}

// NewExtractor checks opts and prepares an Extractor.
func NewExtractor(opts Options) (*Extractor, error) {
	if opts.Format == "" {
		opts.Format = FormatAuto
	}
	if opts.Turns == "" {
		opts.Turns = TurnsFirst
	}
	if opts.Format != FormatAuto && layoutFields[opts.Format] == "" {
		return nil, fmt.Errorf("unknown format %q (known: auto, %s)", opts.Format, strings.Join(Formats, ", "))
	}
	switch opts.Turns {
	case TurnsFirst, TurnsAllButLast, TurnsEach:
	default:
		return nil, fmt.Errorf("unknown --turns %q (known: first, all-but-last, each)", opts.Turns)
	}
	if opts.MaxChars > 0 && opts.MinChars > opts.MaxChars {
		return nil, fmt.Errorf("--min-chars %d is above --max-chars %d", opts.MinChars, opts.MaxChars)
	}
	x := &Extractor{opts: opts}
	names := append([]string(nil), opts.Keep...)
	if opts.IDField != "" {
		names = append(names, opts.IDField)
	}
	fieldOf := x.buildTarget(names)
	for _, k := range opts.Keep {
		x.keep = append(x.keep, fieldOf[k])
		x.keepNames = append(x.keepNames, json.AppendEscape(nil, k, 0))
	}
	if opts.IDField != "" {
		x.idField = fieldOf[opts.IDField]
	}
	if opts.IDPrefix != "" {
		esc := json.AppendEscape(nil, opts.IDPrefix, 0)
		x.prefix = esc[1 : len(esc)-1]
	}
	if opts.Source != "" {
		x.source = json.AppendEscape(nil, opts.Source, 0)
	}
	if len(opts.Lang) > 0 {
		x.lang = map[string]bool{}
		for _, l := range opts.Lang {
			x.lang[l] = true
		}
	}
	return x, nil
}

// buildTarget makes the struct records are decoded into: the fields every
// format reads, plus one raw field for each extra name (--keep, --id-field)
// that is not one of them, so a record is parsed once whatever is kept.
// It returns where each name's value lands.
func (x *Extractor) buildTarget(names []string) map[string]*json.RawMessage {
	base := reflect.TypeOf(fields{})
	baseIndex := map[string]int{}
	for i := 0; i < base.NumField(); i++ {
		baseIndex[strings.Split(base.Field(i).Tag.Get("json"), ",")[0]] = i
	}
	rawType := reflect.TypeOf(json.RawMessage(nil))
	structFields := []reflect.StructField{{Name: "Fields", Type: base, Anonymous: true}}
	extraIndex := map[string]int{}
	for _, name := range names {
		if _, ok := baseIndex[name]; ok {
			continue
		}
		if _, ok := extraIndex[name]; ok {
			continue
		}
		extraIndex[name] = len(structFields)
		structFields = append(structFields, reflect.StructField{
			Name: fmt.Sprintf("Extra%d", len(structFields)),
			Type: rawType,
			Tag:  reflect.StructTag("json:" + strconv.Quote(name)),
		})
	}
	v := reflect.New(reflect.StructOf(structFields))
	x.target = v.Interface()
	x.f = v.Elem().Field(0).Addr().Interface().(*fields)
	for i := 0; i < base.NumField(); i++ {
		x.rawFields = append(x.rawFields, v.Elem().Field(0).Field(i).Addr().Interface().(*json.RawMessage))
	}
	for i := 1; i < len(structFields); i++ {
		x.rawFields = append(x.rawFields, v.Elem().Field(i).Addr().Interface().(*json.RawMessage))
	}
	at := map[string]*json.RawMessage{}
	for _, name := range names {
		if i, ok := baseIndex[name]; ok {
			at[name] = x.rawFields[i]
		} else {
			at[name] = x.rawFields[base.NumField()+extraIndex[name]-1]
		}
	}
	return at
}

// Convert turns one input record into its candidates: one per prompt it
// could give (one, or one per user turn with --turns each), each either a
// prompt record or a reason. The result and the records in it are valid
// until the next call.
func (x *Extractor) Convert(data []byte) []Candidate {
	x.reset()
	if bad := x.parse(data); bad != nil {
		return x.rejectAll(bad)
	}
	format := x.opts.Format
	if format == FormatAuto {
		if format = detect(x.f); format == "" {
			return x.rejectAll(reject(ReasonUnknownLayout,
				"no field of a known layout (body, conversations, messages, instruction, turns, prompt, question, text)"))
		}
	} else if !has(format, x.f) {
		return x.rejectAll(reject(ReasonUnknownLayout, "no %s field, which --format %s reads", layoutFields[format], format))
	}
	x.format = format
	if bad := x.read(format, x.f); bad != nil {
		return x.rejectAll(bad)
	}
	id, bad := x.datasetID()
	if bad != nil {
		return x.rejectAll(bad)
	}
	if x.completion != nil {
		x.candidate(id, -1, 0)
		return x.cands
	}
	for i, m := range x.msgs {
		if m.role == roleUser {
			x.users = append(x.users, i)
		}
	}
	if len(x.users) == 0 {
		return x.rejectAll(reject(ReasonNoUserTurn, "none of the %d turns is from the user", len(x.msgs)))
	}
	switch x.opts.Turns {
	case TurnsFirst:
		x.candidate(id, 0, 0)
	case TurnsAllButLast:
		x.candidate(id, len(x.users)-1, 0)
	case TurnsEach:
		for n := range x.users {
			x.candidate(id, n, n+1)
		}
	}
	return x.cands
}

func (x *Extractor) reset() {
	for _, p := range x.rawFields {
		*p = nil
	}
	x.format = ""
	x.msgs = x.msgs[:0]
	x.completion = nil
	x.tools = nil
	x.users = x.users[:0]
	x.arena = x.arena[:0]
	x.out = x.out[:0]
	x.cands = x.cands[:0]
}

// parse decodes the record's top-level fields.
func (x *Extractor) parse(data []byte) *badRecord {
	b := bytes.TrimSpace(data)
	if len(b) == 0 || b[0] != '{' {
		if json.Valid(b) {
			return reject(ReasonNotObject, "the record is a JSON %s, not an object", jsonKind(b))
		}
		return reject(ReasonMalformedJSON, "not valid JSON")
	}
	rest, err := json.Parse(b, x.target, parseFlags)
	if err != nil {
		return reject(ReasonMalformedJSON, "%s", shortError(err))
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return reject(ReasonMalformedJSON, "trailing data after the JSON object")
	}
	return nil
}

func jsonKind(b []byte) string {
	switch b[0] {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// has reports whether a record has the field format reads.
func has(format string, f *fields) bool {
	switch format {
	case FormatBatch:
		return present(f.Body)
	case FormatShareGPT:
		return present(f.Conversation) || present(f.LMSYS)
	case FormatOpenAI:
		return present(f.Messages)
	case FormatAlpaca:
		return present(f.Instruction)
	case FormatMTBench:
		return present(f.Turns)
	case FormatPlain:
		return present(f.Prompt) || present(f.Question) || present(f.Text)
	}
	return false
}

func (x *Extractor) rejectAll(bad *badRecord) []Candidate {
	x.cands = append(x.cands, Candidate{Reason: bad.reason, Detail: bad.detail})
	return x.cands
}

// addMessage appends a turn (see add).
func (x *Extractor) addMessage(role string, content []byte) {
	x.add(message{role: role, content: content})
}

// add appends a turn; a system prompt with no text is dropped.
func (x *Extractor) add(m message) {
	if m.role == roleSystem && blankToken(m.content) {
		return
	}
	x.msgs = append(x.msgs, m)
}

// idKind says where a record's id comes from.
type idKind int

const (
	idContent idKind = iota // none in the dataset: a hash of the prompt
	idString
	idNumber
)

type datasetID struct {
	kind idKind
	tok  []byte // the string token or the integer's digits
}

// datasetID finds the record's own id: --id-field, or the first of id,
// question_id and custom_id that is set. A string or an integer is kept as
// it is; an empty string counts as no id; anything else is a bad_id.
func (x *Extractor) datasetID() (datasetID, *badRecord) {
	var raw []byte
	name := x.opts.IDField
	if x.idField != nil {
		raw = *x.idField
	} else {
		for _, c := range []struct {
			name string
			raw  []byte
		}{{"id", x.f.ID}, {"question_id", x.f.QuestionID}, {"custom_id", x.f.CustomID}} {
			if present(c.raw) {
				name, raw = c.name, c.raw
				break
			}
		}
	}
	switch {
	case !present(raw) || string(raw) == `""`:
		return datasetID{kind: idContent}, nil
	case isString(raw):
		return datasetID{kind: idString, tok: cleanToken(&x.arena, raw)}, nil
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		if _, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return datasetID{kind: idNumber, tok: raw}, nil
		}
	}
	return datasetID{}, reject(ReasonBadID, "%s %.40s is neither a string nor a 64-bit integer", name, raw)
}
