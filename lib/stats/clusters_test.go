package stats

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// TestClusters: stats --clusters counts the near-duplicates and the kept
// prompts they copy, bins the similarities by 0.05 (0.8 opens its bin, 1
// closes the last), lists the largest clusters most first (ties in file
// order, numeric and string ids as written), and rejects the lines that
// are not clusters lines (exit 3) while counting the rest.
func TestClusters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "clusters.jsonl")
	lines := []string{
		`{"id":"b","dup_of":"a","similarity":0.9196}`,
		`{"id":"c","dup_of":"a","similarity":1.0000}`,
		`{"id":7,"dup_of":3,"similarity":0.8000}`,
		`{"id":null,"dup_of":"a","similarity":0.8100}`,
		`{"id":"e","dup_of":"d","similarity":0.9600}`,
		`{"id":"f","dup_of":3,"similarity":0.8500}`,
		`{broken`,
		`{"id":"g","dup_of":"a"}`,
		`{"id":"h","dup_of":"a","similarity":1.5}`,
	}
	os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	rejects := filepath.Join(dir, "rejects.jsonl")
	r := testbin.Run(t, "", nil, nil, "stats", "--json", "--clusters", path, "--rejects", rejects)
	if r.Code != 3 {
		t.Fatalf("exit %d, want 3 for the rejected lines: %s", r.Code, r.Stderr)
	}
	var got ClusterReport
	if err := json.Unmarshal(r.Stdout, &got); err != nil {
		t.Fatalf("%v:\n%s", err, r.Stdout)
	}
	want := `{"schema":"tokenmill.stats.clusters/v1","dropped":6,"kept_with_copies":3,` +
		`"histogram":[{"from":0.8,"to":0.85,"count":2},{"from":0.85,"to":0.9,"count":1},{"from":0.9,"to":0.95,"count":1},{"from":0.95,"to":1,"count":2}],` +
		`"largest":[{"kept_id":"a","copies":3,"mean_similarity":0.9098666666666667,"min_similarity":0.81},` +
		`{"kept_id":3,"copies":2,"mean_similarity":0.825,"min_similarity":0.8},{"kept_id":"d","copies":1,"mean_similarity":0.96,"min_similarity":0.96}]}`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Errorf("report:\n%s\nwant\n%s", b, want)
	}
	data, _ := os.ReadFile(rejects)
	if n := strings.Count(string(data), "\n"); n != 3 || !strings.Contains(string(data), `"bad_cluster"`) || !strings.Contains(r.Stderr, "malformed_json") {
		t.Errorf("%d rejects, want 3 (malformed_json, bad_cluster twice):\n%s\n%s", n, data, r.Stderr)
	}

	r = testbin.Run(t, "", nil, nil, "stats", "--clusters", path, "--top", "1")
	for _, s := range []string{"near-duplicates dropped  6", "kept prompts with copies 3", "[0.95,1.00]        2   33.3%", `"a": 3, 0.910, 0.810`} {
		if !strings.Contains(string(r.Stdout), s) {
			t.Errorf("text report lacks %q:\n%s", s, r.Stdout)
		}
	}
	if strings.Contains(string(r.Stdout), `"d"`) {
		t.Errorf("--top 1 listed more than one cluster:\n%s", r.Stdout)
	}
	if r := testbin.Run(t, "", nil, nil, "stats", "--clusters", path, path); r.Code != 2 {
		t.Errorf("--clusters with record files: exit %d, want 2", r.Code)
	}
}
