package merge

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/zeebo/xxh3"
)

// summaryCounts are the numbers of merge's summary line.
var summaryCounts = regexp.MustCompile(`read (\d+), unique out (\d+), replaced (\d+), missing (\d+)`)

// brutePaths writes a random run's answer files and returns them, with
// every line of them in read order.
func brutePaths(t *testing.T, dir string) (inputs, lines []string) {
	t.Helper()
	for i, f := range newBruteRun(7, 400, 2, 3000).files {
		inputs = append(inputs, writeLines(t, filepath.Join(dir, fmt.Sprintf("gen-%d.jsonl", i)), f))
		lines = append(lines, f...)
	}
	return inputs, lines
}

// TestReadBackSameAsHeld: records read back from regular files come out
// byte for byte as the same records held in memory when they come from a
// FIFO or stdin, in memory and spilled, with one worker or two; every
// record read is accounted for: each key ends up exactly once, in the
// output or the errors file.
func TestReadBackSameAsHeld(t *testing.T) {
	dir := t.TempDir()
	inputs, lines := brutePaths(t, dir)
	all := writeLines(t, filepath.Join(dir, "all.jsonl"), lines)
	keys := map[string]bool{}
	for _, l := range lines {
		p, rej := parseRecord([]byte(l))
		if rej != nil {
			t.Fatalf("%s: %s", l, rej.detail)
		}
		keys[p.id.Text+"/"+strconv.Itoa(p.sample)] = true
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	merge := func(t *testing.T, stdin string, args ...string) (out, errs string) {
		t.Helper()
		o, e := filepath.Join(t.TempDir(), "out.jsonl"), filepath.Join(t.TempDir(), "errors.jsonl")
		var in *strings.Reader
		if stdin != "" {
			in = strings.NewReader(stdin)
		}
		var fed chan error
		for _, a := range args {
			if a == fifo {
				fed = make(chan error, 1)
				go func() {
					f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
					if err == nil {
						_, err = f.WriteString(strings.Join(lines, "\n") + "\n")
						f.Close()
					}
					fed <- err
				}()
			}
		}
		var code int
		var stderr string
		if in != nil {
			code, _, stderr = runMerge(t, context.Background(), in, append([]string{"-o", o, "--errors", e}, args...)...)
		} else {
			code, _, stderr = runMerge(t, context.Background(), nil, append([]string{"-o", o, "--errors", e}, args...)...)
		}
		if fed != nil {
			if err := <-fed; err != nil {
				t.Fatal(err)
			}
		}
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		c := summaryCounts.FindStringSubmatch(stderr)
		if c == nil {
			t.Fatalf("no summary in %s", stderr)
		}
		gotOut, _ := os.ReadFile(o)
		gotErrs, _ := os.ReadFile(e)
		nOut, nErrs := len(splitLines(string(gotOut))), len(splitLines(string(gotErrs)))
		if c[1] != strconv.Itoa(len(lines)) || c[2] != strconv.Itoa(nOut) || c[4] != strconv.Itoa(nErrs) ||
			nOut+nErrs != len(keys) || c[3] != strconv.Itoa(len(lines)-len(keys)) {
			t.Fatalf("read %d lines of %d keys; wrote %d answers and %d errors; summary %q", len(lines), len(keys), nOut, nErrs, c[0])
		}
		return string(gotOut), string(gotErrs)
	}
	stdin := strings.Join(lines, "\n") + "\n"
	for _, memory := range []string{"512MiB", "4KiB"} {
		wantOut, wantErrs := merge(t, stdin, "--memory", memory, "--workers", "1", "-")
		sortedOut, sortedErrs := merge(t, stdin, "--memory", memory, "--workers", "1", "--sort", "-")
		if wantOut == "" || wantErrs == "" || sortedOut == wantOut {
			t.Fatal("the run exercises no answers, no errors or no sorting")
		}
		for _, tc := range []struct {
			name   string
			sorted bool
			args   []string
		}{
			{"files", false, inputs},
			{"one file", false, []string{all}},
			{"one file, one worker", false, []string{"--workers", "1", all}},
			{"fifo", false, []string{fifo}},
			{"sorted files", true, append([]string{"--sort"}, inputs...)},
		} {
			t.Run(memory+"/"+tc.name, func(t *testing.T) {
				out, errs := merge(t, "", append([]string{"--memory", memory}, tc.args...)...)
				wo, we := wantOut, wantErrs
				if tc.sorted {
					wo, we = sortedOut, sortedErrs
				}
				if out != wo || errs != we {
					t.Fatalf("output (%d bytes) or errors (%d bytes) differ from the held records' (%d, %d)", len(out), len(errs), len(wo), len(we))
				}
			})
		}
	}
}

// TestReadBackRefusesChangedFile: a file changed in place between the
// reading and the writing (truncated, or bytes of a winning record
// overwritten) is refused, exit 1, and no output file is left; one
// replaced by a new file under its name, or appended to, is still read
// back as it was read.
func TestReadBackRefusesChangedFile(t *testing.T) {
	dir := t.TempDir()
	inputs, lines := brutePaths(t, dir)
	original := map[string][]byte{}
	for _, in := range inputs {
		original[in], _ = os.ReadFile(in)
	}
	restore := func() {
		for name, b := range original {
			os.Remove(name)
			if err := os.WriteFile(name, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	ref := filepath.Join(t.TempDir(), "ref.jsonl")
	if code, _, stderr := runMerge(t, context.Background(), nil, append([]string{"-o", ref}, inputs...)...); code != 0 {
		t.Fatalf("reference: exit %d\n%s", code, stderr)
	}
	want, _ := os.ReadFile(ref)
	last := inputs[len(inputs)-1]
	for _, tc := range []struct {
		name   string
		change func(t *testing.T)
		refuse bool
	}{
		{"truncated", func(t *testing.T) {
			if err := os.Truncate(last, int64(len(original[last])/2)); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"overwritten in place", func(t *testing.T) {
			// Same length, other bytes, in every record.
			for _, in := range inputs {
				f, err := os.OpenFile(in, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte(strings.ReplaceAll(string(original[in]), `"id"`, `"ID"`)), 0); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
		}, true},
		{"replaced by rename", func(t *testing.T) {
			tmp := last + ".new"
			if err := os.WriteFile(tmp, []byte("{\"id\":\"other\"}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, last); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"appended to", func(t *testing.T) {
			f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(lines[0] + "\n")
			f.Close()
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore()
			defer restore()
			afterReading = func() { tc.change(t) }
			defer func() { afterReading = nil }()
			out := filepath.Join(t.TempDir(), "out.jsonl")
			code, _, stderr := runMerge(t, context.Background(), nil, append([]string{"-o", out}, inputs...)...)
			got, err := os.ReadFile(out)
			switch {
			case tc.refuse && (code != 1 || !strings.Contains(stderr, "changed while merging")):
				t.Fatalf("exit %d, want 1 and the file named as changed:\n%s", code, stderr)
			case tc.refuse && err == nil:
				t.Fatalf("a refused merge left %s (%d bytes)", out, len(got))
			case !tc.refuse && (code != 0 || string(got) != string(want)):
				t.Fatalf("exit %d, %d bytes out, want 0 and the reference's %d:\n%s", code, len(got), len(want), stderr)
			}
		})
	}
}

// TestKeyHashCollisions: keys whose hashes collide in the table's index
// (every key's, here) still resolve each on its own: the same output and
// errors, in memory and spilled.
func TestKeyHashCollisions(t *testing.T) {
	dir := t.TempDir()
	inputs, _ := brutePaths(t, dir)
	run := func(memory string) (string, string) {
		o, e := filepath.Join(t.TempDir(), "out.jsonl"), filepath.Join(t.TempDir(), "errors.jsonl")
		code, _, stderr := runMerge(t, context.Background(), nil, append([]string{"--memory", memory, "-o", o, "--errors", e}, inputs...)...)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		out, _ := os.ReadFile(o)
		errs, _ := os.ReadFile(e)
		return string(out), string(errs)
	}
	wantOut, wantErrs := run("512MiB")
	real := keyHash
	keyHash = func(string, int) uint64 { return 42 }
	defer func() { keyHash = real }()
	for _, memory := range []string{"512MiB", "16KiB"} {
		if out, errs := run(memory); out != wantOut || errs != wantErrs {
			t.Fatalf("--memory %s: with every key's hash the same, the output (%d bytes) or errors (%d) differ from %d, %d", memory, len(out), len(errs), len(wantOut), len(wantErrs))
		}
	}
}

// TestReadBackManyFiles: records read back from more files than there are
// windows, in an order that hops between them, come back as they are in
// the files, and no more than maxWindows windows are held at once.
func TestReadBackManyFiles(t *testing.T) {
	dir := t.TempDir()
	m := &merger{}
	defer m.closeSources()
	type rec struct {
		name      string
		off, size int
	}
	var recs []rec
	contents := map[string]string{}
	for f := range 3 * maxWindows {
		var b strings.Builder
		for i := range 300 {
			line := fmt.Sprintf(`{"id":"f%d-%d","pad":"%s"}`, f, i, strings.Repeat("x", (f*i)%5000))
			recs = append(recs, rec{filepath.Join(dir, fmt.Sprintf("f%d.jsonl", f)), b.Len(), len(line)})
			b.WriteString(line + "\n")
		}
		name := filepath.Join(dir, fmt.Sprintf("f%d.jsonl", f))
		contents[name] = b.String()
		if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Hop: the i-th record of each file in turn, then backwards now and then.
	for k := range recs {
		r := recs[(k%(3*maxWindows))*300+(k/(3*maxWindows)*7)%300]
		want := contents[r.name][r.off : r.off+r.size]
		var e entry
		if !m.address(&e, r.name, int64(r.off), []byte(want), xxh3.HashString(want)) {
			t.Fatal("could not address a regular file")
		}
		got, err := m.recordOf(&e)
		if err != nil || string(got) != want {
			t.Fatalf("%s at %d: %.40q, %v; want %.40q", r.name, r.off, got, err, want)
		}
		held := 0
		for _, s := range m.sources {
			if s.buf != nil {
				held++
			}
		}
		if held > maxWindows {
			t.Fatalf("%d windows held, at most %d", held, maxWindows)
		}
	}
}

// TestReadBackOutputIsAnInput: -o may name one of the inputs (merge
// compacts a file in place, with --force). The winners are read back from
// the file as it was opened, so the file it is replaced by holds exactly
// what the merge writes elsewhere, whichever input it names.
func TestReadBackOutputIsAnInput(t *testing.T) {
	dir := t.TempDir()
	inputs, _ := brutePaths(t, dir)
	ref := filepath.Join(t.TempDir(), "ref.jsonl")
	if code, _, stderr := runMerge(t, context.Background(), nil, append([]string{"-o", ref}, inputs...)...); code != 0 {
		t.Fatalf("reference: exit %d\n%s", code, stderr)
	}
	want, _ := os.ReadFile(ref)
	for i := range inputs {
		originals := map[string][]byte{}
		for _, in := range inputs {
			originals[in], _ = os.ReadFile(in)
		}
		target := inputs[i]
		if code, _, stderr := runMerge(t, context.Background(), nil, append([]string{"--force", "-o", target}, inputs...)...); code != 0 {
			t.Fatalf("-o %s: exit %d\n%s", filepath.Base(target), code, stderr)
		}
		if got, _ := os.ReadFile(target); !bytes.Equal(got, want) {
			t.Errorf("-o %s (an input): %d bytes, want the %d the merge writes elsewhere", filepath.Base(target), len(got), len(want))
		}
		for in, b := range originals { // put the inputs back for the next round
			if err := os.WriteFile(in, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
