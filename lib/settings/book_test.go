package settings

import (
	"bufio"
	"os"
	"path/filepath"
	"testing"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// A book writes each distinct settings once to its sidecar, as whole
// lines, whatever the number of answers that name it; a run that reads
// the sidecar back finds the lines of the records it counts, names the
// records no line describes, and tells a run whose settings differ.
func TestBookSidecar(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gen.jsonl.settings.jsonl")
	temp := 0.5
	base := record.Settings{API: "chat", Temperature: &temp, Samples: 1}
	arms := []Arm{{Name: "cool", Params: json.RawMessage(`{"temperature":0.2}`)}}
	var logged []string
	logf := func(f string, a ...any) { logged = append(logged, f) }
	b := New(base, arms, path, logf)
	if err := b.Open(false, nil); err != nil {
		t.Fatal(err)
	}
	plain, err := b.IDs(Key{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		again, err := b.IDs(Key{Model: "m"})
		if err != nil || again != plain {
			t.Fatalf("the same key gave %+v (%v), then %+v", plain, err, again)
		}
	}
	armed, err := b.IDs(Key{Arm: 1, Model: "m", Params: ParamKeys([]byte(`{"top_p":1,"stop":["x"]}`))})
	if err != nil {
		t.Fatal(err)
	}
	if armed.Hash == plain.Hash || armed.Family != plain.Family {
		t.Errorf("an arm's answers %+v, the others' %+v: want other settings of the same family", armed, plain)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	var lines []record.SettingsLine
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var l record.SettingsLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("sidecar line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 2 || lines[0].Hash != plain.Hash || lines[1].Hash != armed.Hash || lines[1].Arm != "cool" {
		t.Fatalf("sidecar holds %+v, want the plain settings then the arm's", lines)
	}
	if got := lines[1].Params; len(got) != 2 || got[0] != "stop" || got[1] != "top_p" {
		t.Errorf("the record's params keys are %q, want stop and top_p sorted", got)
	}
	if len(logged) != 0 {
		t.Errorf("a book with a sidecar logged %q", logged)
	}

	hotter := 0.9
	changed := base
	changed.Temperature = &hotter
	for _, tt := range []struct {
		base   record.Settings
		differ bool
	}{{base, false}, {changed, true}} {
		r := New(tt.base, arms, path, logf)
		if err := r.Read(); err != nil {
			t.Fatal(err)
		}
		on, unknown := r.OnFile(map[string]int64{armed.Hash: 4, "no-such-hash": 3})
		if len(on) != 1 || on[0].Hash != armed.Hash || unknown != 3 {
			t.Fatalf("on file %+v, unknown %d; want the arm's line and 3 unknown", on, unknown)
		}
		field, was, now, differ := r.Differs(on)
		if differ != tt.differ || differ && (field != "temperature" || was != "0.5" || now != "0.9") {
			t.Errorf("base %v: differs %v (%s %s -> %s), want %v", *tt.base.Temperature, differ, field, was, now, tt.differ)
		}
	}
}
