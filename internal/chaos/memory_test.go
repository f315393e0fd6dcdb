package chaos

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tokenmill/internal/testbin"
)

// overlongLine is the length of the line the memory benchmarks put
// between two good records: past the 1 GiB line limit.
const overlongLine = 1100 << 20

// overlongStream is answers(1), a line of n bytes, answers(1) again,
// made as it is read: a pipe's worth that is never held whole.
type overlongStream struct {
	head, tail []byte
	n, done    int64
}

func newOverlongStream(n int64) *overlongStream {
	return &overlongStream{head: append(answers(1), `{"t":"`...), tail: append([]byte("\"}\n"), answers(2)[len(answers(1)):]...), n: n}
}

func (o *overlongStream) Read(p []byte) (int, error) {
	head, body := int64(len(o.head)), o.n
	total := head + body + int64(len(o.tail))
	if o.done >= total {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && o.done < total {
		switch i := o.done; {
		case i < head:
			c := copy(p[k:], o.head[i:])
			k, o.done = k+c, o.done+int64(c)
		case i < head+body:
			c := int(min(int64(len(p)-k), head+body-i))
			for j := range c {
				p[k+j] = 'x'
			}
			k, o.done = k+c, o.done+int64(c)
		default:
			c := copy(p[k:], o.tail[i-head-body:])
			k, o.done = k+c, o.done+int64(c)
		}
	}
	return k, nil
}

// writeSparseOverlong writes the same stream to a file whose long line
// is a hole (zeros, no disk).
func writeSparseOverlong(t testing.TB, path string, n int64) {
	t.Helper()
	o := newOverlongStream(n)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(o.head)
	f.Truncate(int64(len(o.head)) + n)
	f.Seek(0, io.SeekEnd)
	f.Write(o.tail)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// memoryTools are the record tools, each with the arguments that make it
// read its input and write to stdout.
var memoryTools = []struct {
	name string
	args []string
}{
	{"extract", nil}, {"dedup", nil}, {"shard", []string{"--select", "0/1"}}, {"merge", nil}, {"stats", []string{"--json"}}, {"filter", nil},
}

// A 1.1 GiB line between two good records, through every record tool's
// binary, from a file (a sparse one) and from a pipe: each skips it as
// line_too_long (exit 3) and keeps the two records. peak-RSS-bytes is the
// process's peak resident memory (getrusage ru_maxrss), the line's size
// aside: a runtime and a 1 MiB read buffer, not the line.
func BenchmarkOverlongLinePeakRSS(b *testing.B) {
	path := filepath.Join(b.TempDir(), "overlong.jsonl")
	writeSparseOverlong(b, path, overlongLine)
	for _, tool := range memoryTools {
		for _, via := range []string{"file", "pipe"} {
			b.Run(tool.name+"/"+via, func(b *testing.B) {
				b.SetBytes(overlongLine)
				var peak int64
				for range b.N {
					args := tool.args
					if via == "file" {
						args = append(append([]string(nil), args...), path)
					}
					cmd := testbin.Command(tool.name, args...)
					if via == "pipe" {
						cmd.Stdin = newOverlongStream(overlongLine)
					}
					var stderr bytes.Buffer
					cmd.Stdout, cmd.Stderr = io.Discard, &stderr
					cmd.Dir = b.TempDir()
					err := cmd.Run()
					if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3 || !strings.Contains(stderr.String(), "line_too_long") {
						b.Fatalf("%s: %v, want exit 3 with line_too_long:\n%s", tool.name, err, stderr.String())
					}
					if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
						peak = max(peak, ru.Maxrss*1024)
					}
				}
				b.ReportMetric(float64(peak), "peak-RSS-bytes")
			})
		}
	}
}
