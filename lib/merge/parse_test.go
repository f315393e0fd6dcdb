package merge

import (
	"os"
	"testing"

	"tokenmill/lib/record"
)

func TestParseRecord(t *testing.T) {
	tests := []struct {
		line      string
		id        string
		numeric   bool
		sample    int
		rank      uint8
		topSample bool
	}{
		{`{"id": "a", "messages": []}`, "a", false, 0, rankNone, false},
		{`{"id": 12, "sample": 3, "prompt": "x"}`, "12", true, 3, rankNone, true},
		{`{"id": "a", "sample": null, "prompt": "x"}`, "a", false, 0, rankNone, false},
		{`{"id": "a", "output": {"finish_reason": "stop", "sample": 2}}`, "a", false, 2, rankStop, false},
		{`{"id": "a", "sample": 5, "output": {"finish_reason": "length", "sample": 1}}`, "a", false, 1, rankLength, true},
		{`{"id": "a", "output": {"finish_reason": "abort"}}`, "a", false, 0, rankAbort, false},
		{`{"id": "a", "output": {"text": "no finish reason"}}`, "a", false, 0, rankAbort, false},
		{`{"id": "a", "output": {"finish_reason": "le\u006egth"}}`, "a", false, 0, rankLength, false},
		{`{"id": "a", "error": {"status": 400, "sample": 4}}`, "a", false, 4, rankError, false},
		{`{"id": "a", "output": null, "error": {"status": 400}}`, "a", false, 0, rankError, false},
		{`{"id": "a", "output": {"finish_reason": "stop"}, "error": {"status": 400}}`, "a", false, 0, rankStop, false},
		{`{"id": "x\"y", "output": {"finish_reason": "stop"}}`, `x"y`, false, 0, rankStop, false},
		{`{"id": -7, "error": {}}`, "-7", true, 0, rankError, false},
		{`  {"id": "padded"}  `, "padded", false, 0, rankNone, false},
	}
	for _, tt := range tests {
		p, rej := parseRecord([]byte(tt.line))
		if rej != nil {
			t.Errorf("%s: rejected: %s %s", tt.line, rej.reason, rej.detail)
			continue
		}
		if p.id.Text != tt.id || p.id.Numeric != tt.numeric || p.sample != tt.sample || p.rank != tt.rank || p.topSample != tt.topSample {
			t.Errorf("%s: got id %q numeric %v sample %d rank %d top %v", tt.line, p.id.Text, p.id.Numeric, p.sample, p.rank, p.topSample)
		}
	}
	for _, b := range badLines {
		if _, rej := parseRecord([]byte(b.line)); (rej == nil) != (b.reason == ReasonNotAGeneration) || rej != nil && rej.reason != b.reason {
			t.Errorf("%s: got %+v, want %s", b.line, rej, b.reason)
		}
	}
}

// FuzzParseRecord: merge's fast reading of a record agrees with the full
// decoder on every record both accept: same id, kind and sample.
func FuzzParseRecord(f *testing.F) {
	for _, b := range badLines {
		f.Add([]byte(b.line))
	}
	seedLines(f, td("gen-a.jsonl"), td("gen-a.errors.jsonl"), td("prompts.jsonl"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, rej := parseRecord(data)
		if rej != nil {
			if rej.reason == "" {
				t.Fatalf("rejected without a reason: %q", data)
			}
			return
		}
		if p.id.IsZero() || p.sample < 0 || p.rank > rankStop {
			t.Fatalf("accepted %q as %+v", data, p)
		}
		var g record.Generation
		if record.Decode(data, &g) != nil {
			return // the full decoder is stricter about fields merge skips
		}
		kinds := map[record.Kind]bool{record.KindPrompt: p.rank == rankNone, record.KindError: p.rank == rankError,
			record.KindGeneration: p.rank >= rankAbort}
		kind, sample := record.KindPrompt, g.Sample
		switch {
		case g.Output != nil:
			kind, sample = record.KindGeneration, g.Output.Sample
		case g.Error != nil:
			kind, sample = record.KindError, g.Error.Sample
		}
		if g.ID != p.id || !kinds[kind] {
			t.Fatalf("%q: decoder says id %+v kind %v, merge says %+v", data, g.ID, kind, p)
		}
		if kind != record.KindPrompt && sample != p.sample {
			t.Fatalf("%q: decoder says sample %d, merge %d", data, sample, p.sample)
		}
		if g.Output != nil && !p.conversation && (g.Output.FinishReason == record.FinishStop) != (p.rank == rankStop) {
			t.Fatalf("%q: finish_reason %q ranked %d", data, g.Output.FinishReason, p.rank)
		}
	})
}

func TestSize(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		err  bool
	}{
		{"512MB", 512 << 20, false},
		{"512MiB", 512 << 20, false},
		{"2GiB", 2 << 30, false},
		{"1.5g", 3 << 29, false},
		{"64k", 64 << 10, false},
		{"1000", 1000, false},
		{"10 B", 10, false},
		{"", 0, true},
		{"-1MB", 0, true},
		{"MB", 0, true},
		{"12 parsecs", 0, true},
	}
	for _, tt := range tests {
		var s Size
		err := s.UnmarshalText([]byte(tt.in))
		if (err != nil) != tt.err || err == nil && s != tt.want {
			t.Errorf("%q: got %d, %v; want %d (error %v)", tt.in, s, err, tt.want, tt.err)
		}
		if err == nil {
			var back Size
			if back.UnmarshalText([]byte(s.String())) != nil || back != s {
				t.Errorf("%q: %s does not read back", tt.in, s)
			}
		}
	}
}

func TestCompareIDs(t *testing.T) {
	// In order: integers numerically, then strings bytewise.
	ids := []struct {
		text    string
		numeric bool
	}{{"-20", true}, {"-3", true}, {"0", true}, {"9", true}, {"10", true}, {"123456789012", true},
		{"", false}, {"10", false}, {"9", false}, {"a", false}, {"b", false}, {"é", false}}
	for i, a := range ids {
		for j, b := range ids {
			got := compareIDs(a.text, a.numeric, b.text, b.numeric)
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got != want {
				t.Errorf("compare(%+v, %+v) = %d, want %d", a, b, got, want)
			}
		}
	}
}

// TestSpillRoundTrip: entries read back from a spill file as written.
func TestSpillRoundTrip(t *testing.T) {
	tmp := t.TempDir()
	m := &merger{tempParent: tmp}
	entries := []entry{
		{id: "a", sample: 0, rank: rankStop, order: 0, seq: 0, data: []byte(`{"id":"a"}`)},
		{id: "12345", numeric: true, prompt: true, head: true, sample: 1 << 20, rank: rankNone, order: 1 << 40, seq: 1<<40 + 1},
		{id: "ü\x00\n", sample: 3, rank: rankError, order: 5, seq: 9, data: make([]byte, 70000)},
	}
	f, err := m.newSpillFile()
	if err != nil {
		t.Fatal(err)
	}
	defer f.remove()
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("a spill file has a name a killed merge would leave behind: %v", left)
	}
	for i := range entries {
		if err := f.write(&entries[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.finishWriting(); err != nil {
		t.Fatal(err)
	}
	r, err := f.open()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range entries {
		got, err := r.next()
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if got.id != want.id || got.sample != want.sample || got.numeric != want.numeric || got.prompt != want.prompt ||
			got.head != want.head || got.rank != want.rank || got.order != want.order || got.seq != want.seq || string(got.data) != string(want.data) {
			t.Errorf("entry %d: got %+v, want %+v", i, *got, want)
		}
	}
	if _, err := r.next(); err == nil {
		t.Error("read past the last entry")
	}
}

// seedLines adds every line of the files to the fuzz corpus.
func seedLines(f *testing.F, files ...string) {
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range splitLines(string(raw)) {
			f.Add([]byte(l))
		}
	}
}
