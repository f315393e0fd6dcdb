package compose

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"
	"github.com/zeebo/xxh3"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/quality"
	"tokenmill/lib/record"
)

// Reject reasons of compose, beside the reader's and jsonl's shared ones.
const (
	ReasonMissingKey = "missing_key" // the record has no value for a --by key
	ReasonBadKey     = "bad_key"     // the key's value is an object, not a group name
	ReasonNoID       = "no_id"       // no id, and no prompt to derive one from
	ReasonBadID      = "bad_id"      // an id that is neither a string nor an integer
)

// rejection is why a record cannot be placed.
type rejection struct {
	reason, detail string
}

// keyKind is how a key reads its value from a record.
type keyKind int

const (
	keyPath     keyKind = iota // a field, by its dotted path
	keyLang                    // the language of the first user turn
	keyLength                  // the prompt's length in characters, bucketed
	keyTools                   // whether the record offers or calls tools
	keyThinking                // whether the answer thinks (or the prompt asks it to)
	keyArm                     // the sampling mixture's arm (output.arm, error.arm)
	keyAll                     // no key: every record is in the one group "all"
)

// builtinKeys are the names --by takes besides a field's path.
var builtinKeys = map[string]keyKind{"lang": keyLang, "language": keyLang, "length": keyLength, "tools": keyTools, "thinking": keyThinking, "arm": keyArm}

// key is one grouping: what --by names.
type key struct {
	name    string
	kind    keyKind
	path    []string // keyPath
	buckets []int    // keyLength: upper bounds in characters, ascending
	names   []string // keyLength: the buckets' group names
}

// parseKey reads a --by value. A name starting with "." is always a path
// (".lang" is a top-level field named lang).
func parseKey(s string, buckets []int) (*key, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("an empty key: give source, lang, length, tools, thinking, arm or a field's path such as meta.langdetect")
	}
	k := &key{name: s}
	if kind, ok := builtinKeys[s]; ok {
		k.kind = kind
		if kind == keyLength {
			k.buckets, k.names = buckets, bucketNames(buckets)
		}
		return k, nil
	}
	p := strings.TrimPrefix(s, ".")
	for _, part := range strings.Split(p, ".") {
		if part == "" {
			return nil, fmt.Errorf("key %q: a path's parts are field names separated by dots, e.g. meta.langdetect", s)
		}
		k.path = append(k.path, part)
	}
	return k, nil
}

// bucketNames names the length buckets: 0-255, 256-1023, ..., 16384+.
func bucketNames(bounds []int) []string {
	names := make([]string, 0, len(bounds)+1)
	lo := 0
	for _, b := range bounds {
		names = append(names, fmt.Sprintf("%d-%d", lo, b-1))
		lo = b
	}
	return append(names, fmt.Sprintf("%d+", lo))
}

// parseBuckets reads --length-buckets: ascending positive bounds.
func parseBuckets(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 || (len(out) > 0 && n <= out[len(out)-1]) {
			return nil, fmt.Errorf("--length-buckets %q: want ascending positive character counts, e.g. 256,1024,4096,16384", s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--length-buckets %q names no bound", s)
	}
	return out, nil
}

// fields are the raw top-level values of one record that compose reads
// (nil: absent).
type fields struct {
	data                                        []byte
	id, sample, source, messages, prompt, convs []byte
	tools, output, errorV, params               []byte
	// extra are the top-level values path keys start from, by name.
	extra map[string][]byte
}

func (f *fields) set(k string, v []byte, want map[string]bool) {
	switch k {
	case "id":
		f.id = v
	case "sample":
		f.sample = v
	case "source":
		f.source = v
	case "messages":
		f.messages = v
	case "prompt":
		f.prompt = v
	case "conversations":
		f.convs = v
	case "tools":
		f.tools = v
	case "output":
		f.output = v
	case "error":
		f.errorV = v
	case "params":
		f.params = v
	}
	if want[k] {
		if f.extra == nil {
			f.extra = map[string][]byte{}
		}
		f.extra[k] = v
	}
}

// readFields splits a record into its top-level fields, checking it is
// one JSON object: one checking scan for the usual line, the full
// checks (which say why) for the rest. want names further top-level
// fields to keep.
func readFields(data []byte, want map[string]bool, f *fields) *rejection {
	*f = fields{data: data}
	var o record.Object
	o.Scan(data)
	for k, v, ok := o.Next(); ok; k, v, ok = o.Next() {
		f.set(string(k), v, want)
	}
	if o.Valid() {
		return nil
	}
	*f = fields{data: data}
	if !json.Valid(data) {
		return &rejection{jsonl.ReasonMalformedJSON, "not valid JSON"}
	}
	if b := bytes.TrimSpace(data); len(b) == 0 || b[0] != '{' {
		return &rejection{jsonl.ReasonNotObject, "a record must be a JSON object"}
	}
	// A valid object the scan left: an escaped key, deep nesting.
	if err := record.EachField(data, func(k string, v []byte) error { f.set(k, v, want); return nil }); err != nil {
		return &rejection{jsonl.ReasonMalformedJSON, err.Error()}
	}
	return nil
}

// present tells a value that is there and not null.
func present(v []byte) bool { return len(v) > 0 && string(v) != "null" }

// field is the raw value of name in the object obj (nil: absent, or obj
// is no object).
func field(obj []byte, name string) []byte {
	if len(obj) == 0 || obj[0] != '{' {
		return nil
	}
	var found []byte
	record.EachField(obj, func(k string, v []byte) error {
		if k == name {
			found = v
		}
		return nil
	})
	return found
}

// each calls fn on every element of the array arr (nothing when arr is
// not an array); fn returns false to stop.
func each(arr []byte, fn func(v []byte) bool) {
	if len(arr) == 0 || arr[0] != '[' {
		return
	}
	var a record.Array
	a.Walk(arr)
	for v, ok := a.Next(); ok; v, ok = a.Next() {
		if !fn(v) {
			return
		}
	}
}

// hashKey is the text a record's place in its group is drawn from: its
// id (integers as their decimal text), with its sample when above 0, or
// for a record without an id the content id extract would give its
// prompt, so it is drawn as it would be with that id.
func hashKey(f *fields) (string, *rejection) {
	var id record.ID
	if present(f.id) {
		if err := id.UnmarshalJSON(f.id); err != nil {
			return "", &rejection{ReasonBadID, err.Error()}
		}
	}
	text := id.Text
	if id.IsZero() {
		var p record.Prompt
		if err := record.Decode(f.data, &p); err != nil || !p.HasPrompt() {
			return "", &rejection{ReasonNoID, "no id, and no messages or prompt to derive one from"}
		}
		text = record.ContentID(p.AppendCanonical(nil))
	}
	if s := sampleOf(f); s > 0 {
		text += "\x00" + strconv.Itoa(s)
	}
	return text, nil
}

// sampleOf is the record's sample: "sample" (merge's rows, a to-do list's
// prompts), else output.sample or error.sample; 0 when none.
func sampleOf(f *fields) int {
	for _, v := range [][]byte{f.sample, field(f.output, "sample"), field(f.errorV, "sample")} {
		if present(v) {
			if n, err := strconv.Atoi(string(v)); err == nil {
				return n
			}
		}
	}
	return 0
}

// rank is the record's draw: the keyed hash of its hash key. A group
// takes its records lowest draw first, so the same seed takes the same
// records, and a record added to the input displaces at most one.
func rank(text string, seed uint64) uint32 {
	return uint32(xxh3.HashStringSeed(text, seed^rankSalt) >> 32)
}

// rankSalt keeps compose's draws apart from other uses of xxh3 on ids
// (shard's placement).
const rankSalt = 0x636f6d706f7365 // "compose"

// value is the record's group under k, or why it has none. buf is
// scratch for unquoting.
func (k *key) value(f *fields, buf []byte) (string, []byte, *rejection) {
	switch k.kind {
	case keyAll:
		return "all", buf, nil
	case keyLang:
		text, buf := firstUserText(f, buf)
		if text == "" {
			return "", buf, &rejection{ReasonMissingKey, "lang: no user turn or prompt text to tell the language of"}
		}
		return quality.Language(text, &quality.DefaultLang), buf, nil
	case keyLength:
		n := promptChars(f)
		for i, b := range k.buckets {
			if n < b {
				return k.names[i], buf, nil
			}
		}
		return k.names[len(k.names)-1], buf, nil
	case keyTools:
		if hasTools(f) {
			return "yes", buf, nil
		}
		return "no", buf, nil
	case keyThinking:
		return thinking(f, buf)
	case keyArm:
		v := field(f.output, "arm")
		if !present(v) {
			v = field(f.errorV, "arm")
		}
		return groupName(k.name, v, buf)
	}
	var v []byte
	if k.path[0] == "source" && len(k.path) == 1 {
		v = f.source
	} else {
		v = f.extra[k.path[0]]
	}
	for _, p := range k.path[1:] {
		if !present(v) {
			break
		}
		if v[0] == '[' { // a list of objects: the first one's
			each(v, func(e []byte) bool { v = e; return false })
		}
		v = field(v, p)
	}
	return groupName(k.name, v, buf)
}

// groupName is the group a raw value names: a string's text, a number's
// or boolean's JSON text, a list's first element; null, "" and [] name
// none.
func groupName(key string, v, buf []byte) (string, []byte, *rejection) {
	if len(v) > 0 && v[0] == '[' {
		var first []byte
		each(v, func(e []byte) bool { first = e; return false })
		v = first
	}
	switch {
	case !present(v) || string(v) == `""`:
		return "", buf, &rejection{ReasonMissingKey, fmt.Sprintf("no %s", key)}
	case v[0] == '{':
		return "", buf, &rejection{ReasonBadKey, fmt.Sprintf("%s is an object, not a group name: name one of its fields (%s.FIELD)", key, key)}
	case v[0] == '"':
		var s string
		s, buf = record.Unquote(v, buf)
		if strings.TrimSpace(s) == "" {
			return "", buf, &rejection{ReasonMissingKey, fmt.Sprintf("%s is blank", key)}
		}
		return strings.Clone(s), buf, nil
	}
	return string(v), buf, nil
}

// turn is one chat turn's role and raw content.
type turn struct {
	role    string // as chat roles: ShareGPT's speakers mapped
	speaker string // as the record names it
	content []byte
	extra   []byte // the turn object itself
}

// turns calls fn on the record's chat turns, from "messages" (role,
// content) or "conversations" (role and content, or ShareGPT's from and
// value).
func turns(f *fields, fn func(t turn) bool) {
	arr := f.messages
	if !present(arr) {
		arr = f.convs
	}
	each(arr, func(m []byte) bool {
		var t turn
		t.extra = m
		record.EachField(m, func(k string, v []byte) error {
			switch k {
			case "role", "from":
				if len(v) > 1 && v[0] == '"' {
					t.speaker = string(v[1 : len(v)-1])
					t.role = roleName(t.speaker)
				}
			case "content", "value":
				t.content = v
			}
			return nil
		})
		return fn(t)
	})
}

// roleName maps ShareGPT's speakers to chat roles.
func roleName(r string) string {
	switch r {
	case "human":
		return "user"
	case "gpt":
		return "assistant"
	case "function_call":
		return "assistant"
	case "observation", "function":
		return "tool"
	}
	return r
}

// textSample is how much of a turn's literal is unquoted to tell its
// language: the identifier reads 512 bytes of prose, and a few code
// blocks may come first.
const textSample = 8 << 10

// firstUserText is the text of the record's first user turn, or of its
// "prompt": the question, whose language is the record's.
func firstUserText(f *fields, buf []byte) (string, []byte) {
	var raw []byte
	turns(f, func(t turn) bool {
		if t.role == "user" {
			raw = t.content
			return false
		}
		return true
	})
	if raw == nil {
		raw = f.prompt
	}
	if len(raw) > 0 && raw[0] == '[' { // content parts: the first text part
		var part []byte
		each(raw, func(p []byte) bool {
			if v := field(p, "text"); present(v) {
				part = v
				return false
			}
			if v := field(p, "value"); present(v) {
				part = v
				return false
			}
			return true
		})
		raw = part
	}
	if len(raw) < 2 || raw[0] != '"' {
		return "", buf
	}
	raw = literalPrefix(raw, textSample)
	s, buf := record.Unquote(raw, buf)
	return s, buf
}

// literalPrefix is the string literal q cut to about n bytes of its body
// at an escape's boundary, quotes kept.
func literalPrefix(q []byte, n int) []byte {
	if len(q) <= n+2 {
		return q
	}
	body := q[1 : len(q)-1]
	i := 0
	for i < n {
		if body[i] == '\\' {
			if i+1 < len(body) && body[i+1] == 'u' {
				i += 6
			} else {
				i += 2
			}
			continue
		}
		i++
	}
	i = min(i, len(body))
	out := make([]byte, 0, i+2)
	out = append(append(append(out, '"'), body[:i]...), '"')
	return out
}

// promptChars is the length in characters of the record's prompt: every
// turn before its last assistant turn (all of them in a prompt record or
// a generation record, whose answer is in "output"), or "prompt".
func promptChars(f *fields) int {
	var lens []int
	last := -1
	turns(f, func(t turn) bool {
		if t.role == "assistant" {
			last = len(lens)
		}
		lens = append(lens, contentChars(t.content))
		return true
	})
	if present(f.output) || last < 0 {
		last = len(lens)
	}
	n := 0
	for _, l := range lens[:last] {
		n += l
	}
	if len(lens) == 0 && present(f.prompt) {
		n = contentChars(f.prompt)
	}
	return n
}

// contentChars counts the characters of a content value: a string, or
// the text of its parts.
func contentChars(v []byte) int {
	switch {
	case len(v) >= 2 && v[0] == '"':
		return quality.CharsJSON(v[1 : len(v)-1])
	case len(v) > 0 && v[0] == '[':
		n := 0
		each(v, func(p []byte) bool {
			for _, name := range []string{"text", "value"} {
				if s := field(p, name); len(s) >= 2 && s[0] == '"' {
					n += quality.CharsJSON(s[1 : len(s)-1])
					break
				}
			}
			return true
		})
		return n
	}
	return 0
}

// nonEmpty tells a value that holds something: not absent, null, "", []
// or {}, nor a string holding one of them (SpecForge's rows carry their
// tools as a JSON string, "[]" for none).
func nonEmpty(v []byte) bool {
	if !present(v) {
		return false
	}
	switch string(bytes.Join(bytes.Fields(v), nil)) {
	case `""`, "[]", "{}", `"[]"`, `"{}"`, `"null"`:
		return false
	}
	return true
}

// hasTools tells a record that offers the model tools ("tools") or whose
// turns or answer call one.
func hasTools(f *fields) bool {
	if nonEmpty(f.tools) || nonEmpty(field(f.output, "tool_calls")) {
		return true
	}
	found := false
	turns(f, func(t turn) bool {
		found = t.role == "tool" || t.speaker == "function_call" || nonEmpty(field(t.extra, "tool_calls")) || nonEmpty(field(t.extra, "tool_call_id"))
		return !found
	})
	if !found {
		each(field(f.output, "messages"), func(m []byte) bool {
			found = nonEmpty(field(m, "tool_calls"))
			return !found
		})
	}
	return found
}

// thinking is "on" for a record whose answer thinks (separated reasoning,
// or a <think> block), "off" for one whose answer does not; a prompt
// record is on or off as its params ask (chat_template_kwargs
// enable_thinking), and has no value otherwise.
func thinking(f *fields, buf []byte) (string, []byte, *rejection) {
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	if present(f.output) {
		if nonEmpty(field(f.output, "reasoning")) || thinkBlock(field(f.output, "text")) {
			return "on", buf, nil
		}
		on := false
		each(field(f.output, "messages"), func(m []byte) bool {
			on = nonEmpty(field(m, "reasoning_content")) || nonEmpty(field(m, "reasoning"))
			return !on
		})
		return onOff(on), buf, nil
	}
	answered, on := false, false
	turns(f, func(t turn) bool {
		if t.role == "assistant" {
			answered = true
			on = nonEmpty(field(t.extra, "reasoning_content")) || nonEmpty(field(t.extra, "reasoning")) || thinkBlock(t.content)
		}
		return !on
	})
	if answered {
		return onOff(on), buf, nil
	}
	switch v := field(field(f.params, "chat_template_kwargs"), "enable_thinking"); string(v) {
	case "true":
		return "on", buf, nil
	case "false":
		return "off", buf, nil
	}
	return "", buf, &rejection{ReasonMissingKey, "thinking: a prompt without params.chat_template_kwargs.enable_thinking, and no answer to tell from"}
}

// thinkBlock tells an answer text that holds a <think> block.
func thinkBlock(v []byte) bool {
	return len(v) > 0 && v[0] == '"' && bytes.Contains(v, []byte("<think>"))
}
