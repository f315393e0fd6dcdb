package jsonl

import (
	"fmt"
	"io"
	"sync"
)

// Outputs owns every file one run writes, from the refusal before the
// first byte to the last rename, so that no command writes its own
// open/abort/close sequence:
//
//	outs, err := jsonl.CheckOutputs(env.Stdout, inputs, []jsonl.Output{{Flag: "-o", Path: cfg.Output}, {Flag: "--rejects", Path: cfg.Rejects}}, cfg.Force)
//	// ... other refusals, nothing written yet ...
//	if err := outs.Open(); err != nil { return err }
//	defer outs.Abort() // after Close, nothing
//	// ... write to outs.Writer("-o") ...
//	return outs.Close()
//
// Abort drops every file not yet in place, leaving what was there before;
// Close finishes the outputs in the order they were declared (stdout is
// flushed in its turn) and puts the files in place only once every one is
// complete (CommitAll), reporting the first error. It is safe for
// concurrent use.
type Outputs struct {
	stdout io.Writer
	force  bool
	specs  []Output

	mu      sync.Mutex
	writers []*Writer // in the order they close
	flags   []string  // writers[i]'s flag
	done    bool      // closed or aborted
}

// CheckOutputs refuses, before anything is written, any output that is
// unsafe (CheckPaths: an input, another output, a directory, an existing
// file without force) and returns the outputs, none opened yet. An output
// with Kept set is checked but left to the command to write (a state file,
// a lock), and so is one with an empty path.
func CheckOutputs(stdout io.Writer, inputs []Named, outputs []Output, force bool) (*Outputs, error) {
	if err := CheckPaths(inputs, outputs, force); err != nil {
		return nil, err
	}
	return &Outputs{stdout: stdout, force: force, specs: outputs}, nil
}

// Open creates every checked output that has a path and is neither Kept
// nor Later, in the order given. If one cannot be created, those already open are
// dropped and the error names its flag.
func (o *Outputs) Open() error {
	for _, s := range o.specs {
		if s.Path == "" || s.Kept || s.Later {
			continue
		}
		if _, err := o.Create(s.Flag, s.Path); err != nil {
			o.Abort()
			return fmt.Errorf("%s: %w", s.Flag, err)
		}
	}
	return nil
}

// Create opens one more output, owned like the others: one checked as
// Later, or a file whose name the run learns as it goes (shard's parts),
// checked beforehand. A Kept output (merge's settings sidecar) replaces
// the file there without force.
func (o *Outputs) Create(flag, path string) (*Writer, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return nil, fmt.Errorf("%s %q: the run's outputs are already closed", flag, path)
	}
	force := o.force
	for _, s := range o.specs {
		force = force || s.Kept && s.Flag == flag && s.Path == path
	}
	w, err := Create(path, o.stdout, WriterOptions{Force: force, Flag: flag})
	if err != nil {
		return nil, err
	}
	o.writers = append(o.writers, w)
	o.flags = append(o.flags, flag)
	return w, nil
}

// Writer is the output opened for flag (the first, if several were), or
// nil when the run writes none.
func (o *Outputs) Writer(flag string) *Writer {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, f := range o.flags {
		if f == flag {
			return o.writers[i]
		}
	}
	return nil
}

// Rejects counts and reports rejects to log and writes them to the
// --rejects output, if the run has one.
func (o *Outputs) Rejects(log Logger) *Rejects {
	return NewRejects(log, o.Writer("--rejects"))
}

// Abort drops every output not yet in place; stdout keeps what was
// written to it. It may be called after Close, to no effect.
func (o *Outputs) Abort() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return
	}
	o.done = true
	for _, w := range o.writers {
		w.Abort()
	}
}

// Close finishes every output in order and, once all are complete, puts
// their files in place one right after another. The first error is
// returned, naming its output; then no file is put in place (but for a
// rename that failed midway, after which those renamed stay).
func (o *Outputs) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return nil
	}
	o.done = true
	var first error
	for i, w := range o.writers {
		if err := w.Finish(); err != nil {
			first = fmt.Errorf("writing %s: %w", w.Path(), err)
			for _, later := range o.writers[i+1:] {
				later.Abort()
			}
			break
		}
	}
	return commitFinished(o.writers, first)
}
