package dedup

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"tokenmill/lib/minhash"
)

var nearParams = minhash.Params{Bands: 4, Rows: 2, Shingle: 3, Seed: 9}

// nearSet is a Set holding n signatures of random texts with ids "t0"...,
// one in five with no id.
func nearSet(t testing.TB, n int, opt minhash.Options) *Set {
	s := NewSet(100, 0.01, false)
	s.Near = minhash.NewIndex(nearParams, opt)
	h := minhash.NewHasher(nearParams)
	r := rand.New(rand.NewPCG(uint64(n), 1))
	for i := range n {
		text := fmt.Sprintf("w%d w%d w%d w%d", r.IntN(50), r.IntN(50), r.IntN(50), r.IntN(50))
		id := []byte(fmt.Sprintf(`"t%d"`, i))
		if i%5 == 0 {
			id = nil
		}
		if _, err := s.Near.Insert(h.Sign(nil, []byte(text)), id); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func nearTexts(x *minhash.Index) []string {
	var out []string
	x.Each(func(ref uint32, sig minhash.Signature, id []byte) error {
		out = append(out, fmt.Sprint(ref, sig, string(id)))
		return nil
	})
	return out
}

// TestNearStateRoundTrip: the kept signatures and ids saved with --near
// come back in order, loaded into an index in memory or into one that
// spills past a small budget; the totals count near-duplicates.
func TestNearStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	settings := Settings{Key: "prompt", Normalize: "none", FP: 0.01, Expected: 100, Near: &nearParams}
	a := nearSet(t, 3000, minhash.Options{Memory: 20 << 10, Dir: dir}) // saved from a spilled index
	defer a.Near.Close()
	path := filepath.Join(dir, "near.state")
	totals := Totals{Runs: 1, Read: 3500, Kept: 3000, Near: 500}
	if err := SaveState(path, a, settings, totals); err != nil {
		t.Fatal(err)
	}
	want := nearTexts(a.Near)
	for _, opt := range []minhash.Options{{}, {Memory: 8 << 10, Dir: dir}} {
		run := settings
		run.NearOptions = opt
		b, gotTotals, err := LoadState(context.Background(), path, run, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := nearTexts(b.Near); !slices.Equal(got, want) || gotTotals != totals {
			t.Errorf("memory %d: %d texts loaded of %d saved, or not the same; totals %+v", opt.Memory, len(got), len(want), gotTotals)
		}
		if (b.Near.Spilled() > 0) != (opt.Memory > 0) {
			t.Errorf("memory %d: %d texts spilled", opt.Memory, b.Near.Spilled())
		}
		b.Near.Close()
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("%d entries beside the state, want only it: spill files must leave nothing", len(left))
	}
}

// TestNearStateRefusals: a near state cut short, with a flipped byte, or
// whose header claims more texts than the file can hold is refused as
// corrupt (before anything the header describes is allocated); one made
// with other --near parameters, or without --near, is a SettingsError
// naming the flag.
func TestNearStateRefusals(t *testing.T) {
	dir := t.TempDir()
	settings := Settings{Key: "prompt", Normalize: "none", FP: 0.01, Expected: 100, Near: &nearParams}
	s := nearSet(t, 200, minhash.Options{})
	path := filepath.Join(dir, "near.state")
	if err := SaveState(path, s, settings, Totals{Runs: 1}); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	damaged := filepath.Join(dir, "damaged.state")
	load := func(data []byte, run Settings) error {
		if err := os.WriteFile(damaged, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, _, err := LoadState(context.Background(), damaged, run, nil)
		if err == nil {
			s.Near.Close()
		}
		return err
	}
	if err := load(good, settings); err != nil {
		t.Fatal(err)
	}
	flipped := slices.Clone(good)
	flipped[len(flipped)-20] ^= 1
	hdrLen := binary.LittleEndian.Uint32(good[len(stateMagic):])
	hdr := good[len(stateMagic)+4 : len(stateMagic)+4+int(hdrLen)]
	bigger := bytes.Replace(hdr, []byte(`"near_texts":200`), []byte(`"near_texts":900`), 1)
	if bytes.Equal(bigger, hdr) {
		t.Fatalf("no near_texts in the header %s", hdr)
	}
	claims := append(append(slices.Clone(good[:len(stateMagic)+4]), bigger...), good[len(stateMagic)+4+int(hdrLen):]...)
	for name, data := range map[string][]byte{"cut": good[:len(good)-300], "flipped": flipped, "claims 900 texts": claims} {
		if err := load(data, settings); !errors.Is(err, ErrCorruptState) {
			t.Errorf("%s: %v, want ErrCorruptState", name, err)
		}
	}
	other := nearParams
	other.Rows = 3
	for name, run := range map[string]Settings{
		"--rows": {Key: "prompt", Normalize: "none", FP: 0.01, Expected: 100, Near: &other},
		"--near": {Key: "prompt", Normalize: "none", FP: 0.01, Expected: 100},
	} {
		var se *SettingsError
		if err := load(good, run); !errors.As(err, &se) || se.Flag != name {
			t.Errorf("%s: %v, want a SettingsError naming it", name, err)
		}
	}
}

// FuzzLoadNearState: whatever a --near state holds, loading it never
// panics nor allocates what the file cannot back; an accepted one holds
// the number of texts its header says.
func FuzzLoadNearState(f *testing.F) {
	settings := Settings{Key: "prompt", Normalize: "none", FP: 0.01, Expected: 100, Near: &nearParams}
	s := nearSet(f, 50, minhash.Options{})
	path := filepath.Join(f.TempDir(), "seed.state")
	if err := SaveState(path, s, settings, Totals{Runs: 1}); err != nil {
		f.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(good[:len(stateMagic)+40])
	f.Fuzz(func(t *testing.T, data []byte) {
		st, _, err := readState(bufio.NewReader(bytes.NewReader(data)), int64(len(data)), "fuzz.state", settings)
		if err != nil {
			return
		}
		defer st.Near.Close()
		if st.Near == nil || st.Near.Params() != nearParams {
			t.Fatalf("accepted a state without the run's index: %+v", st)
		}
		nearTexts(st.Near)
	})
}
