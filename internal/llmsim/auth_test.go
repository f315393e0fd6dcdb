package llmsim

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tokenmill/lib/cli"
)

// With an API key, every path but /health*, /metrics and OPTIONS needs the
// exact bearer header, as SGLang's auth middleware has it.
func TestAPIKey(t *testing.T) {
	const key = "sk-sim-51d0"
	fleet := startFleet(t, Config{Instant: true, APIKey: key}, 1)
	base := fleet.URLs()[0]
	cases := []struct {
		method, path, auth string
		want               int
	}{
		{"POST", pathChat, "", 401},
		{"POST", pathChat, "Bearer wrong", 401},
		{"POST", pathChat, "bearer " + key, 401},
		{"POST", pathChat, key, 401},
		{"POST", pathChat, "Bearer  " + key, 401},
		{"POST", pathChat, "Bearer " + key, 200},
		{"POST", pathCompletions, "", 401},
		{"POST", pathGenerate, "", 401},
		{"POST", pathGenerate, "Bearer " + key, 200},
		{"GET", pathModels, "", 401},
		{"GET", pathServerInfo, "", 401},
		{"GET", pathLoad, "", 401},
		{"GET", "/no/such/path", "", 401},
		{"GET", "/no/such/path", "Bearer " + key, 404},
		{"GET", pathModels, "Bearer " + key, 200},
		{"GET", pathHealth, "", 200},
		{"GET", pathHealthGen, "", 200},
		{"GET", pathMetrics, "", 200},
		{"OPTIONS", pathChat, "", 405},
	}
	unauthorized := int64(0)
	for _, c := range cases {
		body := ""
		switch c.path {
		case pathChat:
			body = chatBody("hello", 5, false)
		case pathCompletions:
			body = `{"prompt":"hello","max_tokens":5}`
		case pathGenerate:
			body = `{"text":"hello","sampling_params":{"max_new_tokens":5}}`
		}
		req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s %q: %v", c.method, c.path, c.auth, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s with %q: %d %s, want %d", c.method, c.path, c.auth, resp.StatusCode, b, c.want)
		}
		if c.want == 401 {
			unauthorized++
			if string(b) != `{"error":"Unauthorized"}` || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s %s: 401 body %q (%s)", c.method, c.path, b, resp.Header.Get("Content-Type"))
			}
		}
	}
	st := fleet.Stats()
	if st.Unauthorized != unauthorized {
		t.Errorf("Unauthorized %d, want %d", st.Unauthorized, unauthorized)
	}
	if st.Requests != 2 || st.Completed != 2 {
		t.Errorf("refused requests reached generation: %d requests, %d completed", st.Requests, st.Completed)
	}
}

// The key comes from --api-key or TOKENMILL_LLMSIM_API_KEY.
func TestAPIKeyFlagAndEnv(t *testing.T) {
	const key = "sk-env-93c1"
	for _, how := range []string{"flag", "env"} {
		t.Run(how, func(t *testing.T) {
			ready := filepath.Join(t.TempDir(), "urls")
			args := []string{"--listen", "127.0.0.1:0", "--instant", "--ready-file", ready}
			if how == "flag" {
				args = append(args, "--api-key", key)
			} else {
				t.Setenv("TOKENMILL_LLMSIM_API_KEY", key)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var stderr strings.Builder
			env := &cli.Env{Name: "llmsim", Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr}
			done := make(chan int, 1)
			go func() { done <- cli.Run(ctx, env, Description, &Command{}, args) }()
			defer func() {
				cancel()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Error("llmsim did not stop within 10s of its context ending")
				}
			}()
			var base string
			waitFor(t, "the ready file", func() bool {
				b, err := os.ReadFile(ready)
				base = strings.TrimSpace(string(b))
				return err == nil && base != ""
			})
			for auth, want := range map[string]int{"": 401, "Bearer " + key: 200} {
				req, _ := http.NewRequest("GET", base+pathModels, nil)
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := testClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("Authorization %q: %d, want %d", auth, resp.StatusCode, want)
				}
			}
			testClient.CloseIdleConnections()
		})
	}
}
