package infer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLedger(t *testing.T) {
	l := newLedger()
	if l.see("a") || !l.see("a") {
		t.Error("see: first false, then true")
	}
	for _, s := range []int{0, 1, 62, 63, 64, 1000} {
		if l.done("a", s) {
			t.Errorf("sample %d done before marking", s)
		}
		l.markDone("a", s)
		if !l.done("a", s) || l.done("b", s) {
			t.Errorf("sample %d: done not tracked per id and sample", s)
		}
	}
	if l.see("b") {
		t.Error("b seen before")
	}
	l.markDone("c", 0)
	if l.see("c") {
		t.Error("a done answer marked its id as read from the input")
	}
}

func TestScanDone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gen.jsonl")
	content := strings.Join([]string{
		`{"id":"a","output":{"text":"x","finish_reason":"stop","sample":0}}`,
		`{"id":"a","output":{"text":"x","finish_reason":"stop","sample":1}}`,
		`{"id":7,"output":{"text":"x","finish_reason":"length","sample":0}}`,
		`{"id":"b","output":{"text":"x","finish_reason":"length","sample":0}}`,
		`{"id":"b","output":{"text":"y","finish_reason":"stop","sample":0}}`,
		`{"id":"c","error":{"status":400}}`,
		`not json`,
	}, "\n") + "\n"
	os.WriteFile(path, []byte(content), 0o644)
	for _, redo := range []bool{false, true} {
		l := newLedger()
		var warned []string
		info, err := scanDone(path, true, redo, l, nil, func(f string, a ...any) { warned = append(warned, fmt.Sprintf(f, a...)) })
		if err != nil {
			t.Fatal(err)
		}
		wantAnswers, wantLength := int64(4), int64(0)
		if redo {
			wantAnswers, wantLength = 3, 1
		}
		if info.Answers != wantAnswers || info.Length != wantLength || info.Unreadable != 2 || len(warned) != 2 {
			t.Errorf("redo=%v: %+v, warnings %q", redo, info, warned)
		}
		if !l.done("a", 1) || !l.done("b", 0) || l.done("c", 0) || l.done("7", 0) == redo {
			t.Errorf("redo=%v: wrong done set", redo)
		}
	}
}

func TestDefaultErrorsPath(t *testing.T) {
	for in, want := range map[string]string{
		"gen.jsonl": "gen.errors.jsonl", "out/run1.json": "out/run1.errors.json", "gen": "gen.errors.jsonl",
		"gen.txt": "gen.txt.errors.jsonl", "-": "", "": "",
	} {
		if got := DefaultErrorsPath(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}

func TestStripOwnFields(t *testing.T) {
	for in, want := range map[string]string{
		`{"id":1, "messages":[]}`:                              `{"id":1, "messages":[]}`,
		`{"id":1,"output":{"text":"old"},"meta":{"output":1}}`: `{"id":1,"meta":{"output":1}}`,
		`{"error":{},"id":"x"}`:                                `{"id":"x"}`,
	} {
		got, err := stripOwnFields([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("%s: got %s %v, want %s", in, got, err, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	b := newBackoff(100*time.Millisecond, time.Second, 1)
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 30: time.Second} {
		for i := 0; i < 50; i++ {
			if d := b.delay(attempt); d < want/2 || d > want {
				t.Fatalf("attempt %d: %v not in [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
	if d := newBackoff(0, time.Second, 1).delay(3); d != 0 {
		t.Errorf("zero base gave %v", d)
	}
}
