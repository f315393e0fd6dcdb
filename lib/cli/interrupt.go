package cli

import (
	"context"
	"fmt"
)

// Output is a run's main output as an interrupted run ends it
// (*jsonl.Writer is one).
type Output interface {
	Path() string // "-" for stdout
	Close() error // flushes it and puts it in place
	Abort()       // drops it, leaving an earlier file as it was
}

// EndInterrupted ends a run that SIGINT or SIGTERM stopped, the one way
// every stage ends one: nothing that would look complete is left behind
// (abort drops the run's output files), except that out, when it is
// stdout, is flushed first, so the records decided before the signal are
// there as whole lines. It says summary, then what the run left after how
// many records read (and notDone, when not "": what else it did not do),
// and returns ctx's cause, which exits 130.
func (e *Env) EndInterrupted(ctx context.Context, out Output, abort func(), summary string, read int64, notDone string) error {
	where := "no file written"
	if out.Path() == "-" {
		out.Close() // a failed flush changes nothing: the run exits 130 all the same
		where = "stdout holds the records decided before the interrupt"
	}
	abort()
	e.Logf("%s", summary)
	line := fmt.Sprintf("interrupted after %d records: output incomplete (%s)", read, where)
	if notDone != "" {
		line += "; " + notDone
	}
	e.Logf("%s", line)
	return context.Cause(ctx)
}
