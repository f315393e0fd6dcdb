package compose

import (
	"strings"
	"testing"
)

// TestKeys reads each key's group from records of every shape compose
// is given: prompts, generations, merge's training rows.
func TestKeys(t *testing.T) {
	buckets := []int{256, 1024, 4096, 16384}
	long := strings.Repeat("x", 300)
	en := "Explain in a few sentences why the sky is blue during the day and red at sunset, for a child."
	tests := []struct {
		key, record, want, reject string
	}{
		{"source", `{"id":1,"messages":[{"role":"user","content":"hi"}],"source":"ii-0625"}`, "ii-0625", ""},
		{"source", `{"id":1,"messages":[{"role":"user","content":"hi"}]}`, "", ReasonMissingKey},
		{"source", `{"id":1,"source":""}`, "", ReasonMissingKey},
		{"meta.langdetect", `{"id":1,"meta":{"langdetect":"zh-cn"}}`, "zh-cn", ""},
		{"meta.label.cate_ability_en", `{"id":1,"meta":{"label":{"cate_ability_en":["Mathematical Ability","Logic"]}}}`, "Mathematical Ability", ""},
		{"meta.label.cate_ability_en", `{"id":1,"meta":{"label":{"cate_ability_en":[]}}}`, "", ReasonMissingKey},
		{"meta.label", `{"id":1,"meta":{"label":{"a":["b"]}}}`, "", ReasonBadKey},
		{"meta.reward", `{"id":1,"meta":{"reward":0.5}}`, "0.5", ""},
		{".lang", `{"id":1,"lang":"fr"}`, "fr", ""},
		{"category", `{"id":1,"category":"wr\u0069ting"}`, "writing", ""},
		{"lang", `{"id":1,"messages":[{"role":"system","content":"Sois bref."},{"role":"user","content":"` + en + `"}]}`, "en", ""},
		{"lang", `{"id":1,"messages":[{"role":"user","content":"请用三句话解释为什么天空是蓝色的。"}]}`, "zh", ""},
		{"lang", `{"id":1,"conversations":[{"from":"human","value":"日本の首都はどこですか？"},{"from":"gpt","value":"東京です。"}]}`, "ja", ""},
		{"lang", `{"id":1,"messages":[{"role":"user","content":[{"type":"text","text":"` + en + `"}]}]}`, "en", ""},
		{"lang", `{"id":1,"prompt":"Hi"}`, "und", ""},
		{"lang", `{"id":1,"messages":[{"role":"assistant","content":"only an answer"}]}`, "", ReasonMissingKey},
		{"length", `{"id":1,"messages":[{"role":"user","content":"` + long + `"}]}`, "256-1023", ""},
		{"length", `{"id":1,"prompt":"short"}`, "0-255", ""},
		// A training row's answer is not its prompt.
		{"length", `{"id":1,"messages":[{"role":"user","content":"short"},{"role":"assistant","content":"` + long + `"}]}`, "0-255", ""},
		// Escapes count as the character they stand for.
		{"length", `{"id":1,"prompt":"` + strings.Repeat(`\u00e9`, 255) + `"}`, "0-255", ""},
		{"length", `{"id":1,"prompt":"` + strings.Repeat(`\u00e9`, 256) + `"}`, "256-1023", ""},
		{"tools", `{"id":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`, "yes", ""},
		{"tools", `{"id":1,"messages":[{"role":"user","content":"hi"}],"tools":[]}`, "no", ""},
		{"tools", `{"id":1,"messages":[{"role":"user","content":"hi"}],"output":{"text":"","tool_calls":[{"id":"c"}]}}`, "yes", ""},
		{"tools", `{"id":1,"conversations":[{"from":"human","value":"hi"},{"from":"function_call","value":"{}"}]}`, "yes", ""},
		{"thinking", `{"id":1,"messages":[],"output":{"text":"4","reasoning":"2+2"}}`, "on", ""},
		{"thinking", `{"id":1,"messages":[],"output":{"text":"4"}}`, "off", ""},
		{"thinking", `{"id":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"<think>hm</think>4"}]}`, "on", ""},
		{"thinking", `{"id":1,"messages":[{"role":"user","content":"q"}],"params":{"chat_template_kwargs":{"enable_thinking":false}}}`, "off", ""},
		{"thinking", `{"id":1,"messages":[{"role":"user","content":"q"}]}`, "", ReasonMissingKey},
		{"arm", `{"id":1,"output":{"text":"a","arm":"think"}}`, "think", ""},
		{"arm", `{"id":1,"error":{"status":500,"arm":"fast"}}`, "fast", ""},
		{"arm", `{"id":1,"output":{"text":"a"}}`, "", ReasonMissingKey},
	}
	for _, tt := range tests {
		k, err := parseKey(tt.key, buckets)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		if k.kind == keyPath {
			want[k.path[0]] = true
		}
		var f fields
		if rej := readFields([]byte(tt.record), want, &f); rej != nil {
			t.Fatalf("%s: %v", tt.record, rej)
		}
		got, _, rej := k.value(&f, nil)
		switch {
		case tt.reject != "" && (rej == nil || rej.reason != tt.reject):
			t.Errorf("--by %s of %.80s: %q, %v; want reject %s", tt.key, tt.record, got, rej, tt.reject)
		case tt.reject == "" && (rej != nil || got != tt.want):
			t.Errorf("--by %s of %.80s: %q, %v; want %q", tt.key, tt.record, got, rej, tt.want)
		}
	}
}

// TestHashKey: the draw's key is the id (an integer as its text, a
// sample above 0 with it), or the content id extract gives.
func TestHashKey(t *testing.T) {
	for _, tt := range []struct{ record, want, reject string }{
		{`{"id":"a7","prompt":"x"}`, "a7", ""},
		{`{"id":7,"prompt":"x"}`, "7", ""},
		{`{"id":"7","sample":0,"prompt":"x"}`, "7", ""},
		{`{"id":"7","output":{"sample":2}}`, "7\x002", ""},
		{`{"id":"7","sample":3,"messages":[]}`, "7\x003", ""},
		{`{"messages":[{"role":"user","content":"hi"}]}`, "", ""},
		{`{"id":{"a":1},"prompt":"x"}`, "", ReasonBadID},
		{`{"source":"s"}`, "", ReasonNoID},
	} {
		var f fields
		if rej := readFields([]byte(tt.record), nil, &f); rej != nil {
			t.Fatal(rej)
		}
		got, rej := hashKey(&f)
		switch {
		case tt.reject != "":
			if rej == nil || rej.reason != tt.reject {
				t.Errorf("%s: %q %v, want reject %s", tt.record, got, rej, tt.reject)
			}
		case rej != nil:
			t.Errorf("%s: %v", tt.record, rej)
		case tt.want == "" && len(got) != 32:
			t.Errorf("%s: %q, want a content id", tt.record, got)
		case tt.want != "" && got != tt.want:
			t.Errorf("%s: %q, want %q", tt.record, got, tt.want)
		}
	}
}

// TestReadFieldsChecks: what is not one JSON object is rejected with the
// reason every stage gives; an escaped key is still read.
func TestReadFieldsChecks(t *testing.T) {
	for _, tt := range []struct{ line, reason string }{
		{`{"id": 1`, "malformed_json"},
		{`[1]`, "not_an_object"},
		{`"x"`, "not_an_object"},
	} {
		var f fields
		if rej := readFields([]byte(tt.line), nil, &f); rej == nil || rej.reason != tt.reason {
			t.Errorf("%s: %v, want %s", tt.line, rej, tt.reason)
		}
	}
	var f fields
	if rej := readFields([]byte(`{"id":1,"sour\u0063e":"x"}`), nil, &f); rej != nil || string(f.source) != `"x"` {
		t.Errorf("escaped key: %v, source %s", rej, f.source)
	}
}
