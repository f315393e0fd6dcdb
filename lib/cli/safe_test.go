package cli

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"unicode/utf8"
)

// Outside text reaches the terminal escaped: no control character, no
// bidirectional override and no invalid byte is sent as it is, a line
// stays one line, and a long text is cut and the cut said.
func TestEscape(t *testing.T) {
	for _, tt := range []struct {
		in   string
		max  int
		want string
	}{
		{"plain text: ok", 0, "plain text: ok"},
		{"tab\tkept", 0, "tab\tkept"},
		{"\x1b]0;PWNED\x07\x1b[31mRED\x1b[0m\r\nfake line", 0, `\x1b]0;PWNED\x07\x1b[31mRED\x1b[0m\r\nfake line`},
		{"bin \xff\xfe gz \x1f\x8b", 0, `bin \xff\xfe gz \x1f\x8b`},
		{"c1 \u009b31m", 0, `c1 \u009b31m`},
		{"bidi \u202eexe.txt", 0, `bidi \u202eexe.txt`},
		{"DEL\x7f", 0, `DEL\x7f`},
		{"héllo wörld", 0, "héllo wörld"},
		{strings.Repeat("a", 40), 10, "aaaaaaaaaa... (30 more bytes)"},
		{"ééééé", 3, "éé... (6 more bytes)"},
	} {
		if got := Escape(tt.in, tt.max); got != tt.want {
			t.Errorf("Escape(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

// A diagnostic line from outside text is one escaped line, whatever the
// text: Logf applies Escape.
func TestLogfEscapes(t *testing.T) {
	var b bytes.Buffer
	env := &Env{Name: "tool", Stderr: &b}
	env.Logf("server said: %s", "\x1b]0;PWNED\x07\r\nfake: line")
	if got, want := b.String(), "tool: server said: \\x1b]0;PWNED\\x07\\r\\nfake: line\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Every form of a credential a server could echo is replaced by ***: the
// key raw, after Bearer, base64 encoded, percent- and JSON-escaped; a URL
// password raw and inside the Basic header's base64; on stderr through
// Protect and in any record through Redact.
func TestSecretsRedacted(t *testing.T) {
	const key, user, pw = "sk-live-9f8e7d6c5b/+=", "admin", "S3cr3t:Pw"
	s := &Secrets{}
	s.Add(key)
	s.AddBasic(user, pw)
	s.Add("short") // too short to search for
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + pw))
	for _, in := range []string{
		"Authorization: Bearer " + key,
		"key=" + base64.StdEncoding.EncodeToString([]byte(key)),
		"url-safe " + base64.RawURLEncoding.EncodeToString([]byte(key)),
		`{"message":"` + strings.ReplaceAll(key, "/", `\/`) + `"}`,
		"q=" + "sk-live-9f8e7d6c5b%2F%2B%3D",
		"Authorization: Basic " + basic,
		"http://admin:" + pw + "@host",
	} {
		got := s.RedactString(in)
		if strings.Contains(got, key) || strings.Contains(got, pw) || strings.Contains(got, basic) || !strings.Contains(got, "***") {
			t.Errorf("%q redacted to %q", in, got)
		}
	}
	if got := s.RedactString("a short word"); got != "a short word" {
		t.Errorf("a short secret was searched for: %q", got)
	}
	var b bytes.Buffer
	env := &Env{Name: "tool", Stderr: &b}
	env.Protect().Add(key)
	env.Logf("echo: %s", "Bearer "+key)
	if strings.Contains(b.String(), key) || !strings.Contains(b.String(), "Bearer ***") {
		t.Fatalf("stderr: %q", b.String())
	}
	var nilSecrets *Secrets
	if got := string(nilSecrets.Redact([]byte("x"))); got != "x" {
		t.Fatal(got)
	}
}

// Escape's output is valid UTF-8 without a control byte but tabs, within
// its bound (plus the note of the cut).
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b[31m\r\n", "\xff\xfe", "\u202e", strings.Repeat("é", 20)} {
		f.Add(s, 8)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 0 || max > 1<<16 {
			return
		}
		got := Escape(s, max)
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8: %q", got)
		}
		for _, r := range got {
			if r < 0x20 && r != '\t' || r == 0x7f || r >= 0x80 && r < 0xa0 || isBidi(r) {
				t.Fatalf("control %U in %q", r, got)
			}
		}
		if i := strings.Index(got, "... ("); max > 0 && len(got) > max+4*4 && (i < 0 || i > max+8) {
			t.Fatalf("%d bytes for a bound of %d: %q", len(got), max, got)
		}
	})
}
