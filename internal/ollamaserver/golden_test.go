package ollamaserver

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

const goldenDir = "../../testdata/ollama"

// interopConfig is the server every golden exchange was recorded on.
var interopConfig = exchangeConfig{Parallel: 4, NumCtx: 1024}

// exchange is one request to the real server and its answer, in the
// layout of testdata/llmsim's golden files, so that a simulator of Ollama
// can be checked against the same files.
type exchange = testbin.Exchange[exchangeConfig]

type exchangeConfig struct {
	Parallel int `json:"parallel"`
	NumCtx   int `json:"num_ctx"`
}

// send makes an exchange's request and fills in the answer; the server's
// directory, which its paths contain, becomes $DIR.
func send(t *testing.T, srv *Server, e *exchange) {
	t.Helper()
	status, ct, raw := testbin.Do(t, testClient, srv.URL, e.Request)
	raw = bytes.ReplaceAll(raw, []byte(srv.Dir), []byte("$DIR"))
	err := e.SetAnswer(status, ct, raw)
	if err == nil && e.Events != nil {
		err = streamEnds(e.Events)
	}
	if err != nil {
		t.Fatalf("%s: %v:\n%s", e.Request.Path, err, raw)
	}
}

// events splits a text/event-stream body into its data payloads, "[DONE]"
// as the JSON string "[DONE]", each JSON and the last "[DONE]".
func events(body []byte) ([]json.RawMessage, error) {
	evs, err := testbin.SSEEvents(body)
	if err != nil {
		return nil, err
	}
	return evs, streamEnds(evs)
}

// streamEnds checks that every event of a stream is JSON and the last is
// "[DONE]".
func streamEnds(evs []json.RawMessage) error {
	for _, ev := range evs {
		if !json.Valid(ev) {
			return fmt.Errorf("event %q is not JSON", ev)
		}
	}
	if string(evs[len(evs)-1]) != `"[DONE]"` {
		return fmt.Errorf("the stream does not end with data: [DONE]")
	}
	return nil
}

// volatile are the fields whose values change from run to run (ids,
// clocks, durations) or with the CPU's arithmetic (the sampled text);
// canon keeps their type and drops their value.
var volatile = map[string]bool{
	"created": true, "created_at": true, "modified_at": true, "expires_at": true,
	"total_duration": true, "load_duration": true, "prompt_eval_duration": true, "eval_duration": true,
	"content": true, "text": true, "response": true,
}

// canon is an answer as compared: every value but the volatile ones.
func canon(t *testing.T, e *exchange) any {
	t.Helper()
	out := map[string]any{"status": e.Status, "content_type": e.ContentType}
	if e.Text != nil {
		out["text"] = *e.Text
	}
	if len(e.Response) > 0 {
		out["response"] = decode(t, e.Response)
	}
	var evs []any
	for _, ev := range e.Events {
		evs = append(evs, decode(t, ev))
	}
	out["events"] = evs
	return out
}

func decode(t *testing.T, b []byte) any {
	t.Helper()
	return blank(testbin.DecodeJSON(t, b))
}

func blank(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			switch {
			case volatile[k] || k == "id" && isCompletionID(c):
				x[k] = placeholder(c)
			case k == "parameters" || k == "modelfile":
				x[k] = sortedLines(c)
			default:
				x[k] = blank(c)
			}
		}
	case []any:
		for i := range x {
			x[i] = blank(x[i])
		}
	}
	return v
}

// sortedLines orders the lines of /api/show's "parameters" and
// "modelfile", whose parameters Ollama prints in Go's random map order.
func sortedLines(v any) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	lines := strings.Split(s, "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// isCompletionID tells a per-answer id ("chatcmpl-123", "cmpl-45") from a
// model id ("tiny:latest"), which is compared.
func isCompletionID(v any) bool {
	s, ok := v.(string)
	return ok && (strings.HasPrefix(s, "chatcmpl-") || strings.HasPrefix(s, "cmpl-"))
}

func placeholder(v any) any {
	switch v.(type) {
	case string:
		return "*"
	case json.Number:
		return json.Number("0")
	}
	return v
}

// diff lists the paths whose values differ between two canon answers.
func diff(want, got any) string {
	w, g := map[string]string{}, map[string]string{}
	flatten(want, "", w)
	flatten(got, "", g)
	var out []string
	for p, v := range w {
		if g[p] != v {
			out = append(out, fmt.Sprintf("  %s: got %s, want %s", p, cmp.Or(g[p], "nothing"), v))
		}
	}
	for p, v := range g {
		if _, ok := w[p]; !ok {
			out = append(out, fmt.Sprintf("  %s: got %s, want nothing", p, v))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

func flatten(v any, path string, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			flatten(c, path+"."+k, out)
		}
	case []any:
		out[path] = fmt.Sprintf("array of %d", len(x))
		for i, c := range x {
			flatten(c, fmt.Sprintf("%s[%d]", path, i), out)
		}
	default:
		b, _ := json.Marshal(x)
		out[path] = string(b)
	}
}

// testGolden replays every exchange in testdata/ollama against srv and
// compares the answers with the recorded ones, all but their volatile
// values; with -update it records them instead.
func testGolden(t *testing.T, srv *Server) {
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	if err != nil || len(files) < 10 {
		t.Fatalf("golden files: %v (%d found)", err, len(files))
	}
	source := fmt.Sprintf("ollama %s serve (go install %s@%s, CPU) with internal/gguf's default tiny llama, recorded by internal/ollamaserver's TestInterop -update",
		srv.Version, module, srv.Version)
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(name, func(t *testing.T) {
			want := testbin.ReadExchange[exchangeConfig](t, path)
			if want.Config != interopConfig {
				t.Fatalf("recorded with %+v, the test server runs %+v", want.Config, interopConfig)
			}
			got := *want
			send(t, srv, &got)
			if testbin.Update() {
				got.Source = source
				b, err := json.MarshalIndent(&got, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				testbin.WriteGolden(t, path, append(b, '\n'))
				return
			}
			if srv.Version != Version {
				t.Skipf("ollama %q answers, the recorded ones are %s's; -update records this one's", srv.Version, Version)
			}
			if w, g := canon(t, want), canon(t, &got); !reflect.DeepEqual(w, g) {
				t.Errorf("%s: the answer differs from the recorded one (volatile values blanked):\n%s", name, diff(w, g))
			}
		})
	}
}
