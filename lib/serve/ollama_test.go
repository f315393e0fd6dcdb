package serve

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/ollamaserver"
	"tokenmill/internal/testbin"
)

// One serve of two real Ollama servers (the binary .ci/install-ollama
// builds; skipped, saying so, where it is not installed) answers an infer
// run: serve finds them ready by the route Ollama has (/v1/models: it has
// no /health), lists both, infer answers every prompt exactly once, and
// SIGTERM stops both servers and their runners, no process left.
func TestOllamaFleet(t *testing.T) {
	// A server of the kit's own makes the model (a tiny random-weight
	// llama) in its models directory, which both of serve's share.
	made := ollamaserver.Start(t, ollamaserver.Options{})
	made.Stop()
	f := newFleetDir(t, 2)
	models := filepath.Join(made.Dir, "models")
	serve := f.startServe(t, 2, []string{"--start-timeout", "2m", "--unhealthy-after", "1m", "--grace", "10s"},
		"env", "HOME="+filepath.Join(f.dir, "home-{index}"), "OLLAMA_HOST=127.0.0.1:{port}", "OLLAMA_MODELS="+models,
		"OLLAMA_NOPRUNE=1", "OLLAMA_NUM_PARALLEL=2", "OLLAMA_KEEP_ALIVE=24h", "OLLAMA_LOAD_TIMEOUT=90s", made.Binary, "serve")
	serve.WaitFor(t, 2*time.Minute, "all 2 servers ready")
	st := f.status(t)
	for _, s := range st.Servers {
		// The first check finds the route ("/health 404 (no such route),
		// /v1/models 200"); later ones ask it alone.
		if !strings.HasSuffix(s.Check, "/v1/models 200") {
			t.Errorf("server %d found ready by %q, not by Ollama's route", s.Index, s.Check)
		}
	}
	in, want := prompts(t, f.dir, 8)
	gen := filepath.Join(f.dir, "gen.jsonl")
	r := testbin.Run(t, f.dir, nil, nil, "infer", "--endpoints-file", f.endpoints(), "--model", made.Model,
		"--max-tokens", "4", "--request-timeout", "90s", "-o", gen, in)
	if r.Code != 0 {
		t.Fatalf("infer exited %d:\n%s", r.Code, r.Stderr)
	}
	got, from := ids(t, gen)
	assertEachOnce(t, "the answers", got, want)
	for _, ep := range from {
		if ep != st.Servers[0].URL && ep != st.Servers[1].URL {
			t.Errorf("an answer from %s, not one of serve's servers", ep)
		}
	}
	t.Logf("answered by %d and %d of %d: %s", strings.Count(strings.Join(from, " "), st.Servers[0].URL), strings.Count(strings.Join(from, " "), st.Servers[1].URL), len(from), r.Stderr)
	pids := serverPIDs(f.status(t))
	serve.Signal(t, syscall.SIGTERM)
	if res := serve.Wait(t, time.Minute); res.Code != 130 {
		t.Errorf("serve exited %d:\n%s", res.Code, res.Stderr)
	}
	assertNoneRuns(t, pids, f.status(t))
}
