package dedup

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
	"tokenmill/lib/minhash"
)

// nearCorpus is n prompt records with ids r0, r1, ...: new texts of 30 to
// 200 words, near-copies of earlier ones (a few words replaced, a word
// inserted, or two swapped), and a few exact copies.
func nearCorpus(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 99))
	var bases [][]string
	var out []byte
	for i := range n {
		var w []string
		switch k := r.IntN(20); {
		case len(bases) > 0 && k < 6: // a near-copy
			w = slices.Clone(bases[r.IntN(len(bases))])
			switch r.IntN(3) {
			case 0:
				for j := range w {
					if r.IntN(60) == 0 {
						w[j] = fmt.Sprintf("edit%d", r.IntN(1000))
					}
				}
			case 1:
				j := r.IntN(len(w))
				w = slices.Insert(w, j, "inserted")
			default:
				j := r.IntN(len(w) - 1)
				w[j], w[j+1] = w[j+1], w[j]
			}
		case len(bases) > 0 && k == 6: // an exact copy
			w = bases[r.IntN(len(bases))]
		default:
			w = make([]string, 30+r.IntN(170))
			for j := range w {
				w[j] = fmt.Sprintf("w%d", r.IntN(3000))
			}
			bases = append(bases, w)
		}
		line, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("r%d", i),
			"messages": []map[string]string{{"role": "user", "content": strings.Join(w, " ")}}})
		out = append(append(out, line...), '\n')
	}
	return out
}

// idsOf returns the ids of the JSONL records in data, in order.
func idsOf(t *testing.T, data []byte) []string {
	t.Helper()
	var ids []string
	for _, line := range lines(string(data)) {
		var rec struct{ ID any }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		ids = append(ids, fmt.Sprint(rec.ID))
	}
	return ids
}

// checkAccounting: every input id is exactly once in the output or the
// dups file.
func checkAccounting(t *testing.T, input, out, dups []byte) {
	t.Helper()
	want := idsOf(t, input)
	got := append(idsOf(t, out), idsOf(t, dups)...)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("output and dups hold %d ids, the input %d, or not the same ones", len(got), len(want))
	}
}

type clusterLine struct {
	ID         *string  `json:"id"`
	DupOf      *string  `json:"dup_of"`
	Similarity *float64 `json:"similarity"`
}

func readClusters(t *testing.T, path string) []clusterLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []clusterLine
	for _, line := range lines(string(data)) {
		var c clusterLine
		if err := json.Unmarshal([]byte(line), &c); err != nil || c.Similarity == nil {
			t.Fatalf("clusters line %q: %v", line, err)
		}
		out = append(out, c)
	}
	return out
}

var nearSummary = regexp.MustCompile(`dedup: read (\d+), kept (\d+), removed (\d+) .*, near-duplicates (\d+) \(`)

// TestBinaryNear drives --near, --dups and --clusters on prompts whose
// similarities are known: 100-word texts, one word replaced in the middle
// (J = 91/101 = 0.90 over 5-word shingles: dropped), the last word
// replaced (J = 95/97: dropped), one word in seven replaced (J near 0.3:
// kept), an exact copy (removed as before, without dup_reason), and a
// near-copy without an id (dup_of is the kept id, its id null).
func TestBinaryNear(t *testing.T) {
	input := nearInput()
	dir := t.TempDir()
	out, dups, clusters := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "dups.jsonl"), filepath.Join(dir, "clusters.jsonl")
	r := runBinary(t, []byte(input), nil, "--near", "-o", out, "--dups", dups, "--clusters", clusters)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if m := nearSummary.FindStringSubmatch(r.stderr); m == nil || m[1] != "7" || m[2] != "3" || m[3] != "1" || m[4] != "3" {
		t.Fatalf("summary: want read 7, kept 3, removed 1, near-duplicates 3:\n%s", r.stderr)
	}
	kept, _ := os.ReadFile(out)
	if got := idsOf(t, kept); !slices.Equal(got, []string{"a", "d", "f"}) {
		t.Fatalf("kept %v, want a d f", got)
	}
	dupData, _ := os.ReadFile(dups)
	dupRecs := readDupRecords(t, dupData)
	want := []struct {
		id, reason string
		lo, hi     float64
	}{{"b", "near_duplicate", 0.8, 0.99}, {"c", "near_duplicate", 0.85, 1}, {"e", "", 0, 0}, {"<nil>", "near_duplicate", 0.8, 0.99}}
	if len(dupRecs) != len(want) {
		t.Fatalf("%d dups, want %d:\n%s", len(dupRecs), len(want), dupData)
	}
	for i, w := range want {
		d := dupRecs[i]
		if fmt.Sprint(d.ID) != w.id || d.DupReason != w.reason || len(d.Messages) != 1 {
			t.Errorf("dup %d: %+v, want id %s reason %q", i, d, w.id, w.reason)
		}
		if w.reason != "" && (fmt.Sprint(d.DupOf) != "a" || d.Similarity < w.lo || d.Similarity > w.hi) {
			t.Errorf("dup %s: dup_of %v similarity %g, want a in [%g, %g]", w.id, d.DupOf, d.Similarity, w.lo, w.hi)
		}
	}
	cl := readClusters(t, clusters)
	if len(cl) != 3 || *cl[0].ID != "b" || *cl[1].ID != "c" || cl[2].ID != nil {
		t.Fatalf("clusters: %+v, want b, c and the record without an id", cl)
	}
	for i, c := range cl {
		if *c.DupOf != "a" || *c.Similarity != dupRecs[[]int{0, 1, 3}[i]].Similarity {
			t.Errorf("cluster %d: dup_of %v similarity %v, not what --dups says", i, *c.DupOf, *c.Similarity)
		}
	}

	// Usage errors come before anything is written.
	for _, args := range [][]string{
		{"--clusters", clusters + ".2"},                     // without --near
		{"--near", "--threshold", "0"},                      //
		{"--near", "--threshold", "1.5"},                    //
		{"--near", "--bands", "0"},                          //
		{"--near", "--rows", "2000"},                        //
		{"--near", "--shingle", "0"},                        //
		{"--near", "--clusters", "-"},                       //
		{"--near", "--memory", "0"},                         //
		{"--near", "--clusters", clusters, "-o", out + "2"}, // exists, no --force
	} {
		r := runBinary(t, []byte(input), nil, append(args, "-o", filepath.Join(dir, "never.jsonl"))...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", args, r.code, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "never.jsonl")); err == nil {
		t.Error("a refused run wrote its output")
	}
}

// nearInput is TestBinaryNear's records: a, near-copies of it (b, c,
// and one without an id), d changed too much to be one, e an exact copy,
// and f a prompt of its own.
func nearInput() string {
	words := make([]string, 100)
	for i := range words {
		words[i] = fmt.Sprintf("word%d", i)
	}
	with := func(change func(w []string)) string {
		w := slices.Clone(words)
		change(w)
		return strings.Join(w, " ")
	}
	rec := func(id, content string) string {
		if id == "" {
			return fmt.Sprintf(`{"messages":[{"role":"user","content":%q}]}`, content)
		}
		return fmt.Sprintf(`{"id":%q,"messages":[{"role":"user","content":%q}]}`, id, content)
	}
	base := strings.Join(words, " ")
	return strings.Join([]string{
		rec("a", base),
		rec("b", with(func(w []string) { w[50] = "other" })),
		rec("c", with(func(w []string) { w[99] = "end" })),
		rec("d", with(func(w []string) {
			for i := 0; i < len(w); i += 7 {
				w[i] = "x"
			}
		})),
		rec("e", base),
		rec("", with(func(w []string) { w[10] = "ten" })),
		rec("f", "a short prompt of its own"),
	}, "\n") + "\n"
}

// dupRecord is what the test reads of a --dups line.
type dupRecord struct {
	ID         any
	DupOf      any     `json:"dup_of"`
	DupReason  string  `json:"dup_reason"`
	Similarity float64 `json:"similarity"`
	Messages   []any
}

func readDupRecords(t *testing.T, data []byte) []dupRecord {
	t.Helper()
	var out []dupRecord
	for _, line := range lines(string(data)) {
		var d dupRecord
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// TestBinaryNearWorkersAndMemory: the output, dups and clusters are the
// same bytes with one worker, with three, and with three and a memory
// budget so small that the kept signatures spill to disk many times; the
// accounting is exact; no spill file is left in TMPDIR.
func TestBinaryNearWorkersAndMemory(t *testing.T) {
	n := testbin.Size(4000, 20000)
	input := nearCorpus(n, 1)
	dir := t.TempDir()
	path := filepath.Join(dir, "in.jsonl")
	os.WriteFile(path, input, 0o644)
	tmp := t.TempDir()
	var ref [3][]byte
	for i, args := range [][]string{
		{"--workers", "1"},
		{"--workers", "3"},
		{"--workers", "3", "--memory", "64KiB"},
	} {
		out, dups, clusters := filepath.Join(dir, fmt.Sprint("out", i)), filepath.Join(dir, fmt.Sprint("dups", i)), filepath.Join(dir, fmt.Sprint("cl", i))
		r := runBinary(t, nil, []string{"TMPDIR=" + tmp}, append(args, "--near", "-o", out, "--dups", dups, "--clusters", clusters, path)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		spilled := strings.Contains(r.stderr, "spilled to disk")
		if spilled != (i == 2) {
			t.Errorf("%v: spilled %v:\n%s", args, spilled, r.stderr)
		}
		var got [3][]byte
		for j, p := range []string{out, dups, clusters} {
			got[j], _ = os.ReadFile(p)
		}
		checkAccounting(t, input, got[0], got[1])
		if m := nearSummary.FindStringSubmatch(r.stderr); m == nil || m[4] == "0" || fmt.Sprint(len(readClusters(t, clusters))) != m[4] {
			t.Fatalf("%v: no near-duplicates, or not as many as clusters lines:\n%s", args, r.stderr)
		}
		if i == 0 {
			ref = got
			continue
		}
		for j := range got {
			if !bytes.Equal(got[j], ref[j]) {
				t.Errorf("%v: %s differs from the one-worker, in-memory run's", args, []string{"output", "dups", "clusters"}[j])
			}
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("TMPDIR holds %d entries after the runs", len(left))
	}
}

// TestBinaryNearState: a run over a then one over b with --state give
// what one run over a and b gives (b's near-copies of a's prompts are
// dropped in the second run, with a's ids); a state is refused (exit 2,
// nothing written, the state unchanged) by a run with other --near
// parameters, with --normalize changed, without --near, and a state made
// without --near by a run with it.
func TestBinaryNearState(t *testing.T) {
	input := nearCorpus(3000, 2)
	cut := 0
	for range 1500 {
		cut += bytes.IndexByte(input[cut:], '\n') + 1
	}
	dir := t.TempDir()
	a, b, ab := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl"), filepath.Join(dir, "ab.jsonl")
	os.WriteFile(a, input[:cut], 0o644)
	os.WriteFile(b, input[cut:], 0o644)
	os.WriteFile(ab, input, 0o644)
	state := filepath.Join(dir, "seen.state")
	run := func(name, in string, extra ...string) (out, clusters []byte) {
		t.Helper()
		o, c := filepath.Join(dir, name+".out"), filepath.Join(dir, name+".clusters")
		args := append([]string{"--near", "--normalize", "ws", "-o", o, "--clusters", c}, extra...)
		if r := runBinary(t, nil, nil, append(args, in)...); r.code != 0 {
			t.Fatalf("%s: exit %d: %s", name, r.code, r.stderr)
		}
		out, _ = os.ReadFile(o)
		clusters, _ = os.ReadFile(c)
		return out, clusters
	}
	oneOut, oneClusters := run("one", ab)
	aOut, aClusters := run("a", a, "--state", state)
	// The second run spills: the state's signatures are loaded into the
	// index through the same budget.
	bOut, bClusters := run("b", b, "--state", state, "--memory", "100KiB")
	if !bytes.Equal(append(aOut, bOut...), oneOut) || !bytes.Equal(append(aClusters, bClusters...), oneClusters) {
		t.Fatal("a then b through --state differ from one run over both")
	}
	crossed := 0
	for _, c := range readClusters(t, filepath.Join(dir, "b.clusters")) {
		var n int
		fmt.Sscanf(*c.DupOf, "r%d", &n)
		if n < 1500 {
			crossed++
		}
	}
	if crossed == 0 {
		t.Fatal("no prompt of b was dropped as a near-copy of one of a: the state carried nothing")
	}

	saved, _ := os.ReadFile(state)
	never := filepath.Join(dir, "never.jsonl")
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--near", "--normalize", "ws", "--bands", "16"}, "--bands 14"},
		{[]string{"--near", "--normalize", "ws", "--rows", "7"}, "--rows 8"},
		{[]string{"--near", "--normalize", "ws", "--shingle", "4"}, "--shingle 5"},
		{[]string{"--near", "--normalize", "ws", "--seed", "2"}, "--seed 1"},
		{[]string{"--near", "--normalize", "lower"}, "--normalize ws"},
		{[]string{"--normalize", "ws"}, "--near on"},
	} {
		r := runBinary(t, nil, nil, append(tc.args, "--state", state, "-o", never, "--dups", never+".dups", b)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("%v: exit %d, want 2 saying %q:\n%s", tc.args, r.code, tc.says, r.stderr)
		}
	}
	if after, _ := os.ReadFile(state); !bytes.Equal(after, saved) {
		t.Error("a refused run changed the state")
	}
	// The threshold is not part of the state.
	if r := runBinary(t, nil, nil, "--near", "--normalize", "ws", "--threshold", "0.9", "--state", state, "-o", os.DevNull, b); r.code != 0 {
		t.Errorf("another --threshold: exit %d: %s", r.code, r.stderr)
	}
	plain := filepath.Join(dir, "plain.state")
	if r := runBinary(t, nil, nil, "--state", plain, "-o", os.DevNull, a); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := runBinary(t, nil, nil, "--near", "--state", plain, "-o", never, b); r.code != 2 || !strings.Contains(r.stderr, "--near off") {
		t.Errorf("a state without --near, a run with it: exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(never); err == nil {
		t.Error("a refused run wrote its output")
	}
}

// TestBinaryNearKilled: dedup --near --state, killed with SIGKILL while it
// is reading (past several batches, its signatures spilling to the state's
// directory), leaves the old state as it was, no output and nothing in
// the directory but the state and its lock; a rerun over the same input
// then gives the full result.
func TestBinaryNearKilled(t *testing.T) {
	input := nearCorpus(testbin.Size(6000, 20000), 3)
	dir := t.TempDir()
	state, out := filepath.Join(dir, "seen.state"), filepath.Join(dir, "out.jsonl")
	seed := nearCorpus(200, 4)
	if r := runBinary(t, seed, nil, "--near", "--state", state, "-o", os.DevNull); r.code != 0 {
		t.Fatal(r.stderr)
	}
	old, _ := os.ReadFile(state)
	args := []string{"--near", "--state", state, "-o", out, "--memory", "64KiB", "--progress", "5ms"}
	p := testbin.Start(t, "dedup", args...)
	half := len(input) * 2 / 3
	go p.Stdin.Write(input[:half]) // the pipe stays open: dedup waits for more
	p.WaitFor(t, testbin.Timeout, `read [1-9][0-9]{3,}, kept`)
	p.Signal(t, os.Kill)
	p.Wait(t, testbin.Timeout)
	if after, _ := os.ReadFile(state); !bytes.Equal(after, old) {
		t.Fatal("the killed run changed the state")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		// OUT.tmp-* is -o's unfinished file, which SIGKILL leaves as it
		// does for every tool (RELIABILITY.md); no spill file is left.
		if e.Name() != "seen.state" && e.Name() != "seen.state.lock" && !strings.HasPrefix(e.Name(), "out.jsonl.tmp-") {
			t.Errorf("the killed run left %s", e.Name())
		}
	}
	ref := filepath.Join(t.TempDir(), "ref.state")
	os.WriteFile(ref, old, 0o644)
	want := runBinary(t, input, nil, "--near", "--state", ref, "-o", "-")
	got := runBinary(t, input, nil, "--near", "--state", state, "-o", "-")
	if want.code != 0 || got.code != 0 || got.stdout != want.stdout || len(got.stdout) == 0 {
		t.Fatalf("the rerun after the kill: exit %d, %d bytes; a run from the old state: exit %d, %d bytes",
			got.code, len(got.stdout), want.code, len(want.stdout))
	}
}

// TestRealDataNear runs extract | dedup --near over real datasets and
// checks the result against the exact Jaccard similarity of every pair's
// shingles (of the text --near compares, made by the Keyer): every drop
// is of a pair truly similar (exact J at least the threshold less 0.15,
// the estimate's error being about 0.04), no kept prompt has a kept
// earlier one at exact J >= threshold + 0.1, and the counts are pinned.
// The Alpaca demo has no near-copies at 0.8 beyond its 14 exact ones; the
// Glaive tool-call demo has prompts that share their tools and differ in a
// few words, found at 0.6; the Infinity-Instruct-schema Parquet file holds
// 52 distinct prompts, none a near-copy of another.
func TestRealDataNear(t *testing.T) {
	for _, tc := range []struct {
		file             string
		threshold        string
		read, kept, near int
	}{
		{"alpaca_en_demo.json", "0.8", 999, 985, 0},
		{"glaive_toolcall_en_demo.json", "0.6", 300, 257, 5},
		{"ii_0625_style.parquet", "0.8", 500, 52, 0},
	} {
		t.Run(tc.file, func(t *testing.T) {
			ex := testbin.Run(t, "", nil, nil, "extract", testbin.RealData(t, tc.file))
			if ex.Code != 0 {
				t.Fatalf("extract: exit %d: %s", ex.Code, ex.Stderr)
			}
			input := ex.Stdout
			dir := t.TempDir()
			out, dups, clusters := filepath.Join(dir, "out"), filepath.Join(dir, "dups"), filepath.Join(dir, "clusters")
			r := runBinary(t, input, nil, "--near", "--threshold", tc.threshold, "-o", out, "--dups", dups, "--clusters", clusters)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			kept, _ := os.ReadFile(out)
			dupData, _ := os.ReadFile(dups)
			checkAccounting(t, input, kept, dupData)

			var threshold float64
			fmt.Sscan(tc.threshold, &threshold)
			k, _ := NewKeyer(KeyPrompt, None)
			h := minhash.NewHasher(minhash.Params{Bands: 14, Rows: 8, Shingle: 5, Seed: 1})
			ids := idsOf(t, input)
			index := map[string]int{}
			var sets [][]uint64
			for i, line := range lines(string(input)) {
				if _, err := k.Key([]byte(line)); err != nil {
					t.Fatal(err)
				}
				set := h.Shingles(nil, k.Text())
				slices.Sort(set)
				sets = append(sets, slices.Compact(set))
				index[ids[i]] = i
			}
			jaccard := func(i, j int) float64 {
				a, b := sets[i], sets[j]
				both := 0
				for x, y := 0, 0; x < len(a) && y < len(b); {
					switch {
					case a[x] == b[y]:
						both++
						x++
						y++
					case a[x] < b[y]:
						x++
					default:
						y++
					}
				}
				return float64(both) / float64(len(a)+len(b)-both)
			}
			cl := readClusters(t, clusters)
			for _, c := range cl {
				id, of := index[*c.ID], index[*c.DupOf]
				if j := jaccard(id, of); of >= id || j < threshold-0.15 {
					t.Errorf("%s dropped as a near-copy of %s (estimate %.3f), exact Jaccard %.3f", *c.ID, *c.DupOf, *c.Similarity, j)
				}
			}
			keptIdx := []int{}
			for _, id := range idsOf(t, kept) {
				keptIdx = append(keptIdx, index[id])
			}
			for x, j := range keptIdx {
				for _, i := range keptIdx[:x] {
					if jaccard(i, j) >= threshold+0.1 {
						t.Errorf("%s and %s are both kept at exact Jaccard %.3f", ids[i], ids[j], jaccard(i, j))
					}
				}
			}
			m := nearSummary.FindStringSubmatch(r.stderr)
			want := []string{fmt.Sprint(tc.read), fmt.Sprint(tc.kept), fmt.Sprint(tc.read - tc.kept - tc.near), fmt.Sprint(tc.near)}
			if m == nil || !slices.Equal(m[1:], want) || len(cl) != tc.near {
				t.Fatalf("summary:\n%s\nwant read, kept, removed, near %v and as many clusters lines (%d)", r.stderr, want, len(cl))
			}
			t.Logf("%s at --threshold %s: read %s, kept %s, removed %s exact copies and %s near-duplicates", tc.file, tc.threshold, m[1], m[2], m[3], m[4])
		})
	}
}
