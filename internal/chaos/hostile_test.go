package chaos

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/testbin"
	"tokenmill/lib/jsonl"
)

// Hostile paths, through the real binaries: inputs that are pipes and
// FIFOs, outputs that alias inputs, planted links, locks, kills and full
// disks. Every record tool is tried the same way.

// answers are n generation records with distinct prompts: every tool
// reads them (extract takes their prompts, merge their answers).
func answers(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"id":"r%d","messages":[{"role":"user","content":"question %d"}],"output":{"text":"answer %d","finish_reason":"stop","sample":0}}`+"\n", i, i, i)
	}
	return b.Bytes()
}

// toolArgs are the arguments that make each tool write records (or its
// report) to stdout from its inputs.
var toolArgs = map[string][]string{
	"extract": nil,
	"dedup":   nil,
	"shard":   {"--select", "0/1"},
	"merge":   nil,
	"stats":   {"--json"},
}

// comparable is a tool's stdout without what depends on the inputs'
// names (stats lists them in its report).
func comparable(t *testing.T, tool string, out []byte) string {
	t.Helper()
	if tool != "stats" {
		return string(out)
	}
	var report map[string]any
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("stats report: %v\n%s", err, out)
	}
	delete(report, "inputs")
	b, _ := json.Marshal(report)
	return string(b)
}

// feedFIFO makes a FIFO at path and writes data into it from a goroutine
// once something opens it; the returned func waits for the writer.
func feedFIFO(t *testing.T, path string, data []byte) func() {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.Write(data)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		done <- err
	}()
	return func() {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("writing the FIFO: %v", err)
			}
		case <-time.After(testbin.Timeout):
			t.Error("the FIFO's writer never finished")
		}
	}
}

// Every tool reads a pipe, a FIFO, /dev/stdin and a process substitution
// whole, exactly as it reads the same records from a regular file.
func TestNonRegularInputs(t *testing.T) {
	input := answers(3000) // several pipe buffers
	for _, tool := range tools {
		t.Run(tool, func(t *testing.T) {
			dir := t.TempDir()
			file := writeFile(t, dir, "in.jsonl", input)
			ref := run(t, dir, nil, tool, append(toolArgs[tool], file)...)
			if ref.Code != 0 || len(ref.Stdout) == 0 {
				t.Fatalf("from a file: exit %d\n%s", ref.Code, ref.Stderr)
			}
			want := comparable(t, tool, ref.Stdout)
			check := func(how string, r testbin.Result) {
				t.Helper()
				if r.Code != 0 || comparable(t, tool, r.Stdout) != want {
					t.Errorf("%s: exit %d, %d bytes out where the file gave %d\n%s", how, r.Code, len(r.Stdout), len(ref.Stdout), r.Stderr)
				}
			}
			check("a pipe on stdin", run(t, dir, input, tool, toolArgs[tool]...))
			check("/dev/stdin", run(t, dir, input, tool, append(toolArgs[tool], "/dev/stdin")...))
			fifo := filepath.Join(dir, "in.fifo")
			wait := feedFIFO(t, fifo, input)
			check("a FIFO", run(t, dir, nil, tool, append(toolArgs[tool], fifo)...))
			wait()
			script := `bin=$1; f=$2; shift 2; exec "$bin" "$@" <(cat "$f")`
			cmd := exec.Command("bash", append([]string{"-c", script, "bash", testbin.Path(tool), file}, toolArgs[tool]...)...)
			cmd.Dir = dir
			check("a process substitution", testbin.Exec(t, cmd))
		})
	}
}

// files lists a directory's names, sorted.
func files(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// No output may be an input or another output, under any name: the tool
// refuses with exit 2, naming both, before it writes anything.
func TestOutputAliases(t *testing.T) {
	input := answers(5)
	cases := []struct {
		tool string
		args []string // in.jsonl is the input; link.jsonl -> in.jsonl, sublink -> sub
		want string
	}{
		{"extract", []string{"-o", "in.jsonl", "--force", "in.jsonl"}, `-o "in.jsonl" is the same file as input "in.jsonl"`},
		{"extract", []string{"--rejects", "link.jsonl", "--force", "in.jsonl"}, `--rejects "link.jsonl" is the same file as input "in.jsonl"`},
		{"extract", []string{"-o", "sub/p.jsonl", "--rejects", "sublink/p.jsonl", "in.jsonl"}, `--rejects "sublink/p.jsonl" is the same file as -o "sub/p.jsonl"`},
		{"extract", []string{"-o", "sub", "in.jsonl"}, `-o "sub" is a directory, not a file`},
		{"dedup", []string{"--dups", "hard.jsonl", "--force", "in.jsonl"}, `--dups "hard.jsonl" is the same file as input "in.jsonl"`},
		{"dedup", []string{"--state", "in.jsonl", "in.jsonl"}, `--state "in.jsonl" is the same file as input "in.jsonl"`},
		{"dedup", []string{"-o", "s.state", "--state", "s.state", "in.jsonl"}, `--state "s.state" is the same file as -o "s.state"`},
		{"dedup", []string{"--rejects", "sub", "in.jsonl"}, `--rejects "sub" is a directory, not a file`},
		{"shard", []string{"-n", "2", "-o", "part-{i}.jsonl", "--force", "part-1.jsonl"}, `-o "part-1.jsonl" is the same file as input "part-1.jsonl"`},
		{"shard", []string{"--by", "lines", "-o", "part-{i}.jsonl", "--force", "part-1.jsonl"}, `-o "part-1.jsonl" is the same file as input "part-1.jsonl"`},
		{"shard", []string{"-n", "2", "-o", "p-{i}.jsonl", "--rejects", "p-0.jsonl", "in.jsonl"}, `-o "p-0.jsonl" is the same file as --rejects "p-0.jsonl"`},
		{"merge", []string{"--errors", "link.jsonl", "--force", "in.jsonl"}, `--errors "link.jsonl" is the same file as input "in.jsonl"`},
		{"merge", []string{"--rejects", "in.jsonl", "--force", "--prompts", "in.jsonl", "new.jsonl"}, `--rejects "in.jsonl" is the same file as --prompts "in.jsonl"`},
		{"merge", []string{"-o", "x.jsonl", "--errors", "sub/../x.jsonl", "in.jsonl"}, `--errors "sub/../x.jsonl" is the same file as -o "x.jsonl"`},
		{"stats", []string{"--plot", "in.svg", "--force", "in.svg"}, `--plot "in.svg" is the same file as input "in.svg"`},
		{"stats", []string{"--rejects", "hard.jsonl", "--force", "in.jsonl"}, `--rejects "hard.jsonl" is the same file as input "in.jsonl"`},
		{"dedup", []string{"-o", "s.state.lock", "--state", "s.state", "in.jsonl"}, `'s lock file`},
		{"merge", []string{"--rejects", "final.jsonl.lock", "-o", "final.jsonl", "in.jsonl"}, `'s lock file`},
	}
	for _, c := range cases {
		t.Run(c.tool+" "+strings.Join(c.args, " "), func(t *testing.T) {
			dir := t.TempDir()
			for _, name := range []string{"in.jsonl", "part-1.jsonl", "in.svg", "new.jsonl"} {
				writeFile(t, dir, name, input)
			}
			os.Symlink("in.jsonl", filepath.Join(dir, "link.jsonl"))
			os.Link(filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "hard.jsonl"))
			os.Mkdir(filepath.Join(dir, "sub"), 0o755)
			os.Symlink("sub", filepath.Join(dir, "sublink"))
			before := files(t, dir)
			r := run(t, dir, nil, c.tool, c.args...)
			if r.Code != 2 || !strings.Contains(r.Stderr, c.want) {
				t.Fatalf("exit %d, want 2 with %q:\n%s", r.Code, c.want, r.Stderr)
			}
			if got := files(t, dir); strings.Join(got, " ") != strings.Join(before, " ") {
				t.Errorf("files before %v, after %v", before, got)
			}
			for _, name := range []string{"in.jsonl", "part-1.jsonl", "in.svg", "new.jsonl"} {
				if b, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(b, input) {
					t.Errorf("%s changed", name)
				}
			}
			if sub := files(t, filepath.Join(dir, "sub")); len(sub) != 0 {
				t.Errorf("files in sub: %v", sub)
			}
		})
	}
	// merge -o may name one of its inputs: the one alias that is a feature.
	dir := t.TempDir()
	in := writeFile(t, dir, "in.jsonl", input)
	if r := run(t, dir, nil, "merge", "--force", "-o", in, in); r.Code != 0 {
		t.Fatalf("merge -o of its input: exit %d\n%s", r.Code, r.Stderr)
	}
	if b, _ := os.ReadFile(in); !bytes.Equal(b, input) {
		t.Errorf("merge into itself changed its records:\n%s", b)
	}
}

// writers are how each tool writes named files, with OUT standing for the
// file the test watches.
var writers = map[string][]string{
	"extract": {"-o", "OUT"},
	"dedup":   {"-o", "OUT"},
	"shard":   {"-n", "1", "-o", "OUT"},
	"merge":   {"-o", "OUT"},
	"stats":   {"--plot", "OUT"},
}

// outName is the file a tool writes for writers' OUT.
func outName(tool string) (arg, file string) {
	switch tool {
	case "shard":
		return "out-{i}.jsonl", "out-0.jsonl"
	case "stats":
		return "out.svg", "out.svg"
	}
	return "out.jsonl", "out.jsonl"
}

func writerArgs(tool, dir string, extra ...string) []string {
	arg, _ := outName(tool)
	var args []string
	for _, a := range writers[tool] {
		if a == "OUT" {
			a = filepath.Join(dir, arg)
		}
		args = append(args, a)
	}
	return append(args, extra...)
}

// A symbolic link at the output is replaced (with --force), never written
// through: the file it points to is untouched.
func TestOutputLinkNotFollowed(t *testing.T) {
	for _, tool := range tools {
		t.Run(tool, func(t *testing.T) {
			dir := t.TempDir()
			in := writeFile(t, dir, "in.jsonl", answers(5))
			victim := writeFile(t, dir, "victim", []byte("precious\n"))
			_, out := outName(tool)
			os.Symlink(victim, filepath.Join(dir, out))
			if r := run(t, dir, nil, tool, writerArgs(tool, dir, in)...); r.Code != 2 || !strings.Contains(r.Stderr, "already exist") {
				t.Fatalf("without --force: exit %d, want 2:\n%s", r.Code, r.Stderr)
			}
			if r := run(t, dir, nil, tool, writerArgs(tool, dir, "--force", in)...); r.Code != 0 {
				t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
			}
			if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
				t.Fatalf("the link's target was written: %q", b)
			}
			if st, err := os.Lstat(filepath.Join(dir, out)); err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
				t.Fatalf("%s is not the new file: %v %v", out, st, err)
			}
		})
	}
}

// waitForFile waits, within a bound, for a file matching glob.
func waitForFile(t *testing.T, p *testbin.Proc, glob string) string {
	t.Helper()
	deadline := time.Now().Add(testbin.Timeout)
	for time.Now().Before(deadline) {
		if m, _ := filepath.Glob(glob); len(m) > 0 {
			return m[0]
		}
		select {
		case <-p.Done():
			t.Fatalf("exited before %s appeared", glob)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no %s within %v", glob, testbin.Timeout)
	return ""
}

// startOnFIFO starts tool with args and a FIFO as its last input, writes
// the first records, and returns the process and a func that writes the
// rest and closes the FIFO.
func startOnFIFO(t *testing.T, dir, tool string, args []string, input []byte) (*testbin.Proc, func()) {
	t.Helper()
	fifo := filepath.Join(dir, "in.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	p := testbin.Start(t, tool, append(args, fifo)...)
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	half := len(input) / 2
	half = bytes.LastIndexByte(input[:half], '\n') + 1
	if _, err := w.Write(input[:half]); err != nil {
		t.Fatal(err)
	}
	return p, func() {
		w.Write(input[half:])
		w.Close()
	}
}

// A temporary file swapped for a link to a victim while the tool writes
// cannot redirect the output: the tool refuses to put it in place (exit
// 1), the victim is untouched, and the link (not the tool's) stays.
func TestSwappedTempFile(t *testing.T) {
	for _, tool := range []string{"extract", "dedup", "shard", "merge"} {
		t.Run(tool, func(t *testing.T) {
			dir := t.TempDir()
			victim := writeFile(t, dir, "victim", []byte("precious\n"))
			_, out := outName(tool)
			p, finish := startOnFIFO(t, dir, tool, writerArgs(tool, dir), answers(2000))
			tmp := waitForFile(t, p, filepath.Join(dir, out+".tmp-*"))
			if err := os.Remove(tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, tmp); err != nil {
				t.Fatal(err)
			}
			finish()
			r := p.Wait(t, testbin.Timeout)
			if r.Code != 1 || !strings.Contains(r.Stderr, "was replaced by something else") {
				t.Fatalf("exit %d, want 1 and a refusal:\n%s", r.Code, r.Stderr)
			}
			if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
				t.Fatalf("victim written: %q", b)
			}
			if _, err := os.Lstat(filepath.Join(dir, out)); err == nil {
				t.Fatalf("%s was put in place", out)
			}
			if st, err := os.Lstat(tmp); err != nil || st.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("the planted link is gone: %v", err)
			}
		})
	}
}

// SIGTERM ends a tool at once, exit 130, while it waits for a FIFO's
// writer (an input); the wait is explained first. (infer and infer
// bench: their packages' TestSignalWhileOpeningFIFO. dedup's --state is
// never waited on: a FIFO there is refused at once, dedup
// TestBinaryStateNotRegular.)
func TestSignalWhileOpeningFIFO(t *testing.T) {
	type tc struct {
		tool string
		args func(fifo string) []string
	}
	var cases []tc
	for _, tool := range tools {
		cases = append(cases, tc{tool, func(fifo string) []string { return append(append([]string{}, toolArgs[tool]...), fifo) }})
	}
	cases = append(cases, tc{"filter", func(fifo string) []string { return []string{fifo} }})
	for _, c := range cases {
		name := c.tool + " " + strings.Join(c.args("FIFO"), " ")
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each waits a second for the notice, idle
			fifo := filepath.Join(t.TempDir(), "nobody-writes.fifo")
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			p := testbin.Start(t, c.tool, c.args(fifo)...)
			p.WaitFor(t, testbin.Timeout, "waiting for a writer to open the FIFO "+fifo)
			p.Signal(t, syscall.SIGTERM)
			r := p.Wait(t, 20*time.Second)
			if r.Code != 130 {
				t.Fatalf("exit %d, want 130:\n%s", r.Code, r.Stderr)
			}
		})
	}
}

// A second run on a locked file (dedup --state, merge -o) is refused at
// once, exit 1, naming the holder's pid; the holder then finishes.
func TestLockedFiles(t *testing.T) {
	for _, c := range []struct {
		tool, flag, file string
	}{{"dedup", "--state", "seen.state"}, {"merge", "-o", "final.jsonl"}} {
		t.Run(c.tool, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(dir, c.file)
			// The file exists (an earlier run's), so that links to it can be
			// made; the lock goes by the file, so a second run on it under
			// another name is refused as under its own.
			extra := []string{}
			if c.tool == "dedup" {
				extra = []string{"-o", os.DevNull}
			}
			if r := run(t, dir, answers(3), c.tool, append([]string{c.flag, target}, extra...)...); r.Code != 0 {
				t.Fatalf("first run: exit %d\n%s", r.Code, r.Stderr)
			}
			link, hard := filepath.Join(dir, "link-"+c.file), filepath.Join(dir, "hard-"+c.file)
			os.Symlink(target, link)
			os.Link(target, hard)
			input := answers(2000)
			p, finish := startOnFIFO(t, dir, c.tool, append([]string{c.flag, target, "--force"}, extra...), input)
			waitForFile(t, p, target+".lock")
			lock, _ := os.ReadFile(target + ".lock")
			pid := strings.TrimSpace(string(lock))
			if _, err := strconv.Atoi(pid); err != nil {
				t.Fatalf("lock file holds %q", lock)
			}
			for _, name := range []struct{ path, want string }{
				{target, fmt.Sprintf("%s %q is in use by process %s (lock %s.lock)", c.flag, target, pid, target)},
				{link, fmt.Sprintf("%s %q is in use by process %s (lock %s.lock)", c.flag, link, pid, target)},
				{hard, fmt.Sprintf("%s %q is in use by another process under another name", c.flag, hard)},
			} {
				second := run(t, dir, answers(3), c.tool, append([]string{c.flag, name.path, "--force"}, extra...)...)
				if second.Code != 1 || !strings.Contains(second.Stderr, name.want) {
					t.Fatalf("second run on %s: exit %d, want 1 with %q:\n%s", name.path, second.Code, name.want, second.Stderr)
				}
			}
			finish()
			if r := p.Wait(t, testbin.Timeout); r.Code != 0 {
				t.Fatalf("the holder: exit %d\n%s", r.Code, r.Stderr)
			}
			for _, name := range files(t, dir) {
				if strings.HasSuffix(name, ".lock") {
					t.Errorf("the lock file %s outlived its run", name)
				}
			}
			if c.tool == "merge" {
				if b, _ := os.ReadFile(target); !bytes.Equal(b, input) {
					t.Errorf("merge output: %d bytes, want the %d of its input", len(b), len(input))
				}
			}
		})
	}
}

// shardFiles are the parts in place in dir (temporary files aside).
func shardFiles(t *testing.T, dir string) []string {
	t.Helper()
	var parts []string
	for _, name := range files(t, dir) {
		if strings.HasPrefix(name, "part-") && !strings.Contains(name, ".tmp-") {
			parts = append(parts, name)
		}
	}
	return parts
}

// checkShards reads every part and checks that each input id is in
// exactly one.
func checkShards(t *testing.T, dir string, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, name := range shardFiles(t, dir) {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		for _, id := range ids(t, b) {
			seen[id]++
		}
	}
	for i := range n {
		if c := seen[fmt.Sprintf("r%d", i)]; c != 1 {
			t.Fatalf("r%d is in %d parts", i, c)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d ids in the parts, want %d", len(seen), n)
	}
}

// shard is all or nothing: killed with SIGKILL while parts are being
// written (by hash, or by lines after the first parts are full), it leaves
// no part in place, and the rerun needs no --force.
func TestShardKilledLeavesNoPart(t *testing.T) {
	// The first half, written before the pause, is more than one of the
	// reader's batches: shard's workers take whole batches, and a batch
	// still filling waits for more input.
	const n = 3 * jsonl.BatchRecords
	input := answers(n)
	for _, c := range []struct {
		name  string
		args  []string
		watch string // the temporary file whose presence means parts are being written
	}{
		{"by hash", []string{"-n", "4"}, "part-3.jsonl.tmp-*"},
		{"by lines", []string{"--by", "lines", "--lines-per-shard", "500"}, "part-2.jsonl.tmp-*"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append(append([]string{}, c.args...), "-o", filepath.Join(dir, "part-{i}.jsonl"))
			p, finish := startOnFIFO(t, dir, "shard", args, input)
			waitForFile(t, p, filepath.Join(dir, c.watch))
			p.Signal(t, syscall.SIGKILL)
			p.Wait(t, testbin.Timeout)
			finish()
			if parts := shardFiles(t, dir); len(parts) != 0 {
				t.Fatalf("parts in place after the kill: %v", parts)
			}
			in := writeFile(t, dir, "in.jsonl", input)
			if r := run(t, dir, nil, "shard", append(args, in)...); r.Code != 0 {
				t.Fatalf("rerun without --force: exit %d\n%s", r.Code, r.Stderr)
			}
			checkShards(t, dir, n)
		})
	}
}

// A full disk (a real one: a small tmpfs) fails shard with exit 1 and
// leaves neither parts nor temporary files.
func TestShardFullDisk(t *testing.T) {
	disk := testbin.SmallDisk(t, 256<<10)
	in := writeFile(t, t.TempDir(), "in.jsonl", answers(20000)) // about 2.5 MB
	r := run(t, disk, nil, "shard", "-n", "4", "-o", filepath.Join(disk, "part-{i}.jsonl"), in)
	if r.Code != 1 || !strings.Contains(r.Stderr, "no space left on device") {
		t.Fatalf("exit %d, want 1 with ENOSPC:\n%s", r.Code, r.Stderr)
	}
	if left := files(t, disk); len(left) != 0 {
		t.Fatalf("left on the full disk: %v", left)
	}
}

// A 70 MiB line (past the old 64 MiB limit; 9 MiB outside the long test
// tier, past every buffer's first size) goes through dedup, merge and
// shard whole, byte for byte, between its neighbours.
func TestLongLineThroughTools(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 70 MiB line")
	}
	size := testbin.Size(9<<20, 70<<20)
	dir := t.TempDir()
	var b bytes.Buffer
	b.Write(answers(2))
	b.WriteString(`{"id":"huge","messages":[{"role":"user","content":"`)
	b.Write(bytes.Repeat([]byte("all work and no play "), size/21))
	b.WriteString(`"}],"output":{"text":"t","finish_reason":"stop","sample":0}}` + "\n")
	input := b.Bytes()
	in := writeFile(t, dir, "in.jsonl", input)
	for _, tool := range []string{"dedup", "merge", "shard"} {
		r := run(t, dir, nil, tool, append(toolArgs[tool], in)...)
		if r.Code != 0 || !bytes.Equal(r.Stdout, input) {
			t.Errorf("%s: exit %d, %d bytes out, want the %d in:\n%s", tool, r.Code, len(r.Stdout), len(input), r.Stderr)
		}
	}
}

// Stdin redirected from a file an output names (tool -o x < x, under any
// name) is that file: every record tool refuses it, exit 2, before the
// file is touched.
func TestStdinAliasesAnOutput(t *testing.T) {
	for _, c := range []struct {
		tool string
		args []string
	}{
		{"extract", []string{"-o", "x.jsonl", "--force"}},
		{"dedup", []string{"--dups", "link.jsonl", "--force"}},
		{"shard", []string{"-n", "1", "-o", "x{i}.jsonl", "--rejects", "x.jsonl", "--force", "-"}},
		{"merge", []string{"--errors", "x.jsonl", "--force"}},
		{"stats", []string{"--rejects", "x.jsonl", "--force"}},
	} {
		t.Run(c.tool, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "x.jsonl", answers(5))
			os.Symlink("x.jsonl", filepath.Join(dir, "link.jsonl"))
			f, err := os.Open(filepath.Join(dir, "x.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd := testbin.Command(c.tool, c.args...)
			cmd.Dir, cmd.Stdin = dir, f
			r := testbin.Exec(t, cmd)
			if r.Code != 2 || !strings.Contains(r.Stderr, "is the same file as the input on stdin") {
				t.Fatalf("exit %d, want 2:\n%s", r.Code, r.Stderr)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "x.jsonl")); !bytes.Equal(b, answers(5)) {
				t.Fatal("the file changed")
			}
		})
	}
}
