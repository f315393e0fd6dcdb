package dedup

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"tokenmill/lib/jsonl"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		in                    string
		ws, lower, aggressive string
	}{
		{"plain", "plain", "plain", "plain"},
		{"  Hello,\t\tWorld!\n\n", "Hello, World!", "hello, world!", "hello world"},
		{"a\u00a0b\u3000c\u2028d", "a b c d", "a b c d", "a b c d"}, // no-break, ideographic, line separator
		{"ÄÖÜ straße İ", "ÄÖÜ straße İ", "äöü straße i", "äöü straße i"},
		{"Ｈｅｌｌｏ，世界！", "Ｈｅｌｌｏ，世界！", "ｈｅｌｌｏ，世界！", "hello世界"},
		{"ﬁnal ½ ㎏", "ﬁnal ½ ㎏", "ﬁnal ½ ㎏", "final 1⁄2 kg"},
		{"cost $5 + tax = 😀 <ok>", "cost $5 + tax = 😀 <ok>", "cost $5 + tax = 😀 <ok>", "cost $5 + tax = 😀 <ok>"},
		{"don't - stop...", "don't - stop...", "don't - stop...", "dont stop"},
		{"«quoted» “text” 「中文」。", "«quoted» “text” 「中文」。", "«quoted» “text” 「中文」。", "quoted text 中文"},
		{"bad\xffutf8 \xc3", "bad\xffutf8 \xc3", "bad\xffutf8 \xc3", "bad\xffutf8 \xc3"},
		{" \t\n ", "", "", ""},
		{"", "", "", ""},
	}
	for _, tt := range tests {
		for mode, want := range map[Mode]string{None: tt.in, WS: tt.ws, Lower: tt.lower, Aggressive: tt.aggressive} {
			got, _ := mode.Append([]byte("prefix:"), tt.in, nil)
			if string(got) != "prefix:"+want {
				t.Errorf("%s(%q) = %q, want %q", mode, tt.in, got[len("prefix:"):], want)
			}
		}
	}
}

// The normalizer copies this range without looking runes up.
func TestCJKRangeIsCaselessAndPlain(t *testing.T) {
	for r := rune(cjkFirst); r <= cjkLast; r++ {
		if unicode.IsSpace(r) || unicode.IsPunct(r) || unicode.ToLower(r) != r || unicode.ToUpper(r) != r {
			t.Fatalf("%U has case, is white space or punctuation", r)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, name := range modeNames {
		m, err := ParseMode(name)
		if err != nil || m.String() != name {
			t.Errorf("ParseMode(%q) = %v, %v", name, m, err)
		}
	}
	if _, err := ParseMode("LOWER"); err == nil {
		t.Error("ParseMode accepted LOWER")
	}
}

// keyOf is the key of line, or the reject reason prefixed with "!".
func keyOf(t testing.TB, spec string, mode Mode, line string) string {
	k, err := NewKeyer(spec, mode)
	if err != nil {
		t.Fatal(err)
	}
	key, err := k.Key([]byte(line))
	if err != nil {
		var ke *KeyError
		if !errors.As(err, &ke) {
			t.Fatalf("Key(%s) returned %T %v", line, err, err)
		}
		return "!" + ke.Reason
	}
	return string(key)
}

func TestKeySameAndDifferent(t *testing.T) {
	tests := keySameAndDifferentCases()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, kb := keyOf(t, tt.spec, tt.mode, tt.a), keyOf(t, tt.spec, tt.mode, tt.b)
			if strings.HasPrefix(ka, "!") || strings.HasPrefix(kb, "!") {
				t.Fatalf("rejected: %s / %s", ka, kb)
			}
			if (ka == kb) != tt.same {
				t.Errorf("keys %q and %q: same=%v, want %v", ka, kb, ka == kb, tt.same)
			}
		})
	}
}

// keySameCase is one case of TestKeySameAndDifferent.
type keySameCase struct {
	name string
	spec string
	mode Mode
	a, b string
	same bool
}

// keySameAndDifferentCases are TestKeySameAndDifferent's cases.
func keySameAndDifferentCases() []keySameCase {
	user := func(content string) string {
		return `{"id":"x","messages":[{"role":"user","content":` + content + `}]}`
	}
	withTools := func(tools string) string {
		return `{"id":"x","messages":[{"role":"user","content":"hi"}],"tools":` + tools + `}`
	}
	toolResult := func(id string) string {
		return `{"messages":[{"role":"user","content":"q"},{"role":"tool","content":"r","tool_call_id":` + id + `}]}`
	}
	return []keySameCase{
		{"other fields do not matter", "prompt", None, user(`"hi"`), `{"messages":[{"role":"user","content":"hi"}],"id":7,"meta":{"x":[1]}}`, true},
		{"escapes decode", "prompt", None, user(`"中文 \"q\"\n"`), user(`"\u4e2d\u6587 \u0022q\u0022\u000a"`), true},
		{"surrogate pairs decode", "prompt", None, user(`"😀"`), user(`"\ud83d\ude00"`), true},
		{"escaped slash", "prompt", None, user(`"a/b"`), user(`"a\/b"`), true},
		// Invalid UTF-8 is U+FFFD (record.Unquote's rule), as every decoder
		// and so the server sees it.
		{"invalid UTF-8 is U+FFFD", "prompt", None, user("\"a\xffb\""), user(`"a\ufffdb"`), true},
		{"invalid bytes compare alike", "prompt", None, user("\"a\xffb\""), user("\"a\xfeb\""), true},
		{"each invalid byte counts", "prompt", None, user("\"a\xff\xffb\""), user("\"a\xffb\""), false},
		{"invalid UTF-8 in an escaped content", "prompt", Lower, user("\"A\\n\xc3\""), user(`"a\n\ufffd"`), true},
		{"invalid UTF-8 in tool_call_id", "prompt", None, toolResult("\"c\xff\""), toolResult(`"c\ufffd"`), true},
		{"invalid UTF-8 in a field key", "id", None, "{\"id\":\"x\xff\"}", `{"id":"x\ufffd"}`, true},
		{"content differs", "prompt", None, user(`"hi"`), user(`"hi "`), false},
		{"role matters", "prompt", None, user(`"hi"`), `{"messages":[{"role":"system","content":"hi"}]}`, false},
		{"system turn matters", "prompt", None, user(`"hi"`), `{"messages":[{"role":"system","content":""},{"role":"user","content":"hi"}]}`, false},
		{"turns do not run together", "prompt", None,
			`{"messages":[{"role":"user","content":"ab"},{"role":"user","content":"c"}]}`,
			`{"messages":[{"role":"user","content":"a"},{"role":"user","content":"bc"}]}`, false},
		{"completion prompt", "prompt", None, `{"prompt":"hi"}`, `{"prompt":"hi","id":2}`, true},
		{"completion is not chat", "prompt", None, `{"prompt":"hi"}`, user(`"hi"`), false},
		{"ws collapses", "prompt", WS, user(`"  a \n\t b "`), user(`"a b"`), true},
		{"ws keeps case", "prompt", WS, user(`"A b"`), user(`"a b"`), false},
		{"ws on each turn", "prompt", WS,
			`{"messages":[{"role":"system","content":" s "},{"role":"user","content":"u\n"}]}`,
			`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}`, true},
		{"ws never merges turns", "prompt", WS,
			`{"messages":[{"role":"user","content":"a "},{"role":"user","content":"b"}]}`,
			`{"messages":[{"role":"user","content":"a"},{"role":"user","content":" b"}]}`, true},
		{"lower", "prompt", Lower, user(`"Hello  World"`), user(`"hello world"`), true},
		{"lower keeps punctuation", "prompt", Lower, user(`"hello!"`), user(`"hello"`), false},
		{"aggressive", "prompt", Aggressive, user(`"Ｈello, World!!"`), user(`"hello world"`), true},
		{"normalized completion", "prompt", Lower, `{"prompt":" X "}`, `{"prompt":"x"}`, true},
		{"id string", "id", None, `{"id":"7","a":1}`, `{"id":"7","a":2}`, true},
		{"id string vs number: one id", "id", None, `{"id":"7"}`, `{"id":7}`, true},
		{"other fields keep their type", "meta.n", None, `{"meta":{"n":"7"}}`, `{"meta":{"n":7}}`, false},
		{"id escapes", "id", None, `{"id":"é"}`, `{"id":"\u00e9"}`, true},
		{"nested path", "meta.source", None, `{"meta":{"source":"a","x":1}}`, `{"meta":{"x":2,"source":"a"}}`, true},
		{"object value order and spacing", "meta", None, `{"meta":{"a":1,"b":[1, 2]}}`, `{"meta": {"b":[1,2],"a":1}}`, true},
		{"object value differs", "meta", None, `{"meta":{"a":1}}`, `{"meta":{"a":2}}`, false},
		{"field normalized", "title", Lower, `{"title":"A  B"}`, `{"title":"a b"}`, true},

		// Tools are part of the prompt, compared in canonical form.
		{"tools differ", "prompt", None, withTools(`[{"type":"function","function":{"name":"a"}}]`), withTools(`[{"type":"function","function":{"name":"b"}}]`), false},
		{"tools or none", "prompt", None, user(`"hi"`), withTools(`[{"type":"function","function":{"name":"a"}}]`), false},
		{"tools as a JSON string, spaced, keys in other order", "prompt", None,
			withTools(`[{"type":"function","function":{"name":"a","parameters":{"type":"object"}}}]`),
			withTools(`"[ {\"function\": {\"parameters\": {\"type\": \"object\"}, \"name\": \"a\"}, \"type\": \"function\"} ]"`), true},
		{"a bare function is an OpenAI tool", "prompt", None,
			withTools(`[{"type":"function","function":{"name":"a","description":"d"}}]`), withTools(`"[{\"name\": \"a\", \"description\": \"d\"}]"`), true},
		{"numbers in tools keep their spelling", "prompt", None, withTools(`[{"name":"a","x":1.0}]`), withTools(`[{"name":"a","x":1}]`), false},
		{"tools are not normalized", "prompt", Lower, withTools(`[{"name":"A"}]`), withTools(`[{"name":"a"}]`), false},
		{"empty list of tools is none", "prompt", None, user(`"hi"`), withTools(`[]`), true},
		{"empty string of tools is none", "prompt", None, user(`"hi"`), withTools(`""`), true},
		{"empty list in a string is none", "prompt", None, user(`"hi"`), withTools(`"[]"`), true},
		{"spaced empty list in a string is none", "prompt", None, user(`"hi"`), withTools(`" [ ] "`), true},
		{"null tools are none", "prompt", None, user(`"hi"`), withTools(`null`), true},
		{"empty object of tools is none", "prompt", None, user(`"hi"`), withTools(`{}`), true},
		{"tools of a completion prompt", "prompt", None, `{"prompt":"hi"}`, `{"prompt":"hi","tools":[{"name":"a"}]}`, false},

		// The top-level system prompt takes the system slot (record.UsesSystem).
		{"top-level system is a system turn", "prompt", None, `{"system":"S","messages":[{"role":"user","content":"hi"}]}`,
			`{"messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"}]}`, true},
		{"a system turn wins over the top-level system", "prompt", None, `{"system":"S","messages":[{"role":"system","content":"T"},{"role":"user","content":"hi"}]}`,
			`{"messages":[{"role":"system","content":"T"},{"role":"user","content":"hi"}]}`, true},
		{"a blank top-level system is none", "prompt", None, `{"system":" \n","messages":[{"role":"user","content":"hi"}]}`, user(`"hi"`), true},
		{"the top-level system is normalized like the turns", "prompt", WS, `{"system":" S ","messages":[{"role":"user","content":"hi"}]}`,
			`{"messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"}]}`, true},
		{"a completion prompt has no system slot", "prompt", None, `{"system":"S","prompt":"hi"}`, `{"prompt":"hi"}`, true},

		// Which call a tool result answers is part of the prompt.
		{"tool_call_id matters", "prompt", None, toolResult(`"c1"`), toolResult(`"c2"`), false},
		{"tool_call_id null is none", "prompt", None, toolResult(`null`), `{"messages":[{"role":"user","content":"q"},{"role":"tool","content":"r"}]}`, true},
		{"tool_calls null is none", "prompt", None, `{"messages":[{"role":"user","content":"q","tool_calls":null}]}`, `{"messages":[{"role":"user","content":"q"}]}`, true},
	}
}

func TestKeyRejects(t *testing.T) {
	tests := []struct {
		spec, line, reason string
	}{
		{"prompt", `{"messages":[{"role":"user","content":"hi"}]`, jsonl.ReasonMalformedJSON},
		{"prompt", `not json`, jsonl.ReasonMalformedJSON},
		{"prompt", `{"messages":[{"role":"user","content":"hi"}]} trailing`, jsonl.ReasonMalformedJSON},
		{"prompt", `["a","b"]`, jsonl.ReasonNotObject},
		{"prompt", `"just a string"`, jsonl.ReasonNotObject},
		{"prompt", `{"id":"x"}`, ReasonNoKey},
		{"prompt", `{"messages":[]}`, ReasonNoKey},
		{"prompt", `{"messages":null}`, ReasonNoKey},
		{"prompt", `{"messages":"hi"}`, ReasonBadPrompt},
		{"prompt", `{"messages":[{"role":"user","content":5}]}`, ReasonBadPrompt},
		{"prompt", `{"prompt":["a"]}`, ReasonBadPrompt},
		{"prompt", `{"messages":[{"role":"user","content":"hi"}],"tools":5}`, ReasonBadPrompt},
		{"prompt", `{"messages":[{"role":"user","content":"hi"}],"tools":"get_weather"}`, ReasonBadPrompt},
		{"prompt", `{"messages":[{"role":"user","content":"hi"}],"tools":"[{\"name\": "}`, ReasonBadPrompt},
		{"prompt", `{"messages":[{"role":"user","content":"hi"}],"system":7}`, ReasonBadPrompt},
		{"prompt", `{"messages":[{"role":"tool","content":"r","tool_call_id":3}]}`, ReasonBadPrompt},
		{"id", `{"idx":"x"}`, ReasonNoKey},
		{"id", `{"id":null}`, ReasonNoKey},
		{"id", `{"id":"x"`, jsonl.ReasonMalformedJSON},
		{"id", `[{"id":"x"}]`, jsonl.ReasonNotObject},
		{"meta.source", `{"meta":"flat"}`, ReasonNoKey},
		{"meta.source", `{"meta":{}}`, ReasonNoKey},
	}
	for _, tt := range tests {
		if got := keyOf(t, tt.spec, None, tt.line); got != "!"+tt.reason {
			t.Errorf("--key %s %s: got %q, want reject %s", tt.spec, tt.line, got, tt.reason)
		}
	}
	if _, err := NewKeyer("meta..x", None); err == nil {
		t.Error("an empty path element was accepted")
	}
}

// FuzzKey feeds arbitrary records and contents through key extraction and
// normalization: nothing may panic, and the keys must obey the modes.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"plain", "  Hello,\t\tWorld!\n", "a\u00a0b", "Ｈｅｌｌｏ，世界！", "ﬁnal ½", "bad\xffutf8", "İ", "\\u0041\""} {
		f.Add([]byte(`{"messages":[{"role":"user","content":"x"}]}`), s)
	}
	f.Add([]byte(`{"id":1,"prompt":"\u00e9"}`), "")
	f.Add([]byte(`{"meta":{"source":[1,{"b":2,"a":1}]}}`), "")
	f.Add([]byte(`[{"messages":[]}`), "")
	f.Add([]byte(`{"system":"S","messages":[{"role":"tool","content":"r","tool_call_id":"c"}],"tools":"[{\"name\":\"a\",\"x\":1e3}]"}`), "")
	f.Fuzz(func(t *testing.T, line []byte, content string) {
		for _, spec := range []string{"prompt", "id", "meta.source"} {
			for m := None; m <= Aggressive; m++ {
				k, _ := NewKeyer(spec, m)
				k.Key(line) // must not panic, whatever the line
			}
		}
		if !utf8.ValidString(content) {
			return
		}
		for m := None; m <= Aggressive; m++ {
			once, _ := m.Append(nil, content, nil)
			if m != Aggressive {
				// Aggressive lowercases after NFKC, and a lowercased
				// letter need not be NFKC-normal, so only the others
				// are idempotent.
				twice, _ := m.Append(nil, string(once), nil)
				if !bytes.Equal(once, twice) {
					t.Fatalf("%s is not idempotent on %q: %q then %q", m, content, once, twice)
				}
			}
			if m >= WS {
				padded, _ := m.Append(nil, " \t"+strings.ReplaceAll(content, " ", "  ")+"\n", nil)
				if !bytes.Equal(once, padded) {
					t.Fatalf("%s: white space changed the key of %q: %q vs %q", m, content, once, padded)
				}
				if len(once) > 0 && (once[0] == ' ' || once[len(once)-1] == ' ' || bytes.Contains(once, []byte("  "))) {
					t.Fatalf("%s(%q) = %q has untrimmed or doubled spaces", m, content, once)
				}
			}
			if m >= Lower {
				upper, _ := m.Append(nil, asciiUpper(content), nil)
				if !bytes.Equal(once, upper) {
					t.Fatalf("%s: ASCII case changed the key of %q", m, content)
				}
			}
			// The same content inside a record gives the same key whether
			// it is escaped or not.
			enc := jsonString(content)
			a := keyOf(t, "prompt", m, `{"messages":[{"role":"user","content":`+enc+`}]}`)
			b := keyOf(t, "prompt", m, `{"messages":[{"role":"user","content":`+asciiEscaped(content)+`}]}`)
			if a != b {
				t.Fatalf("%s: escaping changed the key of %q", m, content)
			}
		}
	})
}

func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
}

// jsonString escapes only what JSON requires.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// asciiEscaped writes every non-ASCII character as a \u escape.
func asciiEscaped(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	const hex = "0123456789abcdef"
	u := func(r rune) {
		b.WriteString(`\u`)
		for shift := 12; shift >= 0; shift -= 4 {
			b.WriteByte(hex[r>>shift&15])
		}
	}
	for _, r := range s {
		switch {
		case r >= 0x10000:
			r -= 0x10000
			u(0xD800 + r>>10)
			u(0xDC00 + r&0x3FF)
		case r >= 0x80 || r < 0x20 || r == '"' || r == '\\':
			u(r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
