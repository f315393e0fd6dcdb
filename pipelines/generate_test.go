package pipelines_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestGenerate(t *testing.T) {
	endpoints := startFleet(t, 3, "--time-scale", "500")
	dir := t.TempDir()
	data := filepath.Join(repoRoot, demoData)
	// The same 300 rows the shared prompt file was made from.
	env := scriptEnv("ENDPOINTS="+endpoints, "EXTRACT_ARGS=--limit 300", "INFER_ARGS=--max-tokens "+maxTokens)
	gen, kept := filepath.Join(dir, "gen.jsonl"), filepath.Join(dir, "gen.prompts.jsonl")

	p := script(t, 2*time.Minute, dir, env, "generate.sh", data)
	p.must(t, 0)
	want, err := os.ReadFile(prompts)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(kept); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s is not what extract --limit 300 | dedup make (%v)", kept, err)
	}
	ids := keys(readRecords(t, prompts))
	assertEachOnce(t, "generate.sh answers", keys(readRecords(t, gen)), ids)
	answers(t, gen)
	// filter's default checks: every answer once, fit or unfit.
	assertEachOnce(t, "fit and unfit answers", append(keys(readRecords(t, filepath.Join(dir, "gen.fit.jsonl"))),
		keys(readRecords(t, filepath.Join(dir, "gen.unfit.jsonl")))...), ids)
	if _, err := os.Stat(filepath.Join(dir, "gen.errors.jsonl")); err == nil {
		if errs := readRecords(t, filepath.Join(dir, "gen.errors.jsonl")); len(errs) > 0 {
			t.Errorf("%d error records on a fleet without faults", len(errs))
		}
	}
	if headline := fmt.Sprintf("%d records from 1 input", len(ids)); !strings.Contains(p.stdout.String(), headline) {
		t.Errorf("stdout lacks the stats headline %q:\n%s", headline, tail(p.stdout.String(), 20))
	}
	assertFinishTable(t, p.stdout.String(), gen)
	before, err := os.ReadFile(gen)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("again without RESUME is refused", func(t *testing.T) {
		p := script(t, time.Minute, dir, env, "generate.sh", data)
		if p.code == 0 {
			t.Fatalf("generate.sh overwrote %s without RESUME=1", gen)
		}
		assertUnchanged(t, gen, before)
	})
	t.Run("RESUME=1 after a complete run asks for nothing", func(t *testing.T) {
		p := script(t, time.Minute, dir, append(env, "RESUME=1"), "generate.sh", data)
		p.must(t, 0)
		assertUnchanged(t, gen, before)
	})
	t.Run("streaming without a prompt file", func(t *testing.T) {
		dir := t.TempDir()
		p := script(t, 2*time.Minute, dir, append(env, "PROMPTS="), "generate.sh", data)
		p.must(t, 0)
		assertEachOnce(t, "streamed answers", keys(readRecords(t, filepath.Join(dir, "gen.jsonl"))), ids)
		if _, err := os.Stat(filepath.Join(dir, "gen.prompts.jsonl")); err == nil {
			t.Errorf("PROMPTS= kept a prompt file")
		}
	})
	t.Run("rejected records exit 3 after the stats", func(t *testing.T) {
		dir := t.TempDir()
		data := filepath.Join(dir, "data.jsonl")
		lines := `{"id": "a", "conversations": [{"from": "human", "value": "Name a prime."}]}
not json
{"id": "b", "conversations": [{"from": "gpt", "value": "no question here"}]}
{"id": "c", "conversations": [{"from": "human", "value": "Name a colour."}]}
`
		if err := os.WriteFile(data, []byte(lines), 0o644); err != nil {
			t.Fatal(err)
		}
		p := script(t, time.Minute, dir, env, "generate.sh", data)
		p.must(t, 3)
		assertEachOnce(t, "answers beside rejects", keys(readRecords(t, filepath.Join(dir, "gen.jsonl"))), []string{`"a"`, `"c"`})
		if !strings.Contains(p.stdout.String(), "2 records from 1 input") {
			t.Errorf("no stats after the rejects:\n%s", p.stdout.String())
		}
	})
}

func assertUnchanged(t *testing.T, path string, before []byte) {
	t.Helper()
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, before) {
		t.Fatalf("%s changed: %d bytes, was %d", path, len(after), len(before))
	}
}
