package filter

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tokenmill/internal/llmsim"
	"tokenmill/internal/testbin"
	"tokenmill/lib/quality"
)

// writeRecords writes lines to dir/name, one a line, and returns its path.
func writeRecords(t testing.TB, dir, name string, lines ...string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for _, l := range lines {
		w.WriteString(l)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHugeAnswers: a huge answer that does not loop is kept byte for byte
// and one that does is dropped with the detail the loop check gives the
// same text in process, between small records, with every line
// accounted for.
func TestHugeAnswers(t *testing.T) {
	size := testbin.Size(9<<20, 200<<20)
	prose := llmsim.Prose(size)
	looping := prose[:size/2] + prose[:size/2]
	detail, bad := quality.Loop(looping, &quality.DefaultLoop, nil)
	if !bad {
		t.Fatal("the doubled text is not a loop")
	}
	if d, bad := quality.Loop(prose, &quality.DefaultLoop, nil); bad {
		t.Fatalf("the prose is a loop: %s", d)
	}
	lines := []string{gen("small", goodText, "", "stop"), gen("huge", prose, "", "stop"), gen("huge-loop", looping, "", "stop"), gen("last", goodText, "", "stop")}
	dir := t.TempDir()
	in := writeRecords(t, dir, "gen.jsonl", lines...)
	unfit := filepath.Join(dir, "unfit.jsonl")
	out := filepath.Join(dir, "fit.jsonl")
	r := testbin.Run(t, dir, nil, nil, "filter", "--progress", "0", "--rejects", unfit, "-o", out, in)
	if r.Code != 0 || !strings.Contains(r.Stderr, "read 4, kept 3, dropped 1 (loop 1)") {
		t.Fatalf("exit %d, want 0 and 1 loop dropped:\n%s", r.Code, r.Stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := lines[0] + "\n" + lines[1] + "\n" + lines[3] + "\n"; string(got) != want {
		t.Fatalf("fit output: %d bytes, want the 3 fit records byte for byte (%d bytes)", len(got), len(want))
	}
	rejects := readLines(t, unfit)
	if len(rejects) != 1 {
		t.Fatalf("%d rejects, want 1", len(rejects))
	}
	var rec struct {
		ID     string `json:"id"`
		Reject struct{ Reason, Detail string }
	}
	if err := json.Unmarshal([]byte(rejects[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.ID != "huge-loop" || rec.Reject.Reason != "loop" || rec.Reject.Detail != detail {
		t.Fatalf("rejected %s for %s %q, want huge-loop for loop %q", rec.ID, rec.Reject.Reason, rec.Reject.Detail, detail)
	}
	if !strings.HasPrefix(rejects[0], strings.TrimSuffix(lines[2], "}")) {
		t.Error("the rejected record is not the input record plus its reject field")
	}
}

// BenchmarkHugeAnswerPeakRSS: the binary's peak resident memory for one
// 200 MB answer of prose that does not repeat itself (the loop check's
// worst case: a hash per word, a table slot per distinct n-gram), between
// two small records; peak-per-line is that peak over the line's bytes.
func BenchmarkHugeAnswerPeakRSS(b *testing.B) {
	small, line, last := gen("small", goodText, "", "stop"), gen("huge", llmsim.Prose(200<<20), "", "stop"), gen("last", goodText, "", "stop")
	path := writeRecords(b, b.TempDir(), "huge.jsonl", small, line, last)
	b.SetBytes(int64(len(line)))
	var peak int64
	for range b.N {
		cmd := testbin.Command("filter", "--progress", "0", path)
		var out countWriter
		var stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil || !strings.Contains(stderr.String(), "read 3, kept 3") {
			b.Fatalf("%v:\n%s", err, stderr.String())
		}
		if want := len(small) + len(line) + len(last) + 3; out.n != want {
			b.Fatalf("%d bytes out, want the %d of the three records", out.n, want)
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			peak = max(peak, ru.Maxrss*1024)
		}
	}
	b.ReportMetric(float64(peak), "peak-RSS-bytes")
	b.ReportMetric(float64(peak)/float64(len(line)), "peak-per-line")
}

// countWriter counts the bytes written to it.
type countWriter struct{ n int }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}
