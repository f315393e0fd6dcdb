package bench

import (
	"strings"
	"testing"
	"time"

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

// The bench on a fresh real Ollama server (4 slots), whose speed depends
// on what it ran before: once all its slots have held an answer every
// later request costs it more. After the ladder the knee is measured
// again; when that disagreed, every level was, and the forecast is the
// latest measurement of the level it recommends, never the ladder's
// first figure from a fresher server.
func TestBenchOllamaAfterTheLadder(t *testing.T) {
	testbin.Long(t, "a real Ollama server, six levels or more")
	srv := ollamaserver.Start(t, ollamaserver.Options{Parallel: 4})
	prompts := writePrompts(t, t.TempDir(), 100)
	// In process, for a bound of its own: on a loaded machine most levels
	// are measured twice.
	rep, r := runBench(t, 5*time.Minute, "-e", srv.URL, "--concurrency", "1,2,4,8",
		"--warmup", "2s", "--duration", "8s", "--max-tokens", "32", "--mean-answer-tokens", "32", "--dataset-size", "200", prompts)
	t.Logf("drift %q, unsettled %q\n%s", rep.Drift, rep.Unsettled, r.stderr)
	if rep.Forecast == nil || rep.Recommended == 0 {
		t.Fatalf("no forecast: %+v", rep)
	}
	k, last := -1, len(rep.Levels)-1
	for i, lv := range rep.Levels {
		if lv.Concurrency == rep.Recommended {
			k = i
		}
	}
	if k < 0 || rep.Forecast.TokPerSec != rep.Levels[k].TokPerSec {
		t.Fatalf("forecast at %.0f tok/s, not the recommended level's latest measurement: %+v", rep.Forecast.TokPerSec, rep.Levels)
	}
	remeasured := 0
	for _, lv := range rep.Levels {
		if lv.Remeasured {
			remeasured++
			if lv.FirstTokPerSec <= 0 {
				t.Errorf("level %d measured again without its first figure", lv.Concurrency)
			}
		}
	}
	switch {
	case rep.Drift != "" && remeasured != len(rep.Levels):
		t.Errorf("drift said, but %d of %d levels measured again", remeasured, len(rep.Levels))
	case rep.Drift == "" && remeasured > 1:
		t.Errorf("no drift said, but %d levels measured again", remeasured)
	case rep.Drift == "" && remeasured == 0 && k < last:
		// (Measured again within the margin, the knee may move to a level
		// near it; measured not at all, it must have been the last.)
		t.Errorf("the knee %d was measured before level %d and not again after the ladder", rep.Recommended, rep.Levels[last].Concurrency)
	}
	if !strings.Contains(r.stderr, "again, as the ladder left the servers") && remeasured > 0 {
		t.Errorf("stderr does not say the knee was measured again:\n%s", r.stderr)
	}
}
