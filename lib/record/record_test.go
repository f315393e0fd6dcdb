package record

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/segmentio/encoding/json"
)

func TestIDRoundTrip(t *testing.T) {
	tests := []struct {
		in      string
		text    string
		numeric bool
		out     string
	}{
		{`"identity_0"`, "identity_0", false, `"identity_0"`},
		{`12345678901`, "12345678901", true, `12345678901`},
		{`-7`, "-7", true, `-7`},
		{`"12"`, "12", false, `"12"`},
		{`null`, "", false, `""`},
	}
	for _, tt := range tests {
		var id ID
		if err := json.Unmarshal([]byte(tt.in), &id); err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if id.Text != tt.text || id.Numeric != tt.numeric {
			t.Errorf("%s: got %+v", tt.in, id)
		}
		b, _ := json.Marshal(id)
		if string(b) != tt.out {
			t.Errorf("%s: marshals to %s, want %s", tt.in, b, tt.out)
		}
	}
	for _, bad := range []string{`1.5`, `true`, `{}`, `[1]`} {
		var id ID
		if err := json.Unmarshal([]byte(bad), &id); err == nil {
			t.Errorf("%s: accepted as an id", bad)
		}
	}
}

func TestAppendField(t *testing.T) {
	tests := []struct{ raw, want string }{
		{`{"id":1}`, `{"id":1,"output":{"x":1}}`},
		{`{}`, `{"output":{"x":1}}`},
		{` { "id" : 1 , "u":{"k":[1]} } `, `{"id" : 1 , "u":{"k":[1]},"output":{"x":1}}`},
	}
	for _, tt := range tests {
		got, err := AppendField(nil, []byte(tt.raw), "output", []byte(`{"x":1}`))
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: got %s %v, want %s", tt.raw, got, err, tt.want)
		}
		if !json.Valid(got) {
			t.Errorf("%s: result is not valid JSON", tt.raw)
		}
	}
	for _, bad := range []string{`[1]`, `"s"`, ``, `{`} {
		if _, err := AppendField(nil, []byte(bad), "k", []byte(`1`)); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestWithoutFields(t *testing.T) {
	raw := `{"id":"a","output":{"text":"}\"{"},"user":{"output":1},"error":{"status":500},"z":[1,{"a":"]"}]}`
	got, err := WithoutFields(nil, []byte(raw), "output", "error")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"a","user":{"output":1},"z":[1,{"a":"]"}]}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	// Keys are compared unescaped.
	got, _ = WithoutFields(nil, []byte(`{"\u006futput":1,"k":2}`), "output")
	if string(got) != `{"k":2}` {
		t.Fatalf("escaped key not matched: %s", got)
	}
	v, err := FieldValue([]byte(raw), "error")
	if err != nil || string(v) != `{"status":500}` {
		t.Fatalf("FieldValue: %s %v", v, err)
	}
	for _, bad := range []string{`{"a":}`, `{"a" 1}`, `{"a":"x}`, `{"a":1,}`, `{a:1}`} {
		if _, err := WithoutFields(nil, []byte(bad), "a"); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestCanonicalAndContentID(t *testing.T) {
	var a, b, c Prompt
	Decode([]byte(`{"messages":[{"role":"user","content":"hi"}]}`), &a)
	Decode([]byte(`{"id":9,"messages":[{"role":"user","content":"hi"}],"meta":{"x":1}}`), &b)
	Decode([]byte(`{"messages":[{"role":"system","content":"hi"}]}`), &c)
	ka, kb, kc := a.AppendCanonical(nil), b.AppendCanonical(nil), c.AppendCanonical(nil)
	if string(ka) != string(kb) {
		t.Error("the same prompt with other fields must have the same canonical form")
	}
	if string(ka) == string(kc) {
		t.Error("a different role must change the canonical form")
	}
	// Role/content boundaries cannot be forged by content.
	var d, e Prompt
	Decode([]byte(`{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`), &d)
	Decode([]byte(`{"messages":[{"role":"user","content":"a\u0000\u0004user\u0001b"}]}`), &e)
	if string(d.AppendCanonical(nil)) == string(e.AppendCanonical(nil)) {
		t.Error("content imitating a message boundary collides with two messages")
	}
	id := ContentID(ka)
	if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Fatalf("content id %q is not 32 hex digits", id)
	}
	if ContentID(ka) != id {
		t.Fatal("content id not stable")
	}
	var p Prompt
	Decode([]byte(`{"prompt":"hi"}`), &p)
	if ContentID(p.AppendCanonical(nil)) == id {
		t.Error("completion prompt and chat prompt share an id")
	}
}

func TestDecodeRejectsTrailingData(t *testing.T) {
	var p Prompt
	if err := Decode([]byte(`{"id":1} {"id":2}`), &p); err == nil {
		t.Fatal("trailing data accepted")
	}
	if err := Decode([]byte(`{"id":1}  `), &p); err != nil {
		t.Fatal(err)
	}
}

func FuzzEachField(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,{"c":"}"}],"d":"\""}`, `{}`, `{"a":}`, `{"a":1,}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := WithoutFields(nil, raw, "a")
		if err != nil {
			return
		}
		// Whatever was accepted as a valid object stays valid without a field.
		if json.Valid(raw) && !json.Valid(out) {
			t.Fatalf("valid %s became invalid %s", raw, out)
		}
		// On a valid object, every field found is the one a decoder finds.
		var fields map[string]json.RawMessage
		if !utf8.Valid(raw) || json.Unmarshal(raw, &fields) != nil { // a decoder rewrites invalid UTF-8
			return
		}
		last := map[string]string{} // a repeated key: the decoder keeps the last
		EachField(raw, func(key string, value []byte) error {
			last[key] = string(value)
			return nil
		})
		for k, v := range fields {
			got, ok := last[k]
			if !ok {
				t.Fatalf("field %q missed in %s", k, raw)
			}
			if got != string(bytes.TrimSpace(v)) {
				t.Fatalf("field %q: found %s, decoder has %s", k, got, v)
			}
		}
	})
}
