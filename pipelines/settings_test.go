package pipelines_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Answers of two settings through the real tools: infer records them
// (each record's hash, the sidecar's lines), refuses to continue a file
// under other settings; merge refuses to put them in one training file
// unless asked, writes their sidecar beside merged generation records,
// and lists them in the tokens manifest with their counts; stats reports
// each with what made it.
func TestSettingsThroughTheTools(t *testing.T) {
	dir := t.TempDir()
	fleet := startFleet(t, 2, "--time-scale", "500")
	recs := readRecords(t, prompts)
	var first, second []string
	for i, r := range recs[:100] {
		if i%2 == 0 {
			first = append(first, r.raw)
		} else {
			second = append(second, r.raw)
		}
	}
	write := func(name string, lines []string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tool := func(code int, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, name), args...)
		cmd.Dir = dir
		cmd.Env = scriptEnv()
		out, _ := cmd.CombinedOutput()
		if got := cmd.ProcessState.ExitCode(); got != code {
			t.Fatalf("%s %s: exit %d, want %d\n%s", name, strings.Join(args, " "), got, code, out)
		}
		return string(out)
	}
	a, b := write("a.jsonl", first), write("b.jsonl", second)
	infer := func(code int, out, in string, extra ...string) string {
		t.Helper()
		return tool(code, "infer", append([]string{"-e", fleet, "--progress", "0", "--token-ids", "--seed", "7", "-o", out, in}, extra...)...)
	}
	infer(0, "short.jsonl", a, "--max-tokens", "8")
	infer(0, "long.jsonl", b, "--max-tokens", maxTokens)
	// Continuing short.jsonl with the long settings is refused, the file
	// left as it was.
	before, _ := os.ReadFile(filepath.Join(dir, "short.jsonl"))
	msg := infer(2, "short.jsonl", b, "--max-tokens", maxTokens, "--append")
	if !strings.Contains(msg, "--append: short.jsonl was made with max_tokens 8, this run asks "+maxTokens) {
		t.Errorf("the refusal:\n%s", msg)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "short.jsonl")); string(after) != string(before) {
		t.Errorf("the refused run changed short.jsonl")
	}

	side := func(path string) map[string]map[string]any {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, path+".settings.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]map[string]any{}
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var v map[string]any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			out[v["settings"].(string)] = v
		}
		return out
	}
	count := func(path string) map[string]int {
		t.Helper()
		n := map[string]int{}
		data, _ := os.ReadFile(filepath.Join(dir, path))
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var v struct {
				Output struct {
					Settings string `json:"settings"`
				} `json:"output"`
			}
			json.Unmarshal([]byte(l), &v)
			n[v.Output.Settings]++
		}
		return n
	}
	short, long := side("short.jsonl"), side("long.jsonl")
	if len(short) != 1 || len(long) != 1 {
		t.Fatalf("sidecars %v, %v: one settings each", short, long)
	}
	var shortHash, longHash string
	for h, l := range short {
		shortHash = h
		if l["max_tokens"] != 8.0 || l["token_ids"] != true || l["seed"] != 7.0 || l["server"] != "sglang" || l["model"] == "" {
			t.Errorf("short settings %v", l)
		}
	}
	for h := range long {
		longHash = h
	}
	if n := count("short.jsonl"); n[shortHash] != 50 || len(n) != 1 {
		t.Fatalf("short.jsonl by settings: %v", n)
	}

	// merge: a training file of both is refused, then allowed.
	msg = tool(2, "merge", "--to", "messages", "-o", "train.jsonl", "short.jsonl", "long.jsonl")
	if !strings.Contains(msg, "answers of settings "+longHash+" would join answers of settings "+shortHash+" in one training file (max_tokens "+maxTokens+" and 8)") {
		t.Errorf("merge's refusal:\n%s", msg)
	}
	if _, err := os.Stat(filepath.Join(dir, "train.jsonl")); !os.IsNotExist(err) {
		t.Errorf("the refused merge wrote train.jsonl")
	}
	tool(0, "merge", "--to", "messages", "--allow-mixed-settings", "-o", "train.jsonl", "short.jsonl", "long.jsonl")
	tool(0, "merge", "--to", "tokens", "--allow-mixed-settings", "-o", "rows.jsonl", "short.jsonl", "long.jsonl")
	var m struct {
		Settings []struct {
			Settings string         `json:"settings"`
			Records  int            `json:"records"`
			MadeWith map[string]any `json:"made_with"`
		} `json:"settings"`
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "rows.jsonl.manifest.json"))
	if err := json.Unmarshal(raw, &m); err != nil || len(m.Settings) != 2 || m.Settings[0].Settings != shortHash || m.Settings[0].Records != 50 ||
		m.Settings[1].Settings != longHash || m.Settings[1].Records != 50 || m.Settings[1].MadeWith["max_tokens"] != 48.0 {
		t.Errorf("the manifest's settings (%v): %s", err, raw)
	}

	// merge to generation records: their sidecar comes along, and stats
	// describes both settings of the merged file.
	tool(0, "merge", "-o", "final.jsonl", "short.jsonl", "long.jsonl")
	if fin := side("final.jsonl"); len(fin) != 2 || fin[shortHash] == nil || fin[longHash] == nil {
		t.Fatalf("the sidecar beside final.jsonl: %v", fin)
	}
	var rep struct {
		Settings []struct {
			Settings string         `json:"settings"`
			Records  int            `json:"records"`
			Answers  int            `json:"answers"`
			MadeWith map[string]any `json:"made_with"`
		} `json:"settings"`
	}
	out := tool(0, "stats", "--json", "final.jsonl")
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Settings) != 2 {
		t.Fatalf("stats settings: %s", out)
	}
	for _, g := range rep.Settings {
		if g.Records != 50 || g.Answers != 50 || g.MadeWith == nil {
			t.Errorf("stats settings group %+v", g)
		}
	}
}
