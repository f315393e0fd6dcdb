package dedup

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"
	"github.com/zeebo/xxh3"
)

func fillSet(s *Set, family string, n int) {
	for i := range n {
		s.Seen(distinct(family, i), []byte(`"`+family+`"`))
	}
}

func TestStateRoundTrip(t *testing.T) {
	for _, exact := range []bool{false, true} {
		settings := Settings{Key: "prompt", Normalize: "ws", FP: 0.01, Expected: 500, Exact: exact}
		path := filepath.Join(t.TempDir(), "sub", "seen.state")
		a := NewSet(500, 0.01, exact)
		fillSet(a, "a", 3000) // past --expected: several layers
		totals := Totals{Runs: 1, Read: 3000, Kept: 3000}
		if err := SaveState(path, a, settings, totals); err != nil {
			t.Fatal(err)
		}
		b, gotTotals, err := LoadState(context.Background(), path, settings, nil)
		if err != nil {
			t.Fatal(err)
		}
		if gotTotals != totals {
			t.Errorf("totals %+v, want %+v", gotTotals, totals)
		}
		if len(b.Filter.layers) != len(a.Filter.layers) || b.Filter.Keys() != a.Filter.Keys() || b.Filter.Rate() != a.Filter.Rate() {
			t.Fatalf("loaded filter: %d layers, %d keys, rate %g; saved %d, %d, %g",
				len(b.Filter.layers), b.Filter.Keys(), b.Filter.Rate(), len(a.Filter.layers), a.Filter.Keys(), a.Filter.Rate())
		}
		for i := range a.Filter.layers {
			wa, wb := a.Filter.layers[i].bf.BitSet().Words(), b.Filter.layers[i].bf.BitSet().Words()
			if !slices.Equal(wa, wb) || a.Filter.layers[i].bf.K() != b.Filter.layers[i].bf.K() || a.Filter.layers[i].bf.Cap() != b.Filter.layers[i].bf.Cap() {
				t.Fatalf("layer %d differs after loading", i)
			}
		}
		// Every key of A is seen by the loaded set; new keys go on
		// being added where A left off.
		for i := range 3000 {
			seen, first := b.Seen(distinct("a", i), nil)
			if !seen || (exact && first != `"a"`) {
				t.Fatalf("exact=%v: key %d of A not seen after loading (first %q)", exact, i, first)
			}
		}
		before := b.Filter.Keys()
		fillSet(b, "b", 1000)
		if b.Filter.Keys() < before+950 { // fp 0.01: about 10 of 1000 are false positives
			t.Errorf("loaded set took only %d of 1000 new keys", b.Filter.Keys()-before)
		}
		if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
			t.Errorf("the directory holds %d files after saving: a temporary file was left", len(entries))
		}
	}
}

func TestStateMissingFile(t *testing.T) {
	s, totals, err := LoadState(context.Background(), filepath.Join(t.TempDir(), "none.state"), Settings{}, nil)
	if s != nil || totals != (Totals{}) || err != nil {
		t.Fatalf("a missing state gave %v, %+v, %v; want nothing", s, totals, err)
	}
}

func TestStateRefusesOtherSettings(t *testing.T) {
	base := Settings{Key: "prompt", Normalize: "none", FP: 1e-6, Expected: 1000, Exact: false}
	path := filepath.Join(t.TempDir(), "seen.state")
	s := NewSet(base.Expected, base.FP, base.Exact)
	fillSet(s, "x", 10)
	if err := SaveState(path, s, base, Totals{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		flag   string
		change func(*Settings)
	}{
		{"--key", func(s *Settings) { s.Key = "id" }},
		{"--normalize", func(s *Settings) { s.Normalize = "lower" }},
		{"--fp", func(s *Settings) { s.FP = 1e-5 }},
		{"--expected", func(s *Settings) { s.Expected = 2000 }},
		{"--exact", func(s *Settings) { s.Exact = true }},
	}
	for _, tt := range tests {
		run := base
		tt.change(&run)
		_, _, err := LoadState(context.Background(), path, run, nil)
		var se *SettingsError
		if !errors.As(err, &se) || se.Flag != tt.flag || !strings.Contains(err.Error(), path) {
			t.Errorf("%s changed: got %v, want a settings error naming %s and the file", tt.flag, err, tt.flag)
		}
	}
}

func TestStateRefusesDamage(t *testing.T) {
	settings := Settings{Key: "prompt", Normalize: "none", FP: 0.01, Expected: 100, Exact: true}
	path := filepath.Join(t.TempDir(), "seen.state")
	s := NewSet(100, 0.01, true)
	fillSet(s, "x", 300)
	if err := SaveState(path, s, settings, Totals{Runs: 1}); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	headerEnd := len(stateMagic) + 4 + int(uint32(good[len(stateMagic)])|uint32(good[len(stateMagic)+1])<<8)
	flip := func(at int) []byte {
		b := append([]byte(nil), good...)
		b[at] ^= 0x40
		return b
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "not a dedup state file"},
		{"other file", []byte(`{"id":1}` + "\n"), "not a dedup state file"},
		{"truncated in the header", good[:len(stateMagic)+10], "corrupt or truncated"},
		{"truncated in the header length", good[:len(stateMagic)+2], "ends early"},
		{"truncated in the layers", good[:headerEnd+100], "corrupt"},
		{"truncated in the exact keys", good[:len(good)-30], "corrupt"},
		{"checksum cut off", good[:len(good)-8], "corrupt"},
		{"bit flipped in a layer", flip(headerEnd + 50), "checksum mismatch"},
		{"bit flipped in the exact keys", flip(len(good) - 20), "corrupt"},
		{"bit flipped in the checksum", flip(len(good) - 1), "checksum mismatch"},
		{"trailing bytes", append(append([]byte(nil), good...), 0), "corrupt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.state")
			if err := os.WriteFile(p, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			s, _, err := LoadState(context.Background(), p, settings, nil)
			if err == nil || s != nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	// The intact file still loads: the cases above failed for their damage.
	if _, _, err := LoadState(context.Background(), path, settings, nil); err != nil {
		t.Fatal(err)
	}
}

// The v1-*.state files in testdata were written by the dedup before the
// prompt key covered tools and the top-level system prompt:
//
//	dedup --expected 100 [--key id] --state v1-prompt.state state-in.jsonl
//
// over two prompt records, one with tools.
var v1Settings = Settings{Key: KeyPrompt, Normalize: "none", FP: 1e-6, Expected: 100}

func TestStateRefusesAnOlderPromptKey(t *testing.T) {
	_, _, err := LoadState(context.Background(), filepath.Join("testdata", "v1-prompt.state"), v1Settings, nil)
	var kv *KeyVersionError
	if !errors.As(err, &kv) || kv.State != 1 || !strings.Contains(err.Error(), "left out the tools") || !strings.Contains(err.Error(), "start a new --state file") {
		t.Fatalf("got %v, want a key version error saying why", err)
	}
	// A field key did not change: that state still loads, and holds its keys.
	idSettings := v1Settings
	idSettings.Key = "id"
	s, totals, err := LoadState(context.Background(), filepath.Join("testdata", "v1-id.state"), idSettings, nil)
	if err != nil || s.Filter.Keys() != 2 || totals.Read != 2 {
		t.Fatalf("v1 --key id state: %v, totals %+v", err, totals)
	}
	k, _ := NewKeyer("id", None)
	for _, line := range []string{`{"id":"a"}`, `{"id":"b"}`} {
		key, err := k.Key([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if seen, _ := s.Seen(xxh3.Hash128(key), nil); !seen {
			t.Errorf("key of %s not in the loaded state", line)
		}
	}
	// A state saved now carries the current version and loads.
	path := filepath.Join(t.TempDir(), "new.state")
	fresh := NewSet(100, 1e-6, false)
	fillSet(fresh, "x", 5)
	if err := SaveState(path, fresh, v1Settings, Totals{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadState(context.Background(), path, v1Settings, nil); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), `"key_version":2`) {
		t.Error("a saved state does not record its key version")
	}
}

// TestStateHeaderRefusals: a header whose checksum holds but which the run
// cannot use, or which promises more than the file holds, is refused
// before its body is read, each for its own reason.
func TestStateHeaderRefusals(t *testing.T) {
	settings := Settings{Key: KeyPrompt, Normalize: "none", FP: 0.01, Expected: 100, Exact: true}
	path := filepath.Join(t.TempDir(), "seen.state")
	s := NewSet(100, 0.01, true)
	fillSet(s, "x", 50)
	if err := SaveState(path, s, settings, Totals{Runs: 1}); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hlen := int(binary.LittleEndian.Uint32(good[len(stateMagic):]))
	body := good[len(stateMagic)+4+hlen : len(good)-8]
	var hdr stateHeader
	if err := json.Unmarshal(good[len(stateMagic)+4:len(stateMagic)+4+hlen], &hdr); err != nil {
		t.Fatal(err)
	}
	// rewritten is the state with its header changed, checksum renewed.
	rewritten := func(change func(h *stateHeader)) []byte {
		h := hdr
		h.Layers = slices.Clone(hdr.Layers)
		change(&h)
		js, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		b := binary.LittleEndian.AppendUint32([]byte(stateMagic), uint32(len(js)))
		b = append(append(b, js...), body...)
		return binary.LittleEndian.AppendUint64(b, xxh3.Hash(b))
	}
	tests := []struct {
		name   string
		change func(h *stateHeader)
		want   string
	}{
		{"unchanged", func(h *stateHeader) {}, ""},
		{"another format", func(h *stateHeader) { h.Version = 2 }, "has format version 2; this dedup reads version 1"},
		{"other settings", func(h *stateHeader) { h.Normalize = "lower" }, "was made with --normalize lower"},
		{"a newer prompt key", func(h *stateHeader) { h.KeyVersion = 3 }, "has prompt key version 3"},
		{"no hashes", func(h *stateHeader) { h.Layers[0].K = 0 }, "layer of"},
		{"more hashes than a key has bits", func(h *stateHeader) { h.Layers[0].K = 65 }, "layer of"},
		{"a layer larger than the file", func(h *stateHeader) { h.Layers[0].M = uint64(len(good)) * 9 }, "layer of"},
		{"no layer", func(h *stateHeader) { h.Layers = nil }, "but the header describes at least"},
		{"more exact keys than fit", func(h *stateHeader) { h.ExactKeys = uint64(len(good)) }, "but the header describes at least"},
		{"exact keys in a state that is not exact", func(h *stateHeader) { h.Exact = false }, "was made with --exact false"},
		{"a key count that disagrees", func(h *stateHeader) { h.Keys++ }, "the layers hold 50 keys, the header says 51"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.state")
			if err := os.WriteFile(p, rewritten(tt.change), 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err := LoadState(context.Background(), p, settings, nil)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("the state rewritten unchanged is refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
