package cli

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The house's floors (DESIGN.md), by package under tokenmill/lib.
var (
	// stages: one package per stage; none imports another. benchmark is
	// the development measuring tool.
	stages = []string{"extract", "dedup", "shard", "infer", "bench", "merge", "stats", "filter", "corpus", "benchmark"}
	// groundFloor: what stages stand on.
	groundFloor = []string{"record", "jsonl", "cli", "openai", "quantile", "forecast", "fleet", "clock", "tokens", "conversation"}
	// testSupport: for tests alone.
	testSupport = []string{"testbin", "chaos", "replay"}
)

// TestLayout holds the code to the house's plan: no stage imports another
// stage, the ground floor imports no stage, lib never imports cmd, the
// simulator shares nothing with the client's wire and fleet code, and
// only test support imports test support.
func TestLayout(t *testing.T) {
	out, err := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}}|{{join .Deps \",\"}}", "tokenmill/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, list, _ := strings.Cut(line, "|")
		for _, d := range strings.Split(list, ",") {
			if strings.HasPrefix(d, "tokenmill/") {
				deps[pkg] = append(deps[pkg], d)
			}
		}
	}
	if len(deps["tokenmill/lib/infer"]) == 0 {
		t.Fatalf("go list found no dependencies of lib/infer:\n%s", out)
	}
	name := func(pkg string) string { return strings.TrimPrefix(pkg, "tokenmill/lib/") }
	isLib := func(pkg string) bool { return strings.HasPrefix(pkg, "tokenmill/lib/") }
	for pkg, ds := range deps {
		for _, d := range ds {
			switch {
			case isLib(pkg) && strings.HasPrefix(d, "tokenmill/cmd/"):
				t.Errorf("%s imports %s: lib never imports cmd", pkg, d)
			case isLib(pkg) && slices.Contains(stages, name(pkg)) && slices.Contains(stages, name(d)):
				t.Errorf("stage %s imports stage %s", name(pkg), name(d))
			case isLib(pkg) && slices.Contains(groundFloor, name(pkg)) && !slices.Contains(groundFloor, name(d)):
				t.Errorf("ground-floor %s imports %s, which is not on the ground floor", name(pkg), name(d))
			case name(pkg) == "llmsim" && slices.Contains([]string{"openai", "fleet", "infer", "bench", "forecast", "tokens", "conversation"}, name(d)):
				t.Errorf("the simulator imports %s: it shares nothing with the client's side", name(d))
			case name(pkg) == "openai" && name(d) == "fleet":
				t.Errorf("openai imports fleet: fleet stands on openai")
			case isLib(pkg) && !slices.Contains(testSupport, name(pkg)) && slices.Contains(testSupport, name(d)):
				t.Errorf("%s imports %s, which is for tests", name(pkg), name(d))
			}
		}
	}
}
