package cli

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The house's floors (CONTRIBUTING.md). The product is cmd/ and lib/; the kit
// (the simulator, the test helpers, the benchmark suite and the tools that
// feed it) is internal/, which the product never imports.
var (
	// stages: one package per stage under lib/; none imports another.
	// serve (starting and keeping up the servers) stands with them: it
	// uses lib/fleet's readiness, as infer does, and no stage.
	stages = []string{"extract", "dedup", "shard", "compose", "infer", "bench", "merge", "stats", "filter", "serve", "tokenize"}
	// groundFloor: what stages stand on.
	groundFloor = []string{"record", "jsonl", "cli", "openai", "quantile", "forecast", "fleet", "clock", "backoff", "tokens", "conversation", "mix", "minhash", "tokenizer", "procgroup", "ledger", "settings", "metrics", "minheap"}
	// kit: internal/, for the simulator, tests and benchmarks alone.
	kit = []string{"llmsim", "simfleet", "chaos", "testbin", "ollamaserver", "llamaserver", "lifeline", "gguf", "benchsuite", "corpus", "recordtest", "fakeclock", "refdoc", "doctest", "cmd/benchsuite", "cmd/corpus", "cmd/rusage"}
	// productCommands: the binaries users run; llmsim is the simulator's.
	productCommands = []string{"extract", "dedup", "shard", "compose", "infer", "filter", "merge", "stats", "serve", "tokenize", "llmsim"}
)

// TestLayout holds the code to the house's plan: no stage imports another
// stage, the ground floor imports no stage, lib never imports cmd or the
// kit, the simulator shares nothing with the client's wire and fleet code,
// and every folder of cmd/, lib/ and internal/ is one the plan names.
func TestLayout(t *testing.T) {
	out, err := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}}|{{join .Deps \",\"}}", "tokenmill/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, list, _ := strings.Cut(line, "|")
		deps[pkg] = nil
		for _, d := range strings.Split(list, ",") {
			if strings.HasPrefix(d, "tokenmill/") {
				deps[pkg] = append(deps[pkg], d)
			}
		}
	}
	if len(deps["tokenmill/lib/infer"]) == 0 {
		t.Fatalf("go list found no dependencies of lib/infer:\n%s", out)
	}
	const lib, internal, cmd = "tokenmill/lib/", "tokenmill/internal/", "tokenmill/cmd/"
	name := func(pkg string) string {
		return strings.TrimPrefix(strings.TrimPrefix(pkg, lib), internal)
	}
	for pkg, ds := range deps {
		switch {
		case strings.HasPrefix(pkg, internal) && !slices.Contains(kit, name(pkg)):
			t.Errorf("%s is not one of the kit's packages %v: name it in the plan", pkg, kit)
		case strings.HasPrefix(pkg, cmd) && !slices.Contains(productCommands, strings.TrimPrefix(pkg, cmd)):
			t.Errorf("%s is not one of the product's commands %v: a development command goes under internal/cmd", pkg, productCommands)
		}
		for _, d := range ds {
			isLib := strings.HasPrefix(pkg, lib)
			switch {
			case isLib && strings.HasPrefix(d, cmd):
				t.Errorf("%s imports %s: lib never imports cmd", pkg, d)
			case isLib && strings.HasPrefix(d, internal):
				t.Errorf("%s imports %s: the product never imports the kit", pkg, d)
			case strings.HasPrefix(pkg, cmd) && pkg != cmd+"llmsim" && strings.HasPrefix(d, internal):
				t.Errorf("%s imports %s: a product command never imports the kit", pkg, d)
			case isLib && slices.Contains(stages, name(pkg)) && slices.Contains(stages, name(d)):
				t.Errorf("stage %s imports stage %s", name(pkg), name(d))
			case isLib && slices.Contains(groundFloor, name(pkg)) && !slices.Contains(groundFloor, name(d)):
				t.Errorf("ground-floor %s imports %s, which is not on the ground floor", name(pkg), name(d))
			case pkg == internal+"llmsim" && slices.Contains([]string{"openai", "fleet", "infer", "bench", "forecast", "tokens", "conversation"}, name(d)):
				t.Errorf("the simulator imports %s: it shares nothing with the client's side", name(d))
			case pkg == lib+"openai" && d == lib+"fleet":
				t.Errorf("openai imports fleet: fleet stands on openai")
			}
		}
	}
	// The top level is the design card's, plus the kit's folder: checked on
	// what git tracks, so that a user's own files beside it do not count.
	tracked, err := exec.Command("git", "-C", "../..", "ls-files").Output()
	if err != nil {
		t.Logf("not a git checkout (%v): the top level is not checked", err)
		return
	}
	allowed := []string{".ci", ".gitignore", "cmd", "lib", "internal", "pipelines", "testdata", "go.mod", "go.sum", "justfile", "README.md", "GUIDE.md", "CONTRIBUTING.md", "BENCHMARKS.md", "RELIABILITY.md"}
	for _, f := range strings.Split(strings.TrimSpace(string(tracked)), "\n") {
		if top, _, _ := strings.Cut(f, "/"); !slices.Contains(allowed, top) {
			t.Errorf("top level holds %s, which is not in the plan %v", top, allowed)
		}
	}
}
