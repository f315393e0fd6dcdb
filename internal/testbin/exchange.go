package testbin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// Exchange is one HTTP request and its answer as a wire golden file
// records it (testdata/llmsim, testdata/ollama): C is the settings of the
// server it was recorded on. Its answer is Events for an event stream,
// Response for JSON, Text for anything else.
type Exchange[C any] struct {
	Source      string            `json:"source"`
	Scenario    string            `json:"scenario,omitempty"` // driven by a test of its own, not the generic runner
	Config      C                 `json:"config"`
	Request     Request           `json:"request"`
	Status      int               `json:"status"`
	ContentType string            `json:"content_type"`
	Response    json.RawMessage   `json:"response,omitempty"`
	Events      []json.RawMessage `json:"events,omitempty"`
	Text        *string           `json:"text,omitempty"`
}

// Request is an exchange's request: Body, or RawBody where it is not
// JSON; without ContentType a body is sent as application/json.
type Request struct {
	Method      string            `json:"method"`
	Path        string            `json:"path"`
	ContentType string            `json:"content_type,omitempty"`
	Body        json.RawMessage   `json:"body,omitempty"`
	RawBody     string            `json:"raw_body,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
}

// ReadExchange reads the golden file at path.
func ReadExchange[C any](t testing.TB, path string) *Exchange[C] {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var e Exchange[C]
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &e
}

// Do sends r to the server at base with c, and returns the answer's
// status, content type and body.
func Do(t testing.TB, c *http.Client, base string, r Request) (status int, contentType string, body []byte) {
	t.Helper()
	send := []byte(r.RawBody)
	if len(r.Body) > 0 {
		send = r.Body
	}
	req, err := http.NewRequest(r.Method, base+r.Path, bytes.NewReader(send))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	if ct := r.ContentType; ct != "" {
		req.Header.Set("Content-Type", ct)
	} else if len(send) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.Method, r.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", r.Method, r.Path, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// SetAnswer makes status, contentType and body e's answer: body split
// into Events for an event stream, as Response for JSON, else as Text.
func (e *Exchange[C]) SetAnswer(status int, contentType string, body []byte) error {
	e.Status, e.ContentType = status, contentType
	e.Response, e.Events, e.Text = nil, nil, nil
	switch {
	case strings.HasPrefix(contentType, "text/event-stream"):
		evs, err := SSEEvents(body)
		if err != nil {
			return err
		}
		e.Events = evs
	case strings.HasPrefix(contentType, "application/json"):
		if !json.Valid(body) {
			return fmt.Errorf("%s: not JSON", contentType)
		}
		e.Response = body
	default:
		s := string(body)
		e.Text = &s
	}
	return nil
}

// SSEEvents splits a text/event-stream body into its data payloads,
// "[DONE]" as the JSON string "[DONE]".
func SSEEvents(body []byte) ([]json.RawMessage, error) {
	var out []json.RawMessage
	for _, block := range strings.Split(string(body), "\n\n") {
		if block == "" {
			continue
		}
		data, ok := strings.CutPrefix(block, "data: ")
		if !ok || strings.Contains(data, "\n") {
			return out, fmt.Errorf("malformed event %q", block)
		}
		if data == "[DONE]" {
			data = `"[DONE]"`
		}
		out = append(out, json.RawMessage(data))
	}
	if len(out) == 0 {
		return out, fmt.Errorf("stream has no events")
	}
	return out, nil
}

// DecodeJSON decodes b, numbers as json.Number so that they compare
// exactly.
func DecodeJSON(t testing.TB, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	return v
}
