package jsonl

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"tokenmill/lib/cli"
)

// TestOutputs: whatever ends the run, the directory holds exactly the
// files the user asked for (all of them, complete) or what it held before
// (no temporary file, no half-written output, nothing lost).
func TestOutputs(t *testing.T) {
	for _, tt := range outputsCases {
		t.Run(tt.name, func(t *testing.T) { tt.run(t) })
	}
}

// outputsBefore is what the directory holds before each case.
var outputsBefore = map[string]string{"in.jsonl": "{\"id\":\"in\"}\n", "old.jsonl": "old\n", "blocker": "a file\n"}

type outputsOut struct {
	flag, name string
	kept       bool
}

type outputsCase struct {
	name    string
	outs    []outputsOut
	force   bool
	link    string // a symbolic link planted at link, to in.jsonl
	end     string // close, abort, fail-later: how the run ends
	refused string // CheckOutputs refuses, saying this
	openErr string // Open fails, saying this
	err     string // the run's end fails, saying this
	want    map[string]string
}

var outputsCases = []outputsCase{
	{name: "close puts every output in place", end: "close",
		outs: []outputsOut{{"-o", "a.jsonl", false}, {"--dups", "b.jsonl", false}, {"--rejects", "old.jsonl", false}}, force: true,
		want: map[string]string{"a.jsonl": "{\"to\":\"-o\"}\n", "b.jsonl": "{\"to\":\"--dups\"}\n", "old.jsonl": "{\"to\":\"--rejects\"}\n"}},
	{name: "abort leaves nothing", end: "abort",
		outs: []outputsOut{{"-o", "a.jsonl", false}, {"--dups", "b.jsonl", false}, {"--rejects", "old.jsonl", false}}, force: true},
	{name: "a later close's error drops the earlier outputs", end: "fail-later",
		outs: []outputsOut{{"-o", "a.jsonl", false}, {"--dups", "old.jsonl", false}}, force: true,
		err: "writing -: no space left on device"},
	{name: "an output that cannot be created drops those opened", end: "close",
		outs:    []outputsOut{{"-o", "a.jsonl", false}, {"--dups", "blocker/b.jsonl", false}, {"--rejects", "c.jsonl", false}},
		openErr: "--dups: "},
	{name: "an existing file without --force", end: "close",
		outs:    []outputsOut{{"-o", "a.jsonl", false}, {"--dups", "old.jsonl", false}},
		refused: `--dups "` + "DIR" + `/old.jsonl" already exists: pass --force to replace it`},
	{name: "an output that is the input", end: "close", force: true,
		outs:    []outputsOut{{"-o", "a.jsonl", false}, {"--rejects", "in.jsonl", false}},
		refused: "is the same file as input"},
	{name: "a planted link to the input", end: "close", force: true, link: "link.jsonl",
		outs:    []outputsOut{{"-o", "link.jsonl", false}},
		refused: "is the same file as input"},
	{name: "two outputs one file", end: "close", force: true,
		outs:    []outputsOut{{"-o", "a.jsonl", false}, {"--dups", "./a.jsonl", false}},
		refused: `is the same file as -o`},
	{name: "a kept output is checked, not opened", end: "close",
		outs: []outputsOut{{"-o", "a.jsonl", false}, {"--state", "old.jsonl", true}},
		want: map[string]string{"a.jsonl": "{\"to\":\"-o\"}\n"}},
}

// run sets the directory up, runs the case and checks what is left.
func (tt outputsCase) run(t *testing.T) {
	dir := t.TempDir()
	for name, content := range outputsBefore {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if tt.link != "" {
		if err := os.Symlink(filepath.Join(dir, "in.jsonl"), filepath.Join(dir, tt.link)); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{}
	for name, content := range outputsBefore {
		want[name] = content
	}
	for name, content := range tt.want {
		want[name] = content
	}
	if tt.link != "" {
		want[tt.link] = outputsBefore["in.jsonl"]
	}
	var specs []Output
	for _, o := range tt.outs {
		specs = append(specs, Output{Flag: o.flag, Path: filepath.Join(dir, o.name), Kept: o.kept})
	}
	defer func() {
		if got := files(t, dir); !reflect.DeepEqual(got, want) {
			t.Errorf("directory holds\n%q\nwant\n%q", got, want)
		}
	}()
	outs, err := CheckOutputs(nil, Inputs([]string{filepath.Join(dir, "in.jsonl")}), specs, tt.force)
	if tt.refused != "" {
		var usage *cli.UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), strings.ReplaceAll(tt.refused, "DIR", dir)) {
			t.Fatalf("CheckOutputs = %v, want a usage error saying %q", err, tt.refused)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	err = outs.Open()
	if tt.openErr != "" {
		if err == nil || !strings.HasPrefix(err.Error(), tt.openErr) {
			t.Fatalf("Open = %v, want an error starting %q", err, tt.openErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range tt.outs {
		if w := outs.Writer(o.flag); w != nil {
			if err := w.Write([]byte(`{"to":"` + o.flag + `"}`)); err != nil {
				t.Fatal(err)
			}
		} else if !o.kept {
			t.Fatalf("no writer for %s", o.flag)
		}
	}
	switch tt.end {
	case "abort":
		outs.Abort()
		err = outs.Close() // after Abort, nothing
	case "fail-later":
		outs.writers = append(outs.writers, NewWriter(failWriter{}))
		outs.flags = append(outs.flags, "--clusters")
		outs.Writer("--clusters").Write([]byte(`{}`))
		err = outs.Close()
	default:
		err = outs.Close()
		outs.Abort() // after Close, nothing
	}
	if tt.err == "" && err != nil || tt.err != "" && (err == nil || err.Error() != tt.err) {
		t.Fatalf("end = %v, want %q", err, tt.err)
	}
}

// files maps each file under dir to its content (a link to its target's).
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range entries(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	return out
}

// logWriter notes its name in a shared log at every write.
type logWriter struct {
	name string
	log  *[]string
	err  error
}

func (w logWriter) Write(p []byte) (int, error) {
	*w.log = append(*w.log, w.name)
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// TestOutputsCloseOrder: outputs are finished in the order they were
// declared; the first error is the one reported, and the outputs after
// it are dropped unwritten.
func TestOutputsCloseOrder(t *testing.T) {
	tests := []struct {
		name string
		fail map[string]bool
		log  []string
		err  string
	}{
		{"all succeed", nil, []string{"a", "b", "c"}, ""},
		{"the last fails", map[string]bool{"c": true}, []string{"a", "b", "c"}, "writing c: no space left on device"},
		{"the middle fails", map[string]bool{"b": true}, []string{"a", "b"}, "writing b: no space left on device"},
		{"two fail, the first reported", map[string]bool{"a": true, "c": true}, []string{"a"}, "writing a: no space left on device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log []string
			o := &Outputs{}
			for _, name := range []string{"a", "b", "c"} {
				lw := logWriter{name: name, log: &log}
				if tt.fail[name] {
					lw.err = syscall.ENOSPC
				}
				w := NewWriter(lw)
				w.path = name
				if err := w.Write([]byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				o.writers = append(o.writers, w)
				o.flags = append(o.flags, "--"+name)
			}
			err := o.Close()
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || err.Error() != tt.err) {
				t.Errorf("Close = %v, want %q", err, tt.err)
			}
			if !reflect.DeepEqual(log, tt.log) {
				t.Errorf("written in the order %v, want %v", log, tt.log)
			}
		})
	}
}

// TestOutputsLater: an output opened later is refused up front like any
// other, not opened by Open, and once created closes with the rest.
func TestOutputsLater(t *testing.T) {
	dir := t.TempDir()
	pic := filepath.Join(dir, "plot.svg")
	os.WriteFile(pic, []byte("old"), 0o666)
	specs := []Output{{Flag: "-o", Path: filepath.Join(dir, "a.jsonl")}, {Flag: "--plot", Path: pic, Later: true}}
	if _, err := CheckOutputs(nil, nil, specs, false); err == nil {
		t.Fatal("an existing --plot without force was not refused")
	}
	outs, err := CheckOutputs(nil, nil, specs, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := outs.Open(); err != nil {
		t.Fatal(err)
	}
	if outs.Writer("--plot") != nil {
		t.Fatal("Open opened the later output")
	}
	w, err := outs.Create("--plot", pic)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteRaw([]byte("new"))
	if err := outs.Close(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a.jsonl": "", "plot.svg": "new"}
	if got := files(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("directory holds %q, want %q", got, want)
	}
	if _, err := outs.Create("--rejects", filepath.Join(dir, "r.jsonl")); err == nil {
		t.Error("Create after Close succeeded")
	}
}
