package compose

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// inputs lists the files of the named sources, in the order given.
func inputs(files map[string]string, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = files[n]
	}
	return out
}

// available counts each source's records in its file.
func available(t *testing.T, files map[string]string) map[string]int {
	t.Helper()
	m := map[string]int{}
	for s, f := range files {
		m[s] = len(readRecords(t, f))
	}
	return m
}

// TestRealShares composes the real datasets by source: each group's
// count is its exact share of the total, within one record, and the
// records are input lines, byte for byte, in input order.
func TestRealShares(t *testing.T) {
	dir := t.TempDir()
	files := realSources(t, dir)
	avail := available(t, files)
	t.Logf("available after dedup: %v", avail)
	shares := map[string]float64{"alpaca": 0.4, "glaive": 0.25, "v1-sft": 0.2, "mt-bench": 0.15}
	for _, total := range []int{400, 333, 97} {
		t.Run(fmt.Sprint(total), func(t *testing.T) {
			out := filepath.Join(dir, fmt.Sprintf("mix-%d.jsonl", total))
			args := append([]string{"--by", "source", "--share", "alpaca=0.4,glaive=25%,v1-sft=0.2,mt-bench=0.15",
				"--total", fmt.Sprint(total), "-o", out}, inputs(files, "alpaca", "fastchat", "glaive", "mt-bench", "v1-sft", "ii-0625")...)
			r := mustRun(t, dir, nil, "compose", args...)
			got := readRecords(t, out)
			if len(got) != total {
				t.Fatalf("%d records, want %d", len(got), total)
			}
			counts := bySource(got)
			for s, share := range shares {
				if d := math.Abs(float64(counts[s]) - share*float64(total)); d >= 1 {
					t.Errorf("%s: %d records, %.2f%% of %d; its share is %.2f (off by %.2f records)", s, counts[s], 100*float64(counts[s])/float64(total), total, share, d)
				}
			}
			if counts["fastchat"]+counts["ii-0625"] != 0 {
				t.Errorf("groups not in the mix were taken: %v", counts)
			}
			if left := avail["fastchat"] + avail["ii-0625"]; !strings.Contains(r.Stderr, fmt.Sprintf("not in the mix: %d records in 2 groups", left)) {
				t.Errorf("the summary does not name the groups left out:\n%s", r.Stderr)
			}
			checkInputOrder(t, got, files, "alpaca", "fastchat", "glaive", "mt-bench", "v1-sft", "ii-0625")
			s := summary(t, r.Stderr)
			read := 0
			for _, n := range avail {
				read += n
			}
			if s[0] != read || s[1] != total || s[2] != read-total || s[3] != 0 || s[4] != total {
				t.Errorf("summary %v, want read %d selected %d not selected %d", s, read, total, read-total)
			}
		})
	}
}

// checkInputOrder: every record is an input line, byte for byte, and
// they come in the inputs' order.
func checkInputOrder(t *testing.T, got []rec, files map[string]string, order ...string) {
	t.Helper()
	pos := map[string]int{}
	i := 0
	for _, s := range order {
		for _, r := range readRecords(t, files[s]) {
			if _, dup := pos[r.line]; !dup {
				pos[r.line] = i
			}
			i++
		}
	}
	last := -1
	for _, r := range got {
		p, ok := pos[r.line]
		if !ok {
			t.Fatalf("a record written is no input line: %.200s", r.line)
		}
		if p <= last {
			t.Fatalf("records out of input order at %.100s", r.line)
		}
		last = p
	}
}

// TestRealShortfall: a group with fewer records than its share gives all
// it has, the summary says so, and the others fill its place in
// proportion to their shares; with --repeat its records are repeated
// instead, each repeat marked.
func TestRealShortfall(t *testing.T) {
	dir := t.TempDir()
	files := realSources(t, dir)
	avail := available(t, files)
	mt := avail["mt-bench"]
	in := inputs(files, "alpaca", "glaive", "mt-bench", "v1-sft")
	out := filepath.Join(dir, "mix.jsonl")
	r := mustRun(t, dir, nil, "compose", append([]string{"--by", "source", "--share", "alpaca=0.4,glaive=0.25,v1-sft=0.2,mt-bench=0.15",
		"--total", "800", "-o", out}, in...)...)
	counts := bySource(readRecords(t, out))
	// mt-bench is asked for 120 and gives mt; the rest goes to the others
	// as largest remainders of their shares 0.4 : 0.25 : 0.2, which they
	// have the records for.
	short := 120 - mt
	extra := apportion(int64(short), []float64{0.4, 0.25, 0.2})
	want := map[string]int{"alpaca": 320 + int(extra[0]), "glaive": 200 + int(extra[1]), "v1-sft": 160 + int(extra[2]), "mt-bench": mt}
	if avail["glaive"] < want["glaive"] || avail["alpaca"] < want["alpaca"] || avail["v1-sft"] < want["v1-sft"] {
		t.Fatalf("the datasets are smaller than the test expects: %v", avail)
	}
	for s, n := range want {
		if counts[s] != n {
			t.Errorf("%s: %d records, want %d (counts %v)", s, counts[s], n, counts)
		}
	}
	row := groupRow(t, r.Stderr, "mt-bench")
	if row[1] != fmt.Sprint(mt) || row[2] != "120" || row[3] != fmt.Sprint(mt) || row[4] != fmt.Sprint(short) {
		t.Errorf("mt-bench's row %v, want available %d, target 120, taken %d, shortfall %d", row, mt, mt, short)
	}
	t.Logf("mt-bench short by %d of 120: filled as %v", short, counts)
	if !strings.Contains(r.Stderr, fmt.Sprintf("mt-bench: %d records for a target of 120: %d short, filled from the other groups", mt, short)) {
		t.Errorf("no word of the shortfall:\n%s", r.Stderr)
	}

	rep := filepath.Join(dir, "mix-repeat.jsonl")
	r = mustRun(t, dir, nil, "compose", append([]string{"--by", "source", "--share", "alpaca=0.4,glaive=0.25,v1-sft=0.2,mt-bench=0.15",
		"--total", "1000", "--repeat", "-o", rep}, in...)...)
	got := readRecords(t, rep)
	counts = bySource(got)
	if counts["mt-bench"] != 150 || counts["alpaca"] != 400 || counts["glaive"] != 250 || counts["v1-sft"] != 200 {
		t.Errorf("--repeat: counts %v, want the exact shares", counts)
	}
	repeats := 0
	seen := map[string]bool{}
	for _, g := range got {
		switch {
		case g.Compose == nil:
			seen[string(g.ID)] = true
		case g.Compose.Repeat == 2 && g.Source == "mt-bench" && seen[string(g.ID)]:
			repeats++
		default:
			t.Errorf("unexpected mark %+v on %.100s", g.Compose, g.line)
		}
	}
	if repeats != 150-mt {
		t.Errorf("%d repeats marked, want %d", repeats, 150-mt)
	}
	if !strings.Contains(r.Stderr, fmt.Sprintf("mt-bench: %d records repeated to 150 (--repeat)", mt)) ||
		!strings.Contains(r.Stderr, fmt.Sprintf("wrote 1000 records (%d repeats;", 150-mt)) {
		t.Errorf("the summary does not count the repeats:\n%s", r.Stderr)
	}
}

// TestRealReproducible: the same inputs and seed take the same records,
// byte for byte, however many workers; another seed takes others; and
// records added to one input change only its group's selection, by no
// more than the added records displace.
func TestRealReproducible(t *testing.T) {
	dir := t.TempDir()
	files := realSources(t, dir)
	args := func(out string, extra ...string) []string {
		return append(append([]string{"--by", "source", "--share", "alpaca=0.5,glaive=0.3,v1-sft=0.2", "--total", "600", "-o", out}, extra...),
			inputs(files, "alpaca", "glaive", "v1-sft")...)
	}
	a, b, c := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl"), filepath.Join(dir, "c.jsonl")
	mustRun(t, dir, nil, "compose", args(a, "--workers", "1")...)
	mustRun(t, dir, nil, "compose", args(b, "--workers", "3")...)
	mustRun(t, dir, nil, "compose", args(c, "--seed", "7")...)
	ad, bd := readFile(t, a), readFile(t, b)
	if ad != bd {
		t.Fatal("two runs with the same inputs and seed differ")
	}
	if readFile(t, c) == ad {
		t.Fatal("--seed 7 took the same records as seed 0")
	}

	// Growth: alpaca's file first without its last 10% of records, then whole.
	whole := readRecords(t, files["alpaca"])
	cut := len(whole) * 9 / 10
	part := filepath.Join(dir, "alpaca-part.jsonl")
	var lines []string
	for _, r := range whole[:cut] {
		lines = append(lines, r.line)
	}
	if err := os.WriteFile(part, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	added := map[string]bool{}
	for _, r := range whole[cut:] {
		added[r.line] = true
	}
	before, after := filepath.Join(dir, "before.jsonl"), filepath.Join(dir, "after.jsonl")
	common := []string{"--by", "source", "--share", "alpaca=0.5,glaive=0.3,v1-sft=0.2", "--total", "600"}
	mustRun(t, dir, nil, "compose", append(append(common, "-o", before), part, files["glaive"], files["v1-sft"])...)
	mustRun(t, dir, nil, "compose", append(append(common, "-o", after), files["alpaca"], files["glaive"], files["v1-sft"])...)
	sel := func(path string) map[string]map[string]bool {
		m := map[string]map[string]bool{}
		for _, r := range readRecords(t, path) {
			if m[r.Source] == nil {
				m[r.Source] = map[string]bool{}
			}
			m[r.Source][r.line] = true
		}
		return m
	}
	s1, s2 := sel(before), sel(after)
	for _, src := range []string{"glaive", "v1-sft"} {
		if !mapsEqual(s1[src], s2[src]) {
			t.Errorf("%s's selection changed when records were added to alpaca's input", src)
		}
	}
	var entered, left int
	for l := range s2["alpaca"] {
		if !s1["alpaca"][l] {
			entered++
			if !added[l] {
				t.Errorf("a record that was there before entered the selection: %.100s", l)
			}
		}
	}
	for l := range s1["alpaca"] {
		if !s2["alpaca"][l] {
			left++
		}
	}
	k := len(s1["alpaca"])
	expected := float64(k) * float64(len(added)) / float64(len(whole))
	t.Logf("alpaca grew by %d records (%.1f%%): of its %d selected, %d were replaced (%.1f%%; expected about %.1f)",
		len(added), 100*float64(len(added))/float64(len(whole)), k, entered, 100*float64(entered)/float64(k), expected)
	if entered != left {
		t.Errorf("%d records entered alpaca's selection and %d left it: the target did not change", entered, left)
	}
	// The bound: no more than the added records, and within 2x (plus a
	// little) of the expected displacement of a uniform draw.
	if entered > len(added) || float64(entered) > 2*expected+5 {
		t.Errorf("%d of %d selected records changed when %d were added: more than the bound %.0f", entered, k, len(added), 2*expected+5)
	}
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRealAccounting: every input record is selected, not selected or
// rejected, and counted; records without the key and bad lines are
// rejected with their file and line, written to --rejects, exit 3.
func TestRealAccounting(t *testing.T) {
	dir := t.TempDir()
	files := realSources(t, dir)
	// mt-bench's records without their source, and two bad lines.
	var broken []string
	for i, r := range readRecords(t, files["mt-bench"]) {
		line := r.line
		if i%4 == 0 {
			line = strings.Replace(line, `"source":"mt-bench"`, `"source":null`, 1)
		}
		broken = append(broken, line)
	}
	broken = append(broken[:10], append([]string{`{"id": "cut`, `[1,2,3]`}, broken[10:]...)...)
	bad := filepath.Join(dir, "broken.jsonl")
	if err := os.WriteFile(bad, []byte(strings.Join(broken, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, rej := filepath.Join(dir, "mix.jsonl"), filepath.Join(dir, "rejects.jsonl")
	r := testbin.Run(t, dir, nil, nil, "compose", "--by", "source", "--share", "alpaca=0.6,mt-bench=0.4", "--total", "100",
		"--rejects", rej, "-o", out, files["alpaca"], bad, files["glaive"])
	if r.Code != 3 {
		t.Fatalf("exit %d, want 3\n%s", r.Code, r.Stderr)
	}
	for _, want := range []string{"broken.jsonl:1: missing_key: no source", "broken.jsonl:11: malformed_json", "broken.jsonl:12: not_an_object",
		"rejected 22 (missing_key 20, malformed_json 1, not_an_object 1)"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	s := summary(t, r.Stderr)
	avail := available(t, files)
	read := avail["alpaca"] + len(broken) + avail["glaive"]
	if s[0] != read || s[1]+s[2]+s[3] != read || s[3] != 22 || s[1] != 100 || s[4] != 100 {
		t.Errorf("summary %v: read %d must be selected + not selected + rejected (22), 100 selected", s, read)
	}
	if n := len(readRecords(t, rej)); n != 22 {
		t.Errorf("%d rejects written, want 22", n)
	}
	if n := len(readRecords(t, out)); n != 100 {
		t.Errorf("%d records written, want 100", n)
	}
	t.Logf("read %d: selected %d, not selected %d, rejected %d", s[0], s[1], s[2], s[3])
}

// TestRealSpec: a spec file with shares within a group by another key and
// a cap.
func TestRealSpec(t *testing.T) {
	dir := t.TempDir()
	files := realSources(t, dir)
	spec := filepath.Join(dir, "mix.yaml")
	if err := os.WriteFile(spec, []byte(`# two sources; glaive's rows split by whether they offer tools
by: source
total: 300
seed: 3
groups:
  alpaca: 0.5
  glaive:
    share: 0.3
    by: tools
    groups:
      "yes": 0.8
      "no": 0.2
  v1-sft: {share: 20%}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "mix.jsonl")
	r := mustRun(t, dir, nil, "compose", "--spec", spec, "-o", out, files["alpaca"], files["glaive"], files["v1-sft"])
	got := readRecords(t, out)
	counts := bySource(got)
	if counts["alpaca"] != 150 || counts["glaive"] != 90 || counts["v1-sft"] != 60 {
		t.Errorf("counts %v, want alpaca 150, glaive 90, v1-sft 60", counts)
	}
	tools := 0
	for _, g := range got {
		if g.Source == "glaive" && strings.Contains(g.line, `"tools":[{`) {
			tools++
		}
	}
	if tools != 72 {
		t.Errorf("%d of glaive's 90 offer tools, want 72 (0.8)", tools)
	}
	if row := groupRow(t, r.Stderr, "  yes"); row[2] != "72" || row[3] != "72" {
		t.Errorf("glaive/yes row %v", row)
	}
	if !strings.Contains(r.Stderr, "seed 3") {
		t.Errorf("the spec's seed is not the run's:\n%s", r.Stderr)
	}
}

// TestRealLanguage groups by the detected language, capping one.
func TestRealLanguage(t *testing.T) {
	dir := t.TempDir()
	files := realSources(t, dir)
	r := mustRun(t, dir, nil, "compose", "--by", "lang", "--dry-run", files["alpaca"], files["glaive"], files["v1-sft"])
	en := groupRow(t, r.Stderr, "en")
	t.Logf("languages:\n%s", r.Stderr)
	if en[1] == "0" {
		t.Fatalf("no English found in English datasets:\n%s", r.Stderr)
	}
	out := filepath.Join(dir, "mix.jsonl")
	r = mustRun(t, dir, nil, "compose", "--by", "lang", "--max", "en=50%", "--total", "200", "-o", out, files["alpaca"], files["glaive"], files["v1-sft"])
	if row := groupRow(t, r.Stderr, "en"); row[0] != "50.0%" || row[3] != "100" {
		t.Errorf("en capped at 50%% of 200: row %v\n%s", row, r.Stderr)
	}
}

// TestMergeMissing: the rerun loop keeps the composition: merge
// --prompts MIX --missing lists exactly the prompts compose chose that
// have no answer yet, byte for byte and in the mix's order.
func TestMergeMissing(t *testing.T) {
	dir := t.TempDir()
	files := realSources(t, dir)
	mix := filepath.Join(dir, "mix.jsonl")
	mustRun(t, dir, nil, "compose", "--by", "source", "--share", "alpaca=0.5,glaive=0.3,mt-bench=0.2", "--total", "300", "-o", mix,
		files["alpaca"], files["glaive"], files["mt-bench"], files["v1-sft"])
	chosen := readRecords(t, mix)
	// Answers for two thirds of the mix, an error for one more, and
	// answers for prompts compose did not choose (an earlier run's).
	var gen []string
	var want []string
	for i, r := range chosen {
		switch i % 3 {
		case 0:
			want = append(want, r.line)
		case 1:
			gen = append(gen, strings.TrimSuffix(r.line, "}")+`,"output":{"text":"an answer","finish_reason":"stop"}}`)
		case 2:
			if i%9 == 2 {
				gen = append(gen, strings.TrimSuffix(r.line, "}")+`,"error":{"status":500,"message":"boom"}}`)
				want = append(want, r.line)
				continue
			}
			gen = append(gen, strings.TrimSuffix(r.line, "}")+`,"output":{"text":"an answer","finish_reason":"stop"}}`)
		}
	}
	in := map[string]bool{}
	for _, r := range chosen {
		in[r.line] = true
	}
	others := 0
	for _, r := range readRecords(t, files["alpaca"]) {
		if !in[r.line] && others < 40 {
			gen = append(gen, strings.TrimSuffix(r.line, "}")+`,"output":{"text":"not in the mix","finish_reason":"stop"}}`)
			others++
		}
	}
	genFile := filepath.Join(dir, "gen.jsonl")
	if err := os.WriteFile(genFile, []byte(strings.Join(gen, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	todo := filepath.Join(dir, "todo.jsonl")
	r := mustRun(t, dir, nil, "merge", "--prompts", mix, "--missing", "-o", todo, genFile)
	var got []string
	for _, g := range readRecords(t, todo) {
		got = append(got, g.line)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("merge --missing listed %d prompts, want the %d chosen and unanswered\nmerge: %s", len(got), len(want), r.Stderr)
	}
	t.Logf("mix %d, answered %d, to do %d; merge: %s", len(chosen), len(chosen)-len(want), len(got), strings.TrimSpace(r.Stderr))
}
