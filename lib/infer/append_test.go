package infer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
	"tokenmill/lib/conversation"
	"tokenmill/lib/record"
)

// --append answers every prompt of the input, one -o already answers
// too, where --resume skips it: the rerun of a to-do list that holds
// unfit answers asks for them again. Each run leaves its errors file,
// empty when nothing failed.
func TestAppendAnswersAgain(t *testing.T) {
	t.Parallel()
	var reqlog lockedBuffer
	s := newSetup(t, llmsim.Config{Instant: true, RequestLog: &reqlog}, 1, promptSet{n: 10})
	runWant(t, cli.ExitOK, s.args("--max-tokens", "8", "--seed", "1")...)
	checkEmptyErrors(t, s.errs())
	first := readRecords(t, s.out)

	res := runWant(t, cli.ExitOK, s.args("--max-tokens", "8", "--seed", "1", "--resume")...)
	if n := len(readRecords(t, s.out)); n != 10 || !strings.Contains(res.stderr, "skipped 10") {
		t.Fatalf("--resume: %d records, want the 10 kept:\n%s", n, res.stderr)
	}
	res = runWant(t, cli.ExitOK, s.args("--max-tokens", "8", "--append", "--seed", "1", "--seed-offset", "3")...)
	if !strings.Contains(res.stderr, "appending to "+s.out+": 10 answers already in it, none skipped") || !strings.Contains(res.stderr, "ok 10, failed 0, skipped 0") {
		t.Errorf("--append's summary:\n%s", res.stderr)
	}
	if strings.Contains(res.stderr, "--seed-offset 4") {
		t.Errorf("--append with --seed-offset 3 chose an offset of its own:\n%s", res.stderr)
	}
	all := readRecords(t, s.out)
	if len(all) != 20 {
		t.Fatalf("%d records after --append, want the 10 kept and 10 new", len(all))
	}
	for i, g := range all[:10] {
		if g.raw != first[i].raw {
			t.Fatalf("record %d changed: %s", i, g.raw)
		}
	}
	checkExactlyOnce(t, s.lines, 1, all[10:], nil)
	checkEmptyErrors(t, s.errs())
	// A round without --seed-offset asks past every seed the file's
	// answers took (1+0 and 1+3), and says so.
	res = runWant(t, cli.ExitOK, s.args("--max-tokens", "8", "--append", "--seed", "1")...)
	if !strings.Contains(res.stderr, "asking with --seed-offset 4,") {
		t.Errorf("--append without --seed-offset did not say the offset it chose:\n%s", res.stderr)
	}
	all = readRecords(t, s.out)
	checkExactlyOnce(t, s.lines, 1, all[20:], nil)
	s.fleet.Close() // flushes the request log
	checkSeedRounds(t, all, parseRequestLog(t, []byte(reqlog.String())), []int64{0, 3, 4})

	for _, args := range [][]string{{"--append"}, {"--append", "--resume"}, {"--append", "--force"}, {"--append", "--redo-length"}} {
		if len(args) > 1 {
			args = append(args, "-o", s.out)
		}
		r := runWant(t, cli.ExitUsage, append([]string{"-e", "127.0.0.1:1", s.in}, args...)...)
		if !strings.Contains(r.stderr, "--append") && !strings.Contains(r.stderr, "--redo-length goes with --resume") {
			t.Errorf("%v: %s", args, r.stderr)
		}
	}

	// A file whose answers took seeds up to the largest integer leaves no
	// offset to pick: refused, the file as it was.
	huge := filepath.Join(s.dir, "huge.jsonl")
	hugeLine := `{"id":"p0","output":{"text":"x","finish_reason":"stop","sample":0,"seed_offset":9223372036854775806}}` + "\n"
	os.WriteFile(huge, []byte(hugeLine), 0o644)
	r := runWant(t, cli.ExitUsage, "-e", endpointsFlag(s.fleet.URLs()), "--append", "--seed", "1", "-o", huge, s.in)
	if b, _ := os.ReadFile(huge); string(b) != hugeLine || !strings.Contains(r.stderr, "give --seed-offset") {
		t.Errorf("seeds past the largest integer: %q left, stderr:\n%s", b, r.stderr)
	}
}

// checkSeedRounds checks that the records, 10 a round, carry the rounds'
// seed offsets, and that the server was asked each round with --seed 1
// plus that offset, no seed twice.
func checkSeedRounds(t *testing.T, recs []genRecord, reqs []loggedRequest, offsets []int64) {
	t.Helper()
	if len(recs) != 10*len(offsets) || len(reqs) != len(recs) {
		t.Fatalf("%d records and %d requests, want %d of each", len(recs), len(reqs), 10*len(offsets))
	}
	seeds := map[int64]int{}
	for i, g := range recs {
		var o struct {
			SeedOffset int64 `json:"seed_offset"`
		}
		v, _ := record.FieldValue([]byte(g.raw), "output")
		if err := json.Unmarshal(v, &o); err != nil || o.SeedOffset != offsets[i/10] {
			t.Fatalf("record %d: output.seed_offset %d (%v), want round %d's %d", i, o.SeedOffset, err, i/10, offsets[i/10])
		}
	}
	for _, r := range reqs {
		if r.Body.Seed == nil {
			t.Fatalf("a request without a seed: %+v", r.Body)
		}
		seeds[*r.Body.Seed]++
	}
	for _, off := range offsets {
		if seeds[1+off] != 10 {
			t.Errorf("seed %d asked %d times, want once per prompt (10): %v", 1+off, seeds[1+off], seeds)
		}
	}
}

func checkEmptyErrors(t *testing.T, path string) {
	t.Helper()
	if st, err := os.Stat(path); err != nil || st.Size() != 0 {
		t.Fatalf("the errors file of a run where nothing failed: %v, want it there and empty", err)
	}
}

// --append --regenerate answers every conversation again, and continues
// the unfinished ones from the turn journal.
func TestRegenerateAppend(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, lines := conversations(t, dir, false, 20)
	out := filepath.Join(dir, "regen.jsonl")
	// Second turns are refused for good: the conversations that have one
	// go to the errors file, their first turn in the journal.
	url := firstTurnsOnly(t)
	if r := runBinary(t, "-e", url, "--regenerate", "-o", out, in, "--progress", "0"); r.Code != cli.ExitRejects {
		t.Fatalf("exit %d, want 3\n%s", r.Code, r.Stderr)
	}
	done := readRecords(t, out)
	failed := len(readRecords(t, filepath.Join(dir, "regen.errors.jsonl")))
	if len(done) == 0 || failed == 0 || len(done)+failed != len(lines) {
		t.Fatalf("%d done and %d failed of %d: the test needs some of each", len(done), failed, len(lines))
	}

	sim := startSim(t, 1, "--instant", "--model", "m") // the model the first server served
	r := runBinary(t, "-e", sim.urls[0], "--regenerate", "--append", "-o", out, in, "--progress", "0")
	if r.Code != cli.ExitOK {
		t.Fatalf("--append: exit %d\n%s", r.Code, r.Stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("appending to %s: %d answers already in it, none skipped; %d unfinished conversations continue from %d turns", out, len(done), failed, failed),
		fmt.Sprintf("ok %d, failed 0, skipped 0", len(lines)),
	} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	all := readRecords(t, out)
	checkConversations(t, lines, convCheck{samples: 1}, all[len(done):], nil)
	continued := 0
	for _, g := range all[len(done):] {
		if strings.HasSuffix(g.Output.Messages[g.Output.Turns[0].Message].Content, firstMark) {
			continued++
		}
	}
	if continued != failed {
		t.Errorf("%d conversations went on from their journaled first turn, want %d", continued, failed)
	}
	if _, err := os.Stat(conversation.JournalPath(out)); !os.IsNotExist(err) {
		t.Errorf("the journal is left after the run completed: %v", err)
	}
}

// A record whose "sample" (with the --samples after it) is not a sample
// number merge takes, or whose last sample's seed would pass the largest
// integer, is rejected at input as bad_sample; --samples and a --seed
// that would wrap are usage errors.
func TestBadSample(t *testing.T) {
	t.Parallel()
	s := newSetup(t, llmsim.Config{Instant: true}, 1, promptSet{n: 3})
	f, _ := os.OpenFile(s.in, os.O_APPEND|os.O_WRONLY, 0)
	for _, sample := range []string{"-1", "1.5", `"2"`, "1e3", fmt.Sprint(record.MaxSample), "99999999999999999999"} {
		fmt.Fprintf(f, `{"id":"s%s","sample":%s,"messages":[{"role":"user","content":"hi"}]}`+"\n", strings.Trim(sample, `"`), sample)
	}
	fmt.Fprintf(f, `{"id":"top","sample":%d,"messages":[{"role":"user","content":"hi"}]}`+"\n", record.MaxSample-1)
	fmt.Fprintf(f, `{"id":"wraps","params":{"seed":%d},"messages":[{"role":"user","content":"hi"}]}`+"\n", int64(1<<63-1))
	f.Close()
	rej := filepath.Join(s.dir, "rejects.jsonl")
	res := runWant(t, cli.ExitRejects, s.args("--samples", "2", "--max-tokens", "4", "--rejects", rej)...)
	got := strings.Split(strings.TrimSpace(string(mustRead(t, rej))), "\n")
	if len(got) != 7 || !strings.Contains(res.stderr, "4 prompts, 7 rejected") {
		t.Fatalf("%d rejects, want the 7 bad samples:\n%s", len(got), res.stderr)
	}
	for _, g := range got {
		if !strings.Contains(g, `"reason":"bad_sample"`) {
			t.Errorf("not a bad_sample: %s", g)
		}
	}
	if n := len(readRecords(t, s.out)); n != 4*2 {
		t.Errorf("%d answers, want 2 samples of each of the 4 good prompts", n)
	}
	for _, args := range [][]string{
		{"--samples", fmt.Sprint(record.MaxSample + 2)},
		{"--samples", "9223372036854775807"},
		{"--seed", "9223372036854775806", "--samples", "3"},
		{"--seed", "1", "--seed-offset", "9223372036854775807"},
	} {
		r := runWant(t, cli.ExitUsage, append([]string{"-e", "127.0.0.1:1", "-o", filepath.Join(s.dir, "x.jsonl"), s.in}, args...)...)
		if !strings.Contains(r.stderr, "--samples") {
			t.Errorf("%v: %s", args, r.stderr)
		}
	}
}
