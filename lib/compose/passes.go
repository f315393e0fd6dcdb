package compose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// input is one input and how it is read twice: a regular file by name,
// anything else (stdin, a FIFO, a device) from its spool.
type input struct {
	name     string
	regular  bool
	size     int64
	mtime    time.Time
	spool    *os.File
	spooled  int64
	overflow bool // the pipe outgrew --spool-max
	// items and digest are what the first pass read (records and input
	// errors, and a hash of the records' bytes), for the second to match.
	items  int64
	digest uint64
}

// errSpoolFull ends a run whose piped input outgrows --spool-max.
var errSpoolFull = errors.New("spool full")

// openInputs looks at each input: a regular file is read by name in both
// passes; another is spooled while the first pass reads it, unless
// --spool-max is 0.
func (r *run) openInputs() error {
	names := r.cfg.inputs
	if len(names) == 0 {
		names = []string{"-"}
	}
	for _, name := range names {
		in := &input{name: name}
		if name != "-" {
			st, err := os.Stat(name)
			if err != nil {
				return cli.Usagef("cannot read %s: %v", name, err)
			}
			in.regular = st.Mode().IsRegular()
			in.size, in.mtime = st.Size(), st.ModTime()
		}
		if !in.regular && r.cfg.spoolMax <= 0 && !r.cfg.dryRun {
			return cli.Usagef("%s is a pipe, and compose reads its input twice (count, then select) with --spool-max 0: name a file, or allow a spool (--spool-max 8GiB)", describe(name))
		}
		r.inputs = append(r.inputs, in)
	}
	return nil
}

// describe names an input for a message.
func describe(name string) string {
	if name == "-" {
		return "stdin"
	}
	return name
}

func (r *run) closeInputs() {
	for _, in := range r.inputs {
		if in.spool != nil {
			in.spool.Close()
			in.spool = nil
		}
	}
}

// spoolReader copies what is read from a pipe into the spool file,
// failing once it would outgrow the limit.
type spoolReader struct {
	src   io.Reader
	in    *input
	limit int64
}

func (s *spoolReader) Read(p []byte) (int, error) {
	if s.in.overflow {
		return 0, errSpoolFull // for good: a reader that peeked past it must not read on
	}
	n, err := s.src.Read(p)
	if n > 0 && s.in.spool != nil {
		if s.in.spooled+int64(n) > s.limit {
			s.in.overflow = true
			return 0, errSpoolFull
		}
		if _, werr := s.in.spool.Write(p[:n]); werr != nil {
			return 0, fmt.Errorf("spooling %s to a temporary file: %w", describe(s.in.name), werr)
		}
		s.in.spooled += int64(n)
	}
	return n, err
}

// placed is a worker's verdict on a record: its draw and its groups, or
// why it has none; out: a record whose group the mix does not take.
type placed struct {
	rank uint32
	path []string
	out  bool
	rej  *rejection
}

// place reads a record's groups and draw.
func (r *run) place(data []byte, buf *[]byte) placed {
	var f fields
	if rej := readFields(data, r.want, &f); rej != nil {
		return placed{rej: rej}
	}
	var p placed
	for spec := r.spec; spec != nil; {
		v, b, rej := spec.key.value(&f, *buf)
		*buf = b
		if rej != nil {
			return placed{rej: rej}
		}
		p.path = append(p.path, v)
		g := spec.byName[v]
		if !spec.takes(g) {
			p.out = true
			return p
		}
		if !spec.descends(g) {
			break
		}
		spec = g.child
	}
	text, rej := hashKey(&f)
	if rej != nil {
		return placed{rej: rej}
	}
	p.rank = rank(text, r.seed)
	return p
}

// reader opens the reader of one input for a pass.
func (r *run) reader(ctx context.Context, in *input, first bool) (*jsonl.Reader, func(), error) {
	switch {
	case in.regular:
		if !first {
			st, err := os.Stat(in.name)
			if err != nil || st.Size() != in.size || !st.ModTime().Equal(in.mtime) {
				return nil, nil, fmt.Errorf("%s changed between compose's two passes (it was read to count, then again to select): nothing is written; run again on a file that is not being written", in.name)
			}
		}
		return jsonl.NewReader(ctx, r.env, []string{in.name}, nil, jsonl.Options{}), func() {}, nil
	case !first:
		return jsonl.NewReader(ctx, nil, []string{"-"}, io.NewSectionReader(in.spool, 0, in.spooled), jsonl.Options{}), func() {}, nil
	}
	var src io.Reader = r.env.Stdin
	done := func() {}
	if in.name != "-" {
		f, err := jsonl.Open(ctx, in.name, r.env.Logf)
		if err != nil {
			return nil, nil, err
		}
		src, done = f, func() { f.Close() }
	}
	if !r.cfg.dryRun {
		spool, err := jsonl.CreateSpill("", "tokenmill-compose-*")
		if err != nil {
			done()
			return nil, nil, fmt.Errorf("spooling %s: %w", describe(in.name), err)
		}
		in.spool = spool
	}
	src = &spoolReader{src: src, in: in, limit: r.cfg.spoolMax}
	return jsonl.NewReader(ctx, r.env, []string{"-"}, src, jsonl.Options{}), done, nil
}

// count is the first pass: every record's groups and draw.
func (r *run) count(ctx context.Context, rejects *jsonl.Rejects) error {
	r.pass.Store(1)
	workers := r.cfg.workers
	bufs := make([][]byte, workers)
	var base int64 // bytes of the inputs before this one
	for _, in := range r.inputs {
		rd, done, err := r.reader(ctx, in, true)
		if err != nil {
			return err
		}
		h := xxh3.New()
		err = jsonl.Parallel(ctx, rd, workers, func(w int, b *jsonl.Batch[placed]) {
			for i := range b.Items {
				if it := &b.Items[i]; it.Err == nil {
					it.V = r.place(it.Data, &bufs[w])
				}
			}
		}, func(b *jsonl.Batch[placed]) error {
			for i := range b.Items {
				it := &b.Items[i]
				in.items++
				r.read.Add(1)
				if it.Err != nil {
					if errors.Is(it.Err, errSpoolFull) {
						return r.spoolFull(in)
					}
					var ie *jsonl.InputError
					if errors.As(it.Err, &ie) && !in.regular && in.name != "-" {
						ie.File = in.name
					}
					r.entries = append(r.entries, entry{leaf: -1})
					if err := rejects.Input(it.Err); err != nil {
						return err
					}
					continue
				}
				h.Write(it.Data)
				h.Write([]byte{'\n'})
				if it.V.rej != nil {
					r.entries = append(r.entries, entry{leaf: -1})
					line := it.RawLine
					if !in.regular {
						line.File = in.name
					}
					if err := rejects.Add(line, it.V.rej.reason, it.V.rej.detail); err != nil {
						return err
					}
					continue
				}
				leaf := r.leafOf(it.V.path)
				leaf.avail++
				r.entries = append(r.entries, entry{rank: it.V.rank, leaf: int32(leaf.node.leaf)})
			}
			r.bytes.Store(base + b.Read.Bytes)
			return nil
		})
		done()
		if err == nil && in.overflow {
			err = r.spoolFull(in)
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		in.digest = h.Sum64()
		base = r.bytes.Load()
	}
	return nil
}

// spoolFull is the error of a pipe that outgrew --spool-max.
func (r *run) spoolFull(in *input) error {
	return fmt.Errorf("%s holds more than --spool-max %s, and compose reads its input twice (count, then select): name a file instead of a pipe, or raise --spool-max", describe(in.name), cli.Size(r.cfg.spoolMax))
}

// leafOf is the leaf a record's groups lead to, made on first sight.
func (r *run) leafOf(path []string) *leafState {
	lv := r.root
	for i, v := range path {
		n := lv.get(v, r)
		if n.child == nil || i == len(path)-1 {
			return r.leaves[n.leaf]
		}
		lv = n.child
	}
	panic("compose: a record with no group")
}

// plan sets every leaf's part and cut.
func (r *run) plan() {
	r.planGroups()
	r.cuts()
}

// planGroups sets every group's part, and every leaf's copies.
func (r *run) planGroups() {
	r.root.count(r)
	r.root.weigh()
	computed := r.total == 0
	if computed {
		r.total = r.root.fullTotal()
		// Rounding can ask a group for one more than it has: step down
		// to a total every group gives in full.
		for t := r.total; t > 0; t-- {
			r.root.plan(t, false)
			if !r.root.short() {
				r.total = t
				break
			}
			if r.total-t > 1000 {
				break
			}
		}
	}
	if given := r.root.plan(r.total, r.repeat); computed {
		r.total = given // an empty group's share went unfilled
	}
	for _, l := range r.leaves {
		ask := l.node.ask
		if l.node.excluded || l.avail == 0 || ask <= 0 {
			continue
		}
		if ask > l.avail {
			l.base, l.k = ask/l.avail, ask%l.avail
		} else {
			l.k = ask
		}
		l.all = l.k == l.avail
	}
}

// cuts finds, for each leaf that gives some but not all of its records
// once more, the draw below which they are taken.
func (r *run) cuts() {
	ranks := make([][]uint32, len(r.leaves))
	for i, l := range r.leaves {
		if l.k > 0 && !l.all {
			ranks[i] = make([]uint32, 0, l.avail)
		}
	}
	for _, e := range r.entries {
		if e.leaf >= 0 && ranks[e.leaf] != nil {
			ranks[e.leaf] = append(ranks[e.leaf], e.rank)
		}
	}
	for i, rs := range ranks {
		if rs == nil {
			continue
		}
		l := r.leaves[i]
		slices.Sort(rs)
		l.thr = rs[l.k-1]
		lt, _ := slices.BinarySearch(rs, l.thr)
		l.needEq = l.k - int64(lt)
		ranks[i] = nil
	}
}

// copies is how many times the record of entry e is written.
func (r *run) copies(e entry) int64 {
	if e.leaf < 0 {
		return 0
	}
	l := r.leaves[e.leaf]
	n := l.base
	switch {
	case l.all:
		n++
	case l.k == 0:
	case e.rank < l.thr:
		n++
	case e.rank == l.thr && l.eqTaken < l.needEq:
		l.eqTaken++
		n++
	}
	return n
}

// write is the second pass: each chosen record, byte for byte, in input
// order, and its repeats.
func (r *run) write(ctx context.Context, out *jsonl.Writer) error {
	r.planned.Store(r.total)
	r.pass.Store(2)
	var buf []byte
	i := 0
	for _, in := range r.inputs {
		rd, done, err := r.reader(ctx, in, false)
		if err != nil {
			return err
		}
		h := xxh3.New()
		var items int64
		for {
			rec, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil && !isInputError(err) {
				rd.Close()
				done()
				return err
			}
			items++
			if items > in.items || i >= len(r.entries) {
				break
			}
			e := r.entries[i]
			i++
			if err != nil {
				continue
			}
			h.Write(rec.Data)
			h.Write([]byte{'\n'})
			n := r.copies(e)
			if n == 0 {
				continue
			}
			if err := out.Write(rec.Data); err != nil {
				rd.Close()
				done()
				return err
			}
			for j := int64(2); j <= n; j++ {
				if buf, err = markRepeat(buf[:0], rec.Data, j); err != nil {
					rd.Close()
					done()
					return err
				}
				if err := out.Write(buf); err != nil {
					rd.Close()
					done()
					return err
				}
			}
			r.written.Add(n)
			if items&1023 == 0 && ctx.Err() != nil {
				break
			}
		}
		rd.Close()
		done()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if items != in.items || h.Sum64() != in.digest {
			return fmt.Errorf("%s changed between compose's two passes (%d records, then %d): nothing is written; run again on input that stays as it is", describe(in.name), in.items, items)
		}
	}
	return nil
}

func isInputError(err error) bool {
	var ie *jsonl.InputError
	return errors.As(err, &ie)
}

// markRepeat is the record with "compose": {"repeat": n} in place of any
// "compose" it had.
func markRepeat(dst, data []byte, n int64) ([]byte, error) {
	body := data
	if present(field(data, "compose")) {
		var err error
		if body, err = record.WithoutFields(nil, data, "compose"); err != nil {
			return dst, err
		}
	}
	return record.AppendField(dst, body, "compose", []byte(`{"repeat":`+strconv.FormatInt(n, 10)+`}`))
}
