package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"unicode/utf8"
)

// What tokenmill prints comes partly from outside: server answers, file
// content, names. Two rules hold for all of it, here at the ground floor
// so that every tool keeps them alike: text is escaped for the terminal
// and bounded before it is printed (Escape, applied to every diagnostic
// line), and the credentials a run was given never leave it (Secrets,
// applied to stderr and to every record a tool writes that may carry
// outside text).

// MaxLogLine bounds one diagnostic line, outside text included.
const MaxLogLine = 16 << 10

// Escape makes s safe to print on a terminal, on one line, in at most max
// bytes (0: no bound): control characters (C0, DEL, C1: the ESC that
// starts an escape sequence, the CR and LF that would forge a line),
// Unicode's bidirectional overrides and invalid UTF-8 are shown as Go
// escapes (\x1b, \r, \n, \u202e), never sent; tabs are kept. Text past max
// is cut at a rune boundary and the cut said.
func Escape(s string, max int) string {
	if safe(s) && (max <= 0 || len(s) <= max) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if max > 0 && b.Len() >= max {
			fmt.Fprintf(&b, "... (%d more bytes)", len(s)-i)
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteByte('\t')
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0, isBidi(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// safe reports whether s needs no escaping.
func safe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
		if c >= 0x80 {
			for _, r := range s[i:] {
				if r == utf8.RuneError || r >= 0x80 && r < 0xa0 || isBidi(r) || r < 0x20 && r != '\t' || r == 0x7f {
					return false
				}
			}
			return utf8.ValidString(s[i:])
		}
	}
	return true
}

// isBidi: the characters that reorder how a line is shown (a filename or
// an answer could make a line read as something it is not).
func isBidi(r rune) bool {
	return r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f || r == 0x061c
}

// Secrets are the credentials a run was given (an API key, the password
// of an endpoint URL) in every form a server could echo them: as given,
// base64 encoded (the Basic header; a key encoded by a gateway), after
// "Bearer " (the raw form covers it), percent-encoded as in a URL, and
// escaped as in JSON. Redact replaces each with ***. Safe for concurrent
// use; the zero value (and nil) redacts nothing.
type Secrets struct {
	mu    sync.RWMutex
	forms [][]byte
}

// minSecret is the shortest credential searched for: anything shorter
// would match ordinary text (and a secret that short protects nothing).
const minSecret = 6

// Add registers a credential.
func (s *Secrets) Add(secret string) {
	if len(secret) < minSecret {
		return
	}
	forms := []string{secret}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		forms = append(forms, enc.EncodeToString([]byte(secret)))
	}
	forms = append(forms, url.QueryEscape(secret), url.PathEscape(secret))
	if j, err := json.Marshal(secret); err == nil {
		quoted := string(j[1 : len(j)-1])
		forms = append(forms, quoted, strings.ReplaceAll(quoted, "/", `\/`)) // some servers escape the slash
	}
	s.addForms(forms)
}

// AddBasic registers a URL's credentials: the password alone, and the
// user:password pair a Basic Authorization header encodes.
func (s *Secrets) AddBasic(user, password string) {
	if password == "" {
		return
	}
	s.Add(password)
	pair := user + ":" + password
	var forms []string
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		forms = append(forms, enc.EncodeToString([]byte(pair)))
	}
	s.addForms(forms)
}

func (s *Secrets) addForms(forms []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
next:
	for _, f := range forms {
		if len(f) < minSecret {
			continue
		}
		for _, have := range s.forms {
			if string(have) == f {
				continue next
			}
		}
		s.forms = append(s.forms, []byte(f))
	}
	// Longest first: a form that contains another is replaced whole.
	for i := 1; i < len(s.forms); i++ {
		for j := i; j > 0 && len(s.forms[j]) > len(s.forms[j-1]); j-- {
			s.forms[j], s.forms[j-1] = s.forms[j-1], s.forms[j]
		}
	}
}

// Empty reports whether there is nothing to redact.
func (s *Secrets) Empty() bool {
	if s == nil {
		return true
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.forms) == 0
}

// Redact returns b with every form of every credential replaced by ***:
// b itself when it holds none, else a new slice.
func (s *Secrets) Redact(b []byte) []byte {
	if s == nil {
		return b
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, f := range s.forms {
		if bytes.Contains(b, f) {
			b = bytes.ReplaceAll(b, f, []byte("***"))
		}
	}
	return b
}

// RedactString is Redact for a string.
func (s *Secrets) RedactString(v string) string {
	if s.Empty() {
		return v
	}
	return string(s.Redact([]byte(v)))
}

// redactWriter redacts every Write (a diagnostic line is one Write).
type redactWriter struct {
	w io.Writer
	s *Secrets
}

func (r *redactWriter) Write(p []byte) (int, error) {
	q := r.s.Redact(p)
	if _, err := r.w.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Protect makes the run's stderr redact secrets (once registered with
// e.Secrets), and returns them. Call it before anything runs beside the
// command (the stream is swapped, not locked).
func (e *Env) Protect() *Secrets {
	if e.Secrets == nil {
		e.Secrets = &Secrets{}
	}
	if _, ok := e.Stderr.(*redactWriter); !ok && e.Stderr != nil {
		e.Stderr = &redactWriter{w: e.Stderr, s: e.Secrets}
	}
	return e.Secrets
}
