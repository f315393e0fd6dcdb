package record

import (
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"
)

func ptr[T any](v T) *T { return &v }

// The hash is the settings', whatever the spelling of their objects; the
// family leaves out exactly what may differ within one training file.
func TestSettingsHash(t *testing.T) {
	base := Settings{API: "chat", Model: "M", MaxTokens: ptr(300), Temperature: ptr(0.7), Samples: 1,
		ExtraBody: json.RawMessage(`{"chat_template_kwargs":{"enable_thinking":false},"top_k":20}`)}
	line := func(s Settings) SettingsLine {
		t.Helper()
		l, err := s.Line()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	b := line(base)
	if !isHash(b.Hash) || !isHash(b.Family) || b.Hash == b.Family {
		t.Fatalf("hashes %q %q", b.Hash, b.Family)
	}
	cases := []struct {
		name         string
		change       func(s *Settings)
		sameSettings bool
		sameFamily   bool
	}{
		{"nothing", func(s *Settings) {}, true, true},
		{"extra body spelled otherwise", func(s *Settings) {
			s.ExtraBody, _ = Canonical([]byte(`{ "top_k" : 20, "chat_template_kwargs": {"enable_thinking": false} }`))
		}, true, true},
		{"max_tokens", func(s *Settings) { s.MaxTokens = ptr(8) }, false, false},
		{"max_tokens unset", func(s *Settings) { s.MaxTokens = nil }, false, false},
		{"temperature", func(s *Settings) { s.Temperature = ptr(0.6) }, false, false},
		{"top_p", func(s *Settings) { s.TopP = ptr(0.9) }, false, false},
		{"stop", func(s *Settings) { s.Stop = []string{"END"} }, false, false},
		{"thinking on", func(s *Settings) {
			s.ExtraBody, _ = Canonical([]byte(`{"chat_template_kwargs":{"enable_thinking":true},"top_k":20}`))
		}, false, false},
		{"model", func(s *Settings) { s.Model = "N" }, false, false},
		{"api", func(s *Settings) { s.API = "completions" }, false, false},
		{"mix", func(s *Settings) { s.Mix = "0123456789abcdef" }, false, false},
		{"regenerate", func(s *Settings) { s.Regenerate = true }, false, false},
		{"seed", func(s *Settings) { s.Seed = ptr(int64(1)) }, false, true},
		{"samples", func(s *Settings) { s.Samples = 4 }, false, true},
		{"arm", func(s *Settings) { s.Arm, s.ArmParams = "think", json.RawMessage(`{"temperature":0.6}`) }, false, true},
		{"params", func(s *Settings) { s.Params = []string{"seed"} }, false, true},
		{"server", func(s *Settings) { s.Server, s.ServerVersion = "sglang", "0.5.4" }, false, true},
		{"token ids", func(s *Settings) { s.TokenIDs = true }, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := base
			c.change(&s)
			l := line(s)
			if (l.Hash == b.Hash) != c.sameSettings || (l.Family == b.Family) != c.sameFamily {
				t.Errorf("same settings %v, same family %v; want %v, %v", l.Hash == b.Hash, l.Family == b.Family, c.sameSettings, c.sameFamily)
			}
			if again := line(s); again.Hash != l.Hash || again.Family != l.Family {
				t.Errorf("the hash changed between two computations")
			}
		})
	}
}

// Differ names the first field that differs, with both values as a
// message shows them; the run's fields leave out the model, the family's
// the seed.
func TestSettingsDiffer(t *testing.T) {
	a := Settings{API: "chat", Model: "M", MaxTokens: ptr(300), Samples: 1}
	cases := []struct {
		name   string
		change func(s *Settings)
		fields []SettingsField
		want   string // "field was now", "" for none
	}{
		{"same", func(s *Settings) {}, RunFields, ""},
		{"max_tokens", func(s *Settings) { s.MaxTokens = ptr(8) }, RunFields, "max_tokens 300 8"},
		{"temperature set", func(s *Settings) { s.Temperature = ptr(0.6) }, RunFields, "temperature none 0.6"},
		{"stop", func(s *Settings) { s.Stop = []string{"a", "b"} }, RunFields, `stop none ["a","b"]`},
		{"seed", func(s *Settings) { s.Seed = ptr(int64(5)) }, RunFields, "seed none 5"},
		{"extra body", func(s *Settings) { s.ExtraBody = json.RawMessage(`{"x":1}`) }, RunFields, `extra_body none {"x":1}`},
		{"samples", func(s *Settings) { s.Samples = 2 }, RunFields, "samples 1 2"},
		{"token ids", func(s *Settings) { s.TokenIDs = true }, RunFields, "token_ids off on"},
		{"model not a run field", func(s *Settings) { s.Model = "N" }, RunFields, ""},
		{"model in the family", func(s *Settings) { s.Model = "N" }, FamilyFields, `model "M" "N"`},
		{"seed not in the family", func(s *Settings) { s.Seed = ptr(int64(5)) }, FamilyFields, ""},
		{"first of two", func(s *Settings) { s.Temperature, s.MaxTokens = ptr(0.1), ptr(8) }, RunFields, "max_tokens 300 8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := a
			c.change(&b)
			name, was, now, ok := Differ(&a, &b, c.fields)
			got := ""
			if ok {
				got = name + " " + was + " " + now
			}
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

// A sidecar line reads back as written; what is not one is refused.
func TestSettingsLine(t *testing.T) {
	l, err := Settings{API: "chat", Model: "M", MaxTokens: ptr(8), Arm: "a", ArmParams: json.RawMessage(`{"temperature":0.6}`), Params: []string{"seed"}, Samples: 2}.Line()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(raw), `{"settings":"`+l.Hash+`","family":"`+l.Family+`","api":"chat","model":"M","max_tokens":8,`) {
		t.Errorf("line %s", raw)
	}
	back, err := ParseSettingsLine(raw)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := back.Settings.Line()
	if again.Hash != l.Hash || again.Family != l.Family {
		t.Errorf("read back as %s", raw)
	}
	if d := back.Describe(); d != `api chat, model "M", max_tokens 8, arm a, params seed, samples 2` {
		t.Errorf("Describe: %s", d)
	}
	for _, bad := range []string{`{"api":"chat"}`, `{"settings":"x","family":"y"}`, `{"settings":"0123456789ABCDEF","family":"0123456789abcdef"}`, `[1]`} {
		if _, err := ParseSettingsLine([]byte(bad)); err == nil {
			t.Errorf("%s read as a settings line", bad)
		}
	}
	var x SettingsIndex
	if !x.Add(l) || x.Add(l) || len(x.Lines) != 1 || x.Get(l.Hash) == nil || x.Get(l.Family) != nil {
		t.Errorf("the index keeps a hash once: %+v", x.Lines)
	}
}
