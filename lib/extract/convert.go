// Package extract pulls chat prompts out of instruction datasets: it reads
// each record in whichever common layout it comes (ShareGPT and
// Infinity-Instruct, OpenAI messages, Alpaca and Dolly, MT-Bench,
// OpenAssistant trees and messages, plain prompts, preference pairs,
// OpenAI batch requests), picks the turns to prompt with, and writes
// prompt records of the tokenmill record contract.
package extract

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

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
	TurnsAll        = "all" // the whole conversation, for regeneration
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
	ReasonBadTools       = "bad_tools"
	ReasonBadToolCalls   = "bad_tool_calls"
	ReasonBadWeight      = "bad_weight"
	ReasonToolBenchQuery = "toolbench_query"
	ReasonMultimodal     = "multimodal"
	ReasonEmbeddings     = "embeddings_request"
	ReasonModerations    = "moderations_request"

	ReasonPreferenceMismatch = "preference_mismatch"
	ReasonMissingParent      = "missing_parent"
	ReasonMaxHeld            = "max_held"
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
	MaxHeld  int      // messages of a flat OpenAssistant export held at once; 0: DefaultMaxHeld
}

// Candidate is what one prompt a record could give came to: the prompt
// record, or the reason it was rejected or filtered out. A message of a
// flat OpenAssistant export is held until its tree is complete, so its
// candidate comes with a later record (or from Flush), and From names it.
type Candidate struct {
	Out      []byte // the prompt record (one JSON line), nil if none
	Reason   string // why there is no prompt
	Detail   string
	Filtered bool           // Reason is a filter, not a reject
	NoPrompt bool           // a held message that ends no prompt in this --turns mode
	From     *jsonl.RawLine // the input this came from, when not the record just converted
	// QuestionList: Out is a whole conversation that is a list of
	// questions with no answers, marked "question_list": true.
	QuestionList bool
}

// message is one chat turn of the record being converted. content is a
// JSON string token; name, toolCallID and toolCalls are raw JSON or nil.
type message struct {
	role       string
	content    []byte
	name       []byte
	toolCalls  []byte
	toolCallID []byte
	reasoning  []byte // reasoning_content token, nil if none
	weight     []byte // an assistant turn's training weight as a JSON number, nil if none
	callsBuilt bool   // toolCalls were built here, from calls given one by one
}

// Extractor converts records one at a time, reusing its buffers. It is not
// safe for concurrent use. Its 42 fields are mostly those buffers, kept
// from record to record so that converting one allocates nothing once
// they have grown; each is used by one step of the conversion.
type Extractor struct {
	opts      Options
	target    any                // *struct{fields; extra fields...}, decoded into
	f         *fields            // the fields part of target
	rawFields []*json.RawMessage // every field of target, reset per record
	table     fieldTable         // the fields of target by name, for the scanner
	validLine []byte             // the record just parsed, when its strings are valid UTF-8
	preList   []byte             // the record's turn list the scanner read into preTurns, or nil
	preTurns  []turn
	keep      []*json.RawMessage // --keep fields, in order
	keepNames [][]byte           // their escaped names
	idField   *json.RawMessage   // --id-field, or nil
	prefix    []byte             // --id-prefix, escaped, without quotes
	source    []byte             // --source as a JSON string, or nil
	lang      map[string]bool

	format     string
	msgs       []message
	completion []byte // a completion prompt's token, instead of msgs
	tools      []byte // in canonical form; nil when there are none
	toolsCache map[string][]byte
	settings   toolSettings // the record's tool_choice and parallel_tool_calls, as given
	toolChoice []byte       // as written with the tools; nil for none
	parallel   []byte
	turns      []turn
	rawParts   []json.RawMessage
	texts      [][]byte
	users      []int
	arena      []byte // tokens built for this record
	scratch    []byte
	// scratchArena holds tokens made while a value is being built in arena.
	scratchArena  []byte
	partReasoning [][]byte // the reasoning parts of the content just read
	partCalls     [][]byte // its tool_call parts
	callVals      [][]byte
	pending       [][]byte // ids of generated calls the next tool turns answer
	out           []byte
	canon         []byte
	recMsgs       []record.Message
	cands         []Candidate

	nodes   []oaNode // the OpenAssistant tree being read
	oaState []uint8
	oaBelow []bool
	oaLeaf  []bool
	held    heldTree // a flat export's messages waiting for their tree
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
	case TurnsFirst, TurnsAllButLast, TurnsEach, TurnsAll:
	default:
		return nil, fmt.Errorf("unknown --turns %q (known: first, all-but-last, each, all)", opts.Turns)
	}
	if opts.MaxChars > 0 && opts.MinChars > opts.MaxChars {
		return nil, fmt.Errorf("--min-chars %d is above --max-chars %d", opts.MinChars, opts.MaxChars)
	}
	if opts.MaxHeld <= 0 {
		opts.MaxHeld = DefaultMaxHeld
	}
	x := &Extractor{opts: opts, toolsCache: map[string][]byte{}}
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
	all := map[string]*json.RawMessage{}
	for i := 0; i < base.NumField(); i++ {
		all[strings.Split(base.Field(i).Tag.Get("json"), ",")[0]] = x.rawFields[i]
	}
	for name, i := range extraIndex {
		all[name] = x.rawFields[base.NumField()+i-1]
	}
	x.table = newFieldTable(all)
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
// could give (one, or one per user turn with --turns each, or one per
// prompter message an OpenAssistant tree gives), each either a prompt
// record or a reason. The result and the records in it are valid until
// the next call.
func (x *Extractor) Convert(data []byte) []Candidate {
	return x.ConvertRecord(jsonl.RawLine{Data: data})
}

// ConvertRecord is Convert for a record with its place in the input,
// which a held message keeps for its reject. The candidates may include
// those of messages held before (see Candidate.From); call Flush after
// the last record for the rest.
func (x *Extractor) ConvertRecord(rec jsonl.RawLine) []Candidate {
	cands, _ := x.convert(rec, false)
	return cands
}

// convertFree is ConvertRecord for an Extractor that holds nothing and
// converts records out of order: a message of a flat OpenAssistant export
// is not converted but answered with ordered, for an Extractor that sees
// every record in order to take.
func (x *Extractor) convertFree(rec jsonl.RawLine) (cands []Candidate, ordered bool) {
	return x.convert(rec, true)
}

// holding reports whether messages of a flat export wait for their tree.
func (x *Extractor) holding() bool { return len(x.held.nodes) > 0 }

func (x *Extractor) convert(rec jsonl.RawLine, free bool) ([]Candidate, bool) {
	x.reset()
	if len(x.held.nodes) > 0 && rec.File != x.held.file {
		x.flushHeld() // a tree does not go on in another file
	}
	if bad := x.parse(rec.Data, rec.Built); bad != nil {
		return x.rejectAll(bad), false
	}
	format := x.opts.Format
	if format == FormatAuto {
		if format = detect(x.f); format == "" {
			return x.rejectAll(reject(ReasonUnknownLayout,
				"no field of a known layout (body, conversations, messages, instruction, turns, prompt, question, query, problem, text, data, chosen/rejected, preferred_output, message_id)")), false
		}
	} else if !has(format, x.f) {
		return x.rejectAll(reject(ReasonUnknownLayout, "no %s field, which --format %s reads", layoutFields[format], format)), false
	}
	x.format = format
	if bad := x.mediaFields(); bad != nil {
		return x.rejectAll(bad), false
	}
	if bad := x.aliases(); bad != nil {
		return x.rejectAll(bad), false
	}
	flat := format == FormatOAsst && !(present(x.f.Prompt) && x.f.Prompt[0] == '{')
	if flat {
		if free {
			return nil, true
		}
		x.hold(rec)
		return x.cands, false
	}
	if len(x.held.nodes) > 0 {
		// Another kind of record ends the held tree; its prompts come first.
		x.flushHeld()
		x.parse(rec.Data, rec.Built) // it parsed a moment ago
		x.format = format
		x.aliases() // as a moment ago: no reject
	}
	if format == FormatOAsst {
		if bad := x.readTree(x.f.Prompt); bad != nil {
			return x.rejectAll(bad), false
		}
		x.oaCandidates(false)
		return x.cands, false
	}
	if bad := x.read(format, x.f); bad != nil {
		return x.rejectAll(bad), false
	}
	x.joinSystem()
	if x.opts.Turns == TurnsAll && format != FormatPreference && present(x.f.Chosen) {
		if bad := x.addChosen(x.f.Chosen); bad != nil {
			return x.rejectAll(bad), false
		}
	}
	if bad := x.applyToolSettings(); bad != nil {
		return x.rejectAll(bad), false
	}
	if bad := x.placeholders(); bad != nil {
		return x.rejectAll(bad), false
	}
	id, bad := x.datasetID()
	if bad != nil {
		return x.rejectAll(bad), false
	}
	if x.completion != nil {
		x.candidate(id, -1, 0)
		return x.cands, false
	}
	for i, m := range x.msgs {
		if m.role == roleUser {
			x.users = append(x.users, i)
		}
	}
	if len(x.users) == 0 {
		return x.rejectAll(reject(ReasonNoUserTurn, "none of the %d turns is from the user", len(x.msgs))), false
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
	case TurnsAll:
		x.conversation(id)
	}
	return x.cands, false
}

// reset readies the Extractor for a new call.
func (x *Extractor) reset() {
	x.resetRecord()
	x.arena = x.arena[:0]
	x.scratchArena = x.scratchArena[:0]
	x.out = x.out[:0]
	x.cands = x.cands[:0]
}

// resetRecord forgets the record read last, keeping the candidates made
// so far in this call.
func (x *Extractor) resetRecord() {
	for _, p := range x.rawFields {
		*p = nil
	}
	x.format = ""
	x.msgs = x.msgs[:0]
	x.completion = nil
	x.tools = nil
	x.settings = toolSettings{}
	x.toolChoice, x.parallel = nil, nil
	x.users = x.users[:0]
}

// parse decodes the record's top-level fields: by the scanner, or where
// it leaves the record to the decoder, by json.Parse. built says the
// reader wrote the record (valid JSON and UTF-8), so that the scanner only
// finds where its strings end.
func (x *Extractor) parse(data []byte, built bool) *badRecord {
	b := bytes.TrimSpace(data)
	x.validLine, x.preList = nil, nil
	if len(b) == 0 || b[0] != '{' {
		if !json.Valid(b) {
			return reject(ReasonMalformedJSON, "not valid JSON")
		}
		if isMessageList(b) {
			// A line that is a list of messages (xtuner's openai
			// format) is a conversation, read as messages.
			x.f.Messages = b
			return nil
		}
		return reject(ReasonNotObject, "the record is %s, not an object", kindOf(b))
	}
	s := newScanner(built)
	if end := s.scanFields(b, &x.table, &x.preTurns, &x.preList); end >= 0 {
		if s.validUTF8(b[:end]) {
			x.validLine = b
		}
		if len(bytes.TrimSpace(b[end:])) != 0 {
			return reject(ReasonMalformedJSON, "trailing data after the JSON object")
		}
		return nil
	}
	for _, p := range x.rawFields {
		*p = nil // what the scanner took before it stopped
	}
	x.preList = nil
	rest, err := json.Parse(b, x.target, parseFlags)
	if err != nil {
		return reject(ReasonMalformedJSON, "%s", jsonProblem(err))
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return reject(ReasonMalformedJSON, "trailing data after the JSON object")
	}
	return nil
}

// isMessageList reports whether a record that is a JSON list is a list of
// messages: its first element a turn with a role (or a speaker).
func isMessageList(b []byte) bool {
	var first []struct {
		Role json.RawMessage `json:"role"`
		From json.RawMessage `json:"from"`
	}
	if b[0] != '[' {
		return false
	}
	if _, err := json.Parse(b, &first, parseFlags); err != nil || len(first) == 0 {
		return false
	}
	return present(first[0].Role) || present(first[0].From)
}

// has reports whether a record has the field format reads.
func has(format string, f *fields) bool {
	switch format {
	case FormatOAsst:
		return f.IsOAsst()
	case FormatPreference:
		return f.IsPreference()
	case FormatBatch:
		return present(f.Body)
	case FormatShareGPT:
		return present(f.Conversation) || present(f.LMSYS) || f.IsUltraChat()
	case FormatOpenAI:
		return present(f.Messages)
	case FormatAlpaca:
		return present(f.Instruction)
	case FormatMTBench:
		return present(f.Turns)
	case FormatPlain:
		return f.IsPlain()
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
// it is; null, an empty string or one of white space only counts as no id
// (the next field is tried); anything else is a bad_id, shown as written.
func (x *Extractor) datasetID() (datasetID, *badRecord) {
	var raw []byte
	name := x.opts.IDField
	if x.idField != nil {
		if raw = *x.idField; noID(raw) {
			raw = nil
		}
	} else {
		for _, c := range []struct {
			name string
			raw  []byte
		}{{"id", x.f.ID}, {"question_id", x.f.QuestionID}, {"custom_id", x.f.CustomID}} {
			if !noID(c.raw) {
				name, raw = c.name, c.raw
				break
			}
		}
	}
	switch {
	case raw == nil:
		return datasetID{kind: idContent}, nil
	case isString(raw):
		return datasetID{kind: idString, tok: x.clean(&x.arena, raw)}, nil
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		if _, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return datasetID{kind: idNumber, tok: raw}, nil
		}
	}
	return datasetID{}, reject(ReasonBadID, "%s %s is neither a string nor a 64-bit integer", name, rawExcerpt(raw))
}

// noID is true for an id that counts as none: absent, null, or a string
// of nothing but white space.
func noID(raw []byte) bool {
	if !present(raw) {
		return true
	}
	if !isString(raw) {
		return false
	}
	return len(bytes.TrimSpace(tokenText(nil, raw))) == 0
}

// rawExcerpt shows a value as the input wrote it, cut at 100 bytes (on a
// character boundary) with "..." after.
func rawExcerpt(raw []byte) string {
	const max = 100
	if len(raw) <= max {
		return string(raw)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(raw[cut]) {
		cut--
	}
	return string(raw[:cut]) + "..."
}
