package dedup

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/segmentio/encoding/json"
	"github.com/zeebo/xxh3"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/minhash"
)

// The state file keeps a Set between runs, so that a later dataset can be
// deduplicated against an earlier one:
//
//	magic        "tokenmill-dedup-state\n"
//	uint32 LE    length of the header
//	header       JSON: format version, settings, counts, layer geometry
//	layers       each layer's bit words, uint64 LE, (m+63)/64 of them
//	exact keys   (--exact) 16-byte key hash, uvarint id length, raw JSON id
//	checksum     uint64 LE: xxh3-64 of every byte before it
//
// A file whose checksum, size or layout is wrong is refused as corrupt, and
// one made with other settings is refused before its body is read.
//
// The header's key_version says what the default --key prompt covered when
// the state was made: 1 (no key_version) the messages or completion prompt
// only; 2 also the tools and the top-level system prompt, and tool_call_id.
// A --key prompt state of another version holds keys this run cannot match
// and is refused; field keys (--key id, ...) did not change.
const (
	stateMagic       = "tokenmill-dedup-state\n"
	stateVersion     = 1
	promptKeyVersion = 2
	maxHeader        = 1 << 20
)

// Settings are what a state must agree with to be used by a run.
type Settings struct {
	Key       string  `json:"key"`
	Normalize string  `json:"normalize"`
	FP        float64 `json:"fp"`
	Expected  uint64  `json:"expected"`
	Exact     bool    `json:"exact"`
	// Near is how --near made its signatures (nil: without --near). A
	// state is used only with the same: signatures made otherwise cannot
	// be compared. The threshold may change from run to run.
	Near *minhash.Params `json:"near,omitempty"`
	// NearOptions bound the run's index; they are not part of the state.
	NearOptions minhash.Options `json:"-"`
}

// Totals are the counts a state accumulates over the runs that used it.
type Totals struct {
	Runs               int64   `json:"runs"`
	Read               int64   `json:"read"`
	Kept               int64   `json:"kept"`
	Removed            int64   `json:"removed"`
	Near               int64   `json:"near,omitempty"`
	Rejected           int64   `json:"rejected"`
	ExpectedFalseDrops float64 `json:"expected_false_drops"`
}

type layerHeader struct {
	M        uint64  `json:"m"`
	K        uint64  `json:"k"`
	Capacity uint64  `json:"capacity"`
	FP       float64 `json:"fp"`
	Count    uint64  `json:"count"`
}

type stateHeader struct {
	Version    int `json:"version"`
	KeyVersion int `json:"key_version,omitempty"`
	Settings
	Totals    Totals        `json:"totals"`
	Keys      uint64        `json:"keys"`
	Layers    []layerHeader `json:"layers"`
	ExactKeys uint64        `json:"exact_keys"`
	NearTexts uint64        `json:"near_texts,omitempty"`
}

// ErrCorruptState marks a state file that cannot be trusted.
var ErrCorruptState = errors.New("corrupt or truncated state file")

// SettingsError is a state made with other settings than the run's.
type SettingsError struct {
	Path, Flag, State, Run string
}

func (e *SettingsError) Error() string {
	return fmt.Sprintf("state %s was made with %s %s, but this run has %s %s: use the same settings, or another --state file",
		e.Path, e.Flag, e.State, e.Flag, e.Run)
}

// KeyVersionError is a --key prompt state whose keys were computed by
// another version of the prompt key.
type KeyVersionError struct {
	Path  string
	State int
}

func (e *KeyVersionError) Error() string {
	if e.State < promptKeyVersion {
		return fmt.Sprintf("state %s was made by an older dedup whose prompt key (version %d) left out the tools, the top-level system prompt and tool_call_id; "+
			"this dedup's key (version %d) includes them, so the saved keys cannot be matched: start a new --state file and run the earlier inputs through it again",
			e.Path, e.State, promptKeyVersion)
	}
	return fmt.Sprintf("state %s has prompt key version %d; this dedup reads version %d: use the dedup that made it, or start a new --state file",
		e.Path, e.State, promptKeyVersion)
}

// checkSettings names the first setting in which a state differs.
func checkSettings(path string, state, run Settings) error {
	diff := func(flag, a, b string) error {
		if a != b {
			return &SettingsError{path, flag, a, b}
		}
		return nil
	}
	return errors.Join(
		diff("--key", state.Key, run.Key),
		diff("--normalize", state.Normalize, run.Normalize),
		diff("--fp", fmt.Sprint(state.FP), fmt.Sprint(run.FP)),
		diff("--expected", fmt.Sprint(state.Expected), fmt.Sprint(run.Expected)),
		diff("--exact", fmt.Sprint(state.Exact), fmt.Sprint(run.Exact)),
		checkNear(path, state.Near, run.Near),
	)
}

// checkNear names the first --near setting in which a state differs.
func checkNear(path string, state, run *minhash.Params) error {
	switch {
	case state == nil && run == nil:
		return nil
	case state == nil:
		return &SettingsError{path, "--near", "off", "on (its signatures of the earlier input are not in the state)"}
	case run == nil:
		return &SettingsError{path, "--near", "on", "off"}
	}
	for _, d := range []struct {
		flag       string
		state, run any
	}{{"--bands", state.Bands, run.Bands}, {"--rows", state.Rows, run.Rows}, {"--shingle", state.Shingle, run.Shingle}, {"--seed", state.Seed, run.Seed}} {
		if a, b := fmt.Sprint(d.state), fmt.Sprint(d.run); a != b {
			return &SettingsError{path, d.flag, a, b}
		}
	}
	return nil
}

// SaveState writes s with its settings and totals to path atomically,
// through the one file-safety helper (jsonl.WriteFile).
func SaveState(path string, s *Set, settings Settings, totals Totals) error {
	if err := CheckStateFile(path); err != nil {
		return err // made something else while the run went: never written into
	}
	return jsonl.WriteFile(path, jsonl.CreateFileOptions{Replace: true}, func(f io.Writer) error {
		h := xxh3.New()
		bw := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
		if err := writeState(bw, s, settings, totals); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		return binary.Write(f, binary.LittleEndian, h.Sum64())
	})
}

func writeState(w *bufio.Writer, s *Set, settings Settings, totals Totals) error {
	hdr := stateHeader{Version: stateVersion, KeyVersion: promptKeyVersion, Settings: settings, Totals: totals, Keys: s.Filter.Keys(), ExactKeys: uint64(s.exactLen())}
	if s.Near != nil {
		hdr.NearTexts = uint64(s.Near.Len())
	}
	for _, l := range s.Filter.layers {
		hdr.Layers = append(hdr.Layers, layerHeader{M: uint64(l.bf.Cap()), K: uint64(l.bf.K()), Capacity: l.capacity, FP: l.fp, Count: l.count})
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	w.WriteString(stateMagic)
	binary.Write(w, binary.LittleEndian, uint32(len(js)))
	w.Write(js)
	var word [8]byte
	for _, l := range s.Filter.layers {
		for _, x := range l.bf.BitSet().Words() {
			binary.LittleEndian.PutUint64(word[:], x)
			w.Write(word[:])
		}
	}
	var buf []byte
	if s.exact != nil {
		err := s.exact.each(func(h xxh3.Uint128, id []byte) error {
			b := h.Bytes()
			buf = append(buf[:0], b[:]...)
			buf = binary.AppendUvarint(buf, uint64(len(id)))
			buf = append(buf, id...)
			_, err := w.Write(buf)
			return err
		})
		if err != nil {
			return err
		}
	}
	if s.Near != nil {
		// Each kept prompt's signature, then its id's length and id.
		return s.Near.Each(func(_ uint32, sig minhash.Signature, id []byte) error {
			buf = buf[:0]
			for _, v := range sig {
				buf = binary.LittleEndian.AppendUint32(buf, v)
			}
			buf = binary.AppendUvarint(buf, uint64(len(id)))
			buf = append(buf, id...)
			_, err := w.Write(buf)
			return err
		})
	}
	return nil
}

// LoadState reads the state at path for a run with settings run. It
// returns (nil, zero totals, nil) when there is no such file. A state is
// a regular file: anything else (a FIFO, a pipe, a device such as
// /dev/zero, a socket) is refused (a usage error, CheckStateFile's) and
// never waited on or read, since a state is saved there again and has
// the size its header is checked against; a FIFO once spooled a device
// without end into a hidden temporary file. What is read is bounded by
// the file's size at the open (readState checks every count against it).
func LoadState(ctx context.Context, path string, run Settings, logf func(string, ...any)) (*Set, Totals, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0) // a FIFO opened without a wait, then refused
	if errors.Is(err, os.ErrNotExist) {
		return nil, Totals{}, nil
	}
	if err != nil {
		return nil, Totals{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, Totals{}, err
	}
	if err := stateFileKind(path, st); err != nil {
		return nil, Totals{}, err
	}
	s, totals, err := readState(bufio.NewReaderSize(f, 1<<20), st.Size(), path, run)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%w %s: it ends early", ErrCorruptState, path)
	}
	return s, totals, err
}

// CheckStateFile refuses, before anything is opened or written, a
// --state that exists and is not a regular file (a usage error, exit 2).
func CheckStateFile(path string) error {
	if path == "" {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil // absent (made at the end), or said when it is read
	}
	return stateFileKind(path, st)
}

func stateFileKind(path string, st os.FileInfo) error {
	if st.Mode().IsRegular() {
		return nil
	}
	kind := "not a regular file"
	switch m := st.Mode(); {
	case m.IsDir():
		kind = "a directory"
	case m&os.ModeNamedPipe != 0:
		kind = "a FIFO or a pipe"
	case m&os.ModeDevice != 0:
		kind = "a device"
	case m&os.ModeSocket != 0:
		kind = "a socket"
	}
	return cli.Usagef("--state %q is %s: a state is a regular file (it is read whole, checked against its size, and saved there again); copy it into a file and give that", path, kind)
}

// hashReader feeds every byte it hands out into the checksum.
type hashReader struct {
	r   *bufio.Reader
	h   *xxh3.Hasher
	one [1]byte
}

func (hr *hashReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	hr.h.Write(p[:n])
	return n, err
}

func (hr *hashReader) ReadByte() (byte, error) {
	c, err := hr.r.ReadByte()
	if err == nil {
		hr.one[0] = c
		hr.h.Write(hr.one[:])
	}
	return c, err
}

// readState reads a state file of size bytes from r, in the order it is
// written: the header, checked against the run's settings and against the
// file's size before anything it describes is allocated; the filter's
// layers; the exact keys; the checksum over all of it.
func readState(r *bufio.Reader, size int64, path string, run Settings) (*Set, Totals, error) {
	sr := &stateReader{in: &hashReader{r: r, h: xxh3.New()}, size: size, path: path}
	hdr, err := sr.header()
	if err != nil {
		return nil, Totals{}, err
	}
	if err := hdr.usableBy(path, run); err != nil {
		return nil, Totals{}, err
	}
	if err := sr.fits(hdr); err != nil {
		return nil, Totals{}, err
	}
	s := &Set{Filter: &Filter{expected: hdr.Expected, fp: hdr.FP}}
	if err := sr.layers(s.Filter, hdr.Layers); err != nil {
		return nil, Totals{}, err
	}
	if hdr.Exact {
		if s.exact, err = sr.exactKeys(hdr.ExactKeys); err != nil {
			return nil, Totals{}, err
		}
	}
	if hdr.Near != nil {
		s.Near = minhash.NewIndex(*hdr.Near, run.NearOptions)
		if err := sr.nearTexts(s.Near, hdr.NearTexts); err != nil {
			s.Near.Close()
			return nil, Totals{}, err
		}
	}
	if err := sr.checksum(); err != nil {
		if s.Near != nil {
			s.Near.Close()
		}
		return nil, Totals{}, err
	}
	if keys := s.Filter.Keys(); keys != hdr.Keys || (hdr.Exact && keys != hdr.ExactKeys) {
		return nil, Totals{}, sr.corrupt("the layers hold %d keys, the header says %d", keys, hdr.Keys)
	}
	return s, hdr.Totals, nil
}

// stateReader reads a state file's parts in turn; in hashes every byte
// before the checksum.
type stateReader struct {
	in   *hashReader
	size int64 // the file's, which bounds what the header may describe
	path string
	hlen uint32 // the header's length, once read
}

func (sr *stateReader) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w %s: %s", ErrCorruptState, sr.path, fmt.Sprintf(format, args...))
}

// header reads the magic, the header's length and the header.
func (sr *stateReader) header() (*stateHeader, error) {
	magic := make([]byte, len(stateMagic))
	if _, err := io.ReadFull(sr.in, magic); err != nil || string(magic) != stateMagic {
		return nil, fmt.Errorf("%s is not a dedup state file", sr.path)
	}
	if err := binary.Read(sr.in, binary.LittleEndian, &sr.hlen); err != nil {
		return nil, err
	}
	if sr.hlen > maxHeader || int64(sr.hlen) > sr.size {
		return nil, sr.corrupt("header length %d", sr.hlen)
	}
	js := make([]byte, sr.hlen)
	if _, err := io.ReadFull(sr.in, js); err != nil {
		return nil, err
	}
	var hdr stateHeader
	if err := json.Unmarshal(js, &hdr); err != nil {
		return nil, sr.corrupt("header: %v", err)
	}
	return &hdr, nil
}

// usableBy refuses a state of another format, other settings or (for
// --key prompt) another version of the prompt key than the run's.
func (hdr *stateHeader) usableBy(path string, run Settings) error {
	if hdr.Version != stateVersion {
		return fmt.Errorf("state %s has format version %d; this dedup reads version %d", path, hdr.Version, stateVersion)
	}
	if err := checkSettings(path, hdr.Settings, run); err != nil {
		return err
	}
	if hdr.Key == KeyPrompt {
		if v := max(hdr.KeyVersion, 1); v != promptKeyVersion {
			return &KeyVersionError{Path: path, State: v}
		}
	}
	return nil
}

// fits checks the sizes the header promises against the file, before
// anything they say is allocated: every layer's bits, and at least 17
// bytes for each exact key.
func (sr *stateReader) fits(hdr *stateHeader) error {
	need := int64(len(stateMagic)) + 4 + int64(sr.hlen) + 8
	for _, l := range hdr.Layers {
		if l.M == 0 || l.K == 0 || l.K > 64 || l.M > uint64(sr.size)*8 {
			return sr.corrupt("layer of %d bits, %d hashes", l.M, l.K)
		}
		need += int64((l.M + 63) / 64 * 8)
	}
	need += int64(hdr.ExactKeys) * 17
	if hdr.Near != nil {
		// usableBy has checked the parameters against the run's valid ones.
		need += int64(hdr.NearTexts) * int64(4*hdr.Near.K()+1)
	}
	if len(hdr.Layers) == 0 || need > sr.size || (hdr.ExactKeys > 0 && !hdr.Exact) || (hdr.NearTexts > 0 && hdr.Near == nil) {
		return sr.corrupt("%d bytes, but the header describes at least %d", sr.size, need)
	}
	return nil
}

// nearTexts reads n kept prompts' signatures and ids into x, in order.
func (sr *stateReader) nearTexts(x *minhash.Index, n uint64) error {
	sig := make(minhash.Signature, x.Params().K())
	raw := make([]byte, 4*len(sig))
	var id []byte
	for range n {
		if _, err := io.ReadFull(sr.in, raw); err != nil {
			return err
		}
		for i := range sig {
			sig[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
		idLen, err := binary.ReadUvarint(sr.in)
		if err != nil {
			return err
		}
		if idLen > uint64(sr.size) {
			return sr.corrupt("id of %d bytes", idLen)
		}
		id = slices.Grow(id[:0], int(idLen))[:idLen]
		if _, err := io.ReadFull(sr.in, id); err != nil {
			return err
		}
		if _, err := x.Insert(sig, id); err != nil {
			return err
		}
	}
	return nil
}

// layers reads the bit words of each layer the header describes into f.
func (sr *stateReader) layers(f *Filter, layers []layerHeader) error {
	chunk := make([]byte, 64<<10)
	for i, lh := range layers {
		words := make([]uint64, (lh.M+63)/64)
		for j := 0; j < len(words); {
			n := min(len(chunk)/8, len(words)-j)
			if _, err := io.ReadFull(sr.in, chunk[:n*8]); err != nil {
				return err
			}
			for x := range n {
				words[j+x] = binary.LittleEndian.Uint64(chunk[x*8:])
			}
			j += n
		}
		if i > 0 {
			f.older = either(f.older, f.layers[i-1].rate())
		}
		f.layers = append(f.layers, &layer{
			bf: bloom.FromWithM(words, uint(lh.M), uint(lh.K)), capacity: lh.Capacity, fp: lh.FP, count: lh.Count})
	}
	return nil
}

// exactKeys reads n exact keys: a 16-byte hash and the first record's id.
func (sr *stateReader) exactKeys(n uint64) (*exactSet, error) {
	exact := newExactSet(int(n))
	var b [16]byte
	for range n {
		if _, err := io.ReadFull(sr.in, b[:]); err != nil {
			return nil, err
		}
		idLen, err := binary.ReadUvarint(sr.in)
		if err != nil {
			return nil, err
		}
		if idLen > uint64(sr.size) {
			return nil, sr.corrupt("id of %d bytes", idLen)
		}
		id := make([]byte, idLen)
		if _, err := io.ReadFull(sr.in, id); err != nil {
			return nil, err
		}
		key := xxh3.Uint128{Hi: binary.BigEndian.Uint64(b[:8]), Lo: binary.BigEndian.Uint64(b[8:])}
		exact.put(key, id)
	}
	return exact, nil
}

// checksum reads the stored checksum (not itself hashed) and compares it
// with the bytes read; nothing may follow it.
func (sr *stateReader) checksum() error {
	sum := sr.in.h.Sum64()
	var stored uint64
	if err := binary.Read(sr.in.r, binary.LittleEndian, &stored); err != nil {
		return err
	}
	if stored != sum {
		return sr.corrupt("checksum mismatch")
	}
	if _, err := sr.in.r.ReadByte(); err != io.EOF {
		return sr.corrupt("bytes after the checksum")
	}
	return nil
}
