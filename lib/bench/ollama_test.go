package bench

import (
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/ollamaserver"
	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// The bench's binary against a real Ollama server (v0.6.5 on the CPU, its
// tiny model, 4 at once), chat and completions: ready with no /health,
// the stream's usage asked for and found, every level answered without
// error, and a recommendation. Ollama's completion chunks carry a usage
// of zeros: tokens are still counted as they stream. Skipped, saying why,
// where Ollama is not installed.
func TestBenchOllama(t *testing.T) {
	testbin.Long(t, "a real Ollama server")
	srv := ollamaserver.Start(t, ollamaserver.Options{Parallel: 4})
	for _, api := range []string{"chat", "completions"} {
		// A level ends once 8 answers are in; its 30 s leave a CPU server on
		// a loaded machine time to give them.
		r := testbin.Run(t, "", nil, nil, "infer", "bench", "--json", "-e", srv.URL, "--api", api, "--concurrency", "1,4",
			"--warmup", "1s", "--duration", "30s", "--requests", "8", "--answer-tokens", "16", "--prompt-tokens", "32")
		if r.Code != cli.ExitOK {
			t.Fatalf("%s: exit %d\n%s", api, r.Code, r.Stderr)
		}
		var rep Report
		if err := json.Unmarshal(r.Stdout, &rep); err != nil {
			t.Fatalf("%s: %v\n%s", api, err, r.Stdout)
		}
		if rep.Model != srv.Model+":latest" || rep.Recommended == 0 || len(rep.Levels) != 2 {
			t.Errorf("%s: report %+v", api, rep)
		}
		for _, lv := range rep.Levels {
			if lv.Errors != 0 || lv.TokPerSec <= 0 || lv.Answers == 0 {
				t.Errorf("%s: level %d: %d errors (%s), %.1f tok/s, %d answers", api, lv.Concurrency, lv.Errors, lv.FirstError, lv.TokPerSec, lv.Answers)
			}
		}
		if !strings.Contains(r.Stderr, srv.URL+": /health 404 (no such route), /v1/models 200: ready") || strings.Contains(r.Stderr, "sending it up to") {
			t.Errorf("%s: stderr:\n%s", api, r.Stderr)
		}
	}
}
