package llmsim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"tokenmill/internal/chaos"
)

// The bad request bodies the simulator is tried on: each is answered 400
// with SGLang's error for it, nothing is generated, and the endpoint goes
// on serving (malformed JSON, bad content type, missing fields and an
// over-long prompt of ordinary size are pinned by the golden files).
func TestBadRequestBodies(t *testing.T) {
	huge, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": strings.Repeat("word ", chaos.HugeLineBytes/5)}}})
	tests := []struct {
		name, path string
		body       []byte
		message    string // in the 400's message
	}{
		{chaos.MalformedJSON, pathChat, []byte(`{"messages": [{"role": "user", "content": "half a rec`), "'type': 'json_invalid'"},
		{chaos.Garbage, pathChat, chaos.GarbageBytes(64 << 10), "'type': 'json_invalid'"},
		{chaos.HugeLine + " (one long prompt)", pathChat, huge, "is longer than the model's context length (32768 tokens)."},
		{chaos.Empty, pathChat, nil, "'loc': ('body', ), 'msg': 'Field required'"},
		{"completion body to chat", pathChat, []byte(`{"prompt": "hello"}`), "'loc': ('body', 'messages'), 'msg': 'Field required'"},
		{"chat body to completions", pathCompletions, []byte(`{"messages": [{"role": "user", "content": "hi"}]}`), "'loc': ('body', 'prompt'), 'msg': 'Field required'"},
		{"chat body to /generate", pathGenerate, []byte(`{"messages": [{"role": "user", "content": "hi"}]}`), "Either text, input_ids or input_embeds should be provided."},
	}
	fleet := startFleet(t, Config{Instant: true}, 1)
	base := fleet.URLs()[0]
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := testClient.Post(base+tt.path, "application/json", bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tt.message) {
				t.Errorf("%d %.300s, want 400 with %q", resp.StatusCode, b, tt.message)
			}
		})
	}
	if st := fleet.Stats(); st.BadRequests != int64(len(tests)) || st.Completed != 0 {
		t.Errorf("stats %+v, want %d bad requests and nothing generated", st, len(tests))
	}
	if s, _, err := postChat(t, base, chatBody("still there?", 5, false)); err != nil || s != 200 {
		t.Errorf("after the bad bodies: %d %v", s, err)
	}
}

// FuzzErrorBody: whatever body a request carries, the 400 it gets is one
// valid JSON object in valid UTF-8, as SGLang's (orjson) would be.
func FuzzErrorBody(f *testing.F) {
	seedBodies(f)
	f.Add(chaos.GarbageBytes(512))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, parse := range []func([]byte) (*job, error){parseChat, parseCompletion, parseGenerate} {
			_, err := parse(body)
			if err == nil {
				continue
			}
			for _, out := range [][]byte{appendErrorBody(nil, err.Error(), "Bad Request", 400), appendNativeError(nil, err.Error())} {
				var v map[string]any
				if !utf8.Valid(out) || json.Unmarshal(out, &v) != nil {
					t.Fatalf("body %q: error answer is not valid UTF-8 JSON: %q", body, out)
				}
			}
		}
	})
}

// FuzzParseListen: an accepted --listen spec gives host:port addresses
// that parse again to themselves.
func FuzzParseListen(f *testing.F) {
	for _, s := range []string{"127.0.0.1:30000-30007", "127.0.0.1:0,127.0.0.1:0", "[::1]:8000", "h:1-1024", "127.0.0.1:5,127.0.0.1:5", "30000", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		addrs, err := ParseListen([]string{spec})
		if err != nil {
			return
		}
		for _, a := range addrs {
			if again, err := ParseListen([]string{a}); err != nil || len(again) != 1 || again[0] != a {
				t.Fatalf("%q gave %q, which parses to %q, %v", spec, a, again, err)
			}
		}
	})
}

// FuzzParseFaultSpec: an accepted --fault spec gives faults a fleet can
// run with: rates that are probabilities adding up to at most 1, no
// negative count, duration or factor.
func FuzzParseFaultSpec(f *testing.F) {
	for _, s := range []string{"slow:3,crash-after:100,restart-after:30s,startup-delay:500ms,hang-rate:0.2", "fail-rate:0.7,drop-rate:0.7", "slow:NaN", "fail-rate:NaN", "restart-after:-1s", "nope:1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		ft, err := ParseFaultSpec(Faults{}, spec)
		if err != nil {
			return
		}
		rates := []float64{ft.FailRate, ft.AbortRate, ft.HangRate, ft.DropRate}
		sum := 0.0
		for _, r := range rates {
			if !(r >= 0 && r <= 1) {
				t.Fatalf("%q: rate %v", spec, r)
			}
			sum += r
		}
		if !(sum <= 1+1e-9) || !(ft.Slow >= 0 && ft.Slow <= maxSlow) || ft.CrashAfter < 0 || ft.RestartAfter < 0 || ft.StartupDelay < 0 {
			t.Fatalf("%q: accepted %+v", spec, ft)
		}
		if _, err := (&Config{Faults: ft}).withDefaults(); err != nil {
			t.Fatalf("%q: faults accepted by the parser, refused in a fleet's config: %v", spec, err)
		}
	})
}
