package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"

	"tokenmill/lib/record"
)

// Chat templates are rendered by github.com/ardanlabs/jinja, a Jinja
// engine written for the templates models ship. Of the Go engines it
// alone renders every reference case of both real templates exactly
// (Qwen3 and DeepSeek-V3, 4,835 each): its dictionaries keep their keys'
// order, so `tools | tojson` prints a tool's fields as the request gave
// them, with Python's json.dumps spacing, as transformers does; gonja v2
// rendered 4,084 of Qwen3's 4,835 (its tojson sorts keys and drops the
// spaces) and pongo2 does not parse namespace() or [::-1].

// Request is what a chat template renders, as a chat completion request
// carries it: the messages, the tools, whether to open the assistant's
// turn, and the template's keyword arguments (chat_template_kwargs:
// enable_thinking, reasoning_effort, any the template reads).
type Request struct {
	Messages            []byte // a JSON array of messages
	Tools               []byte // a JSON array of tools, or empty
	AddGenerationPrompt bool
	Kwargs              []byte // a JSON object, or empty
}

// TemplateError is a template that raised for one conversation
// (raise_exception, or an operation its values do not allow): that
// record fails, the run goes on.
type TemplateError struct{ Message string }

func (e *TemplateError) Error() string { return "chat template: " + e.Message }

// ReasonTemplateError is the reject and error reason of a record its
// chat template raised for.
const ReasonTemplateError = "template_error"

// raised marks an error raise_exception raised, so that Render can tell a
// template's own refusal from a feature the engine lacks.
type raised struct{ msg string }

func (r raised) Error() string { return r.msg }

var raiseException = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), raised{"raise_exception called without a message"}
	}
	if args[0].IsString() {
		return jinja.Undefined(), raised{args[0].AsString()}
	}
	return jinja.Undefined(), raised{args[0].String()}
})

// template is a compiled chat template and what it is rendered with.
type template struct {
	source  string
	hash    string
	tmpl    *jinja.Template
	toolUse *jinja.Template // a named "tool_use" template, for requests with tools
	bos     string
	eos     string
}

func compileTemplate(name, source string) (*jinja.Template, error) {
	if name != "" {
		name += " "
	}
	t, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat template %sdoes not compile (or uses syntax not supported): %v", name, err)
	}
	if missing := unsupported(source); len(missing) > 0 {
		return nil, fmt.Errorf("chat template %suses what is not supported: %s", name, strings.Join(missing, ", "))
	}
	return t, nil
}

// The filters, tests and methods the engine has (its README and
// builtins); a template naming another is refused when loaded, not when a
// record first reaches that line.
var (
	knownFilters = words(`abs batch capitalize count d default dictsort e escape first float from_json fromjson
		indent int items join last length list lower map max min reject rejectattr replace reverse round safe select
		selectattr sort string sum title tojson trim unique upper wordcount`)
	knownTests = words(`boolean callable defined eq equalto even false float ge greaterthan gt in integer
		iterable le lessthan lower lt mapping ne none number odd sameas sequence string true undefined upper`)
	knownMethods = words(`append capitalize count endswith find format get insert items keys lower lstrip pop
		replace rstrip split startswith strip title update upper values`)
)

func words(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// unsupported lists the filters, tests and methods a template's code
// names that the engine lacks: a scan of the text between {{ }} and
// {% %}, string literals skipped.
func unsupported(source string) []string {
	var missing []string
	seen := map[string]bool{}
	note := func(kind, name string, known map[string]bool) {
		if !known[name] && !seen[kind+name] {
			seen[kind+name] = true
			missing = append(missing, fmt.Sprintf("%s %q", kind, name))
		}
	}
	for rest := source; ; {
		open := strings.IndexAny(rest, "{")
		if open < 0 || open+1 >= len(rest) {
			break
		}
		closer := map[byte]string{'{': "}}", '%': "%}"}[rest[open+1]]
		if closer == "" {
			rest = rest[open+1:]
			continue
		}
		code, after := scanCode(rest[open+2:], closer)
		rest = after
		toks := codeTokens(code)
		for i, tok := range toks {
			next := func(k int) string {
				if i+k < len(toks) {
					return toks[i+k]
				}
				return ""
			}
			switch {
			case tok == "|" && isIdent(next(1)):
				note("filter", next(1), knownFilters)
			case tok == "is" && next(1) == "not" && isIdent(next(2)):
				note("test", next(2), knownTests)
			case tok == "is" && isIdent(next(1)) && next(1) != "not":
				note("test", next(1), knownTests)
			case tok == "." && isIdent(next(1)) && next(2) == "(":
				note("method", next(1), knownMethods)
			}
		}
	}
	return missing
}

// scanCode returns the code up to closer, string literals blanked, and
// the text after it.
func scanCode(s, closer string) (string, string) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			b.WriteString(`""`)
			i = j
		case strings.HasPrefix(s[i:], closer):
			return b.String(), s[i+len(closer):]
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), ""
}

// codeTokens splits template code into identifiers and single
// punctuation characters.
func codeTokens(code string) []string {
	var toks []string
	for i := 0; i < len(code); {
		c := code[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '-' && (i == 0 || i == len(code)-1):
			i++
		case isIdentByte(c):
			j := i
			for j < len(code) && (isIdentByte(code[j]) || code[j] >= '0' && code[j] <= '9') {
				j++
			}
			toks = append(toks, code[i:j])
			i = j
		default:
			toks = append(toks, code[i:i+1])
			i++
		}
	}
	return toks
}

func isIdentByte(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isIdent(s string) bool { return s != "" && isIdentByte(s[0]) }

// render renders r; the variables a request sets (messages, tools,
// add_generation_prompt, the kwargs) are the ones transformers'
// apply_chat_template passes, with bos_token and eos_token from the
// tokenizer's configuration.
func (t *template) render(r Request) (string, error) {
	vars := map[string]jinja.Value{
		"bos_token":       jinja.NewString(t.bos),
		"eos_token":       jinja.NewString(t.eos),
		"raise_exception": raiseException,
	}
	if len(r.Kwargs) > 0 {
		kw, err := jsonValue(r.Kwargs)
		if err != nil {
			return "", fmt.Errorf("chat_template_kwargs: %w", err)
		}
		if !kw.IsDict() {
			return "", errors.New("chat_template_kwargs: not a JSON object")
		}
		d := kw.AsDict()
		for _, k := range d.Keys {
			vars[k], _ = d.Get(k)
		}
	}
	msgs, err := jsonValue(r.Messages)
	if err != nil {
		return "", fmt.Errorf("messages: %w", err)
	}
	if !msgs.IsList() {
		return "", errors.New("messages: not a JSON array")
	}
	vars["messages"] = msgs
	tmpl := t.tmpl
	if len(r.Tools) > 0 && string(r.Tools) != "null" {
		tools, err := jsonValue(r.Tools)
		if err != nil {
			return "", fmt.Errorf("tools: %w", err)
		}
		if !tools.IsList() {
			return "", errors.New("tools: not a JSON array")
		}
		vars["tools"] = tools
		if t.toolUse != nil {
			tmpl = t.toolUse
		}
	}
	vars["add_generation_prompt"] = jinja.NewBool(r.AddGenerationPrompt)
	out, err := tmpl.RenderValues(vars)
	if err != nil {
		var re raised
		if errors.As(err, &re) {
			return "", &TemplateError{Message: re.msg}
		}
		return "", &TemplateError{Message: err.Error()}
	}
	return out, nil
}

// jsonValue turns raw JSON into the template's values, objects keeping
// their keys' order (tojson prints them in it, as Python does).
func jsonValue(raw []byte) (jinja.Value, error) {
	if err := record.CheckDepth(raw); err != nil {
		return jinja.Undefined(), err
	}
	i := record.SkipSpace(raw, 0)
	end := record.ScanValue(raw, i, 1)
	if end < 0 || record.SkipSpace(raw, end) != len(raw) {
		return jinja.Undefined(), errors.New("invalid JSON (or nested deeper than a record may be)")
	}
	v, _ := parseValue(raw, i)
	return v, nil
}

// parseValue reads the JSON value at b[i], whose grammar jsonValue has
// checked, and returns the index past it.
func parseValue(b []byte, i int) (jinja.Value, int) {
	switch b[i] {
	case '{':
		d := jinja.NewDict()
		dict := d.AsDict()
		i = record.SkipSpace(b, i+1)
		for b[i] != '}' {
			end, _ := record.ScanString(b, i)
			key := string(record.AppendUnquoted(nil, b[i:end]))
			v, next := parseValue(b, record.SkipSpace(b, record.SkipSpace(b, end)+1))
			dict.Set(key, v)
			if i = record.SkipSpace(b, next); b[i] == ',' {
				i = record.SkipSpace(b, i+1)
			}
		}
		return d, i + 1
	case '[':
		var items []jinja.Value
		i = record.SkipSpace(b, i+1)
		for b[i] != ']' {
			v, next := parseValue(b, i)
			items = append(items, v)
			if i = record.SkipSpace(b, next); b[i] == ',' {
				i = record.SkipSpace(b, i+1)
			}
		}
		return jinja.NewList(items), i + 1
	case '"':
		end, _ := record.ScanString(b, i)
		return jinja.NewString(string(record.AppendUnquoted(nil, b[i:end]))), end
	case 't':
		return jinja.NewBool(true), i + 4
	case 'f':
		return jinja.NewBool(false), i + 5
	case 'n':
		return jinja.None(), i + 4
	}
	end := record.ScanNumber(b, i)
	num := string(b[i:end])
	if !strings.ContainsAny(num, ".eE") {
		if n, err := strconv.ParseInt(num, 10, 64); err == nil {
			return jinja.NewInt(n), end
		}
	}
	// Python's json reads a larger integer as an int and prints it back
	// as written; a float is the nearest this engine has.
	f, _ := strconv.ParseFloat(num, 64)
	return jinja.NewFloat(f), end
}
