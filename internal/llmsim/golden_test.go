package llmsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

// With -update the golden files' values are rewritten; their shapes,
// taken from SGLang, must not change.

const goldenDir = "../../testdata/llmsim"

// golden is one pinned exchange. Source says which part of SGLang the
// response shape is taken from; Request and Config are inputs; Status,
// ContentType and Response/Events/Text are the expected answer.
type golden = testbin.Exchange[goldenConfig]

type goldenConfig struct {
	Flavor        Flavor  `json:"flavor,omitempty"`
	Reasoning     bool    `json:"reasoning,omitempty"`
	ContextLength int     `json:"context_length,omitempty"`
	FailRate      float64 `json:"fail_rate,omitempty"`
	AbortRate     float64 `json:"abort_rate,omitempty"`
	APIKey        string  `json:"api_key,omitempty"`
	MaxRunning    int     `json:"max_running,omitempty"`
	ToolCallRate  float64 `json:"tool_call_rate,omitempty"`
	KVTokens      int     `json:"kv_tokens,omitempty"`
	CacheReport   bool    `json:"cache_report,omitempty"`
	LlamaMetrics  bool    `json:"llamacpp_metrics,omitempty"`
	// StartupDelay holds the server in its start ("1h": for the whole
	// exchange).
	StartupDelay string `json:"startup_delay,omitempty"`
}

func readGolden(t *testing.T, name string) *golden {
	t.Helper()
	return testbin.ReadExchange[goldenConfig](t, filepath.Join(goldenDir, name))
}

// TestGoldenWire sends each golden file's request to a fresh instant
// endpoint and compares the answer with the file field by field.
func TestGoldenWire(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	more, err2 := filepath.Glob(filepath.Join(goldenDir, "*", "*.json"))
	files = append(files, more...)
	if err != nil || err2 != nil || len(files) < 20 {
		t.Fatalf("golden files: %v %v (%d found)", err, err2, len(files))
	}
	for _, path := range files {
		name, _ := filepath.Rel(goldenDir, path)
		g := readGolden(t, name)
		if g.Scenario != "" {
			continue
		}
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			cfg := Config{Instant: true, Seed: 7, Flavor: g.Config.Flavor, Reasoning: g.Config.Reasoning, ContextLength: g.Config.ContextLength,
				Faults: Faults{FailRate: g.Config.FailRate, AbortRate: g.Config.AbortRate}, APIKey: g.Config.APIKey, MaxRunning: g.Config.MaxRunning,
				ToolCallRate: g.Config.ToolCallRate, KVTokens: g.Config.KVTokens, CacheReport: g.Config.CacheReport, LlamaMetrics: g.Config.LlamaMetrics}
			if d := g.Config.StartupDelay; d != "" {
				var err error
				if cfg.Faults.StartupDelay, err = time.ParseDuration(d); err != nil {
					t.Fatal(err)
				}
			}
			fleet := startFleet(t, cfg, 1)
			resp := do(t, fleet.URLs()[0], g.Request)
			checkGolden(t, name, g, resp)
		})
	}
}

type answer struct {
	status      int
	contentType string
	body        []byte
}

func do(t *testing.T, base string, r testbin.Request) answer {
	t.Helper()
	status, ct, body := testbin.Do(t, testClient, base, r)
	return answer{status: status, contentType: ct, body: body}
}

var testClient = &http.Client{Timeout: 20 * time.Second, Transport: retryReused{http.DefaultTransport.(*http.Transport)}}

// retryReused sends a request again on another connection when a reused
// one fails under it. llama.cpp's server closes a connection right after a
// streamed answer without saying so; a request sent before the client has
// seen the close finds the connection reset. Go's transport resends only
// idempotent requests there, and every request of these tests is safe to
// send twice.
type retryReused struct{ *http.Transport }

func (r retryReused) RoundTrip(req *http.Request) (*http.Response, error) {
	for {
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) { reused = c.Reused }}
		resp, err := r.Transport.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		if err == nil || !reused || req.Body != nil && req.GetBody == nil {
			return resp, err
		}
		if req.GetBody != nil {
			body, berr := req.GetBody()
			if berr != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

// checkGolden compares an answer with a golden file, or with -update
// rewrites the file's values after checking the shape is unchanged.
func checkGolden(t *testing.T, name string, g *golden, a answer) {
	t.Helper()
	got := *g
	if err := got.SetAnswer(a.status, a.contentType, a.body); err != nil {
		t.Fatalf("%s: %v in %q", name, err, a.body)
	}
	for i, ev := range got.Events {
		got.Events[i] = normalize(t, ev)
	}
	if got.Response != nil {
		got.Response = normalize(t, got.Response)
	}

	if !testbin.Update() || len(g.Response)+len(g.Events) > 0 || g.Text != nil {
		if gs, ws := shapeOf(t, g), shapeOf(t, &got); !reflect.DeepEqual(gs, ws) {
			t.Fatalf("%s: the response shape differs from SGLang's (edit the golden file by hand only from SGLang's source):\n%s", name, shapeDiff(gs, ws))
		}
	}
	if testbin.Update() {
		b, err := json.MarshalIndent(&got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		testbin.WriteGolden(t, filepath.Join(goldenDir, name), append(b, '\n'))
		return
	}
	if g.Status != got.Status || g.ContentType != got.ContentType {
		t.Errorf("%s: status %d %q, want %d %q", name, got.Status, got.ContentType, g.Status, g.ContentType)
	}
	if !jsonEqual(t, g.Response, got.Response) {
		t.Errorf("%s: response\n got %s\nwant %s", name, got.Response, g.Response)
	}
	if len(g.Events) != len(got.Events) {
		t.Fatalf("%s: %d events, want %d:\n%s", name, len(got.Events), len(g.Events), a.body)
	}
	for i := range g.Events {
		if !jsonEqual(t, g.Events[i], got.Events[i]) {
			t.Errorf("%s: event %d\n got %s\nwant %s", name, i, got.Events[i], g.Events[i])
		}
	}
	if (g.Text == nil) != (got.Text == nil) || (g.Text != nil && *g.Text != *got.Text) {
		t.Errorf("%s: body\n got %v\nwant %v", name, deref(got.Text), deref(g.Text))
	}
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

// normalize re-encodes a JSON body with the fields that differ from run
// to run (wall-clock "created", the listening "port") zeroed.
func normalize(t *testing.T, b []byte) json.RawMessage {
	t.Helper()
	v := testbin.DecodeJSON(t, b)
	v = zeroClock(v)
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func zeroClock(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			if k == "created" || k == "port" {
				x[k] = json.Number("0")
			} else {
				x[k] = zeroClock(c)
			}
		}
	case []any:
		for i := range x {
			x[i] = zeroClock(x[i])
		}
	}
	return v
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	return reflect.DeepEqual(testbin.DecodeJSON(t, a), testbin.DecodeJSON(t, b))
}

// shapeOf lists every path of a golden answer with its JSON type, e.g.
// "response.choices[].message.reasoning_content: null".
func shapeOf(t *testing.T, g *golden) []string {
	set := map[string]bool{fmt.Sprintf("status %d", g.Status): true, "content-type " + g.ContentType: true}
	if len(g.Response) > 0 {
		walkShape(testbin.DecodeJSON(t, g.Response), "response", set)
	}
	for i, ev := range g.Events {
		walkShape(testbin.DecodeJSON(t, ev), fmt.Sprintf("event%d", i), set)
	}
	if g.Text != nil {
		for _, line := range strings.Split(*g.Text, "\n") {
			if strings.HasPrefix(line, "# TYPE") {
				set["text "+line] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func walkShape(v any, path string, set map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		set[path+": object"] = true
		for k, c := range x {
			walkShape(c, path+"."+k, set)
		}
	case []any:
		set[path+": array"] = true
		for _, c := range x {
			walkShape(c, path+"[]", set)
		}
	case string:
		set[path+": string"] = true
	case json.Number:
		set[path+": number"] = true
	case bool:
		set[path+": bool"] = true
	case nil:
		set[path+": null"] = true
	}
}

func shapeDiff(want, got []string) string {
	var b strings.Builder
	for _, w := range want {
		if !slices.Contains(got, w) {
			fmt.Fprintf(&b, "  missing %s\n", w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			fmt.Fprintf(&b, "  extra   %s\n", g)
		}
	}
	return b.String()
}

func startFleet(t testing.TB, cfg Config, n int) *Fleet {
	t.Helper()
	f, err := Start(context.Background(), cfg, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		// A later fleet may get the same port; a pooled connection to this
		// one would then fail the first request.
		testClient.CloseIdleConnections()
	})
	return f
}
