// Package cli is the shell every tokenmill binary runs in: kong parsing with
// TOKENMILL_* environment variables, signal handling, and the one place
// where an error becomes an exit code.
//
// A tool's main is glue:
//
//	func main() { cli.Main("dedup", description, &cmd) }
//
// where cmd's Run(ctx context.Context, env *cli.Env) error does the work.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/alecthomas/kong"
	"golang.org/x/term"
)

// Exit codes shared by every tool.
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2
	ExitRejects     = 3
	ExitInterrupted = 130
)

// ErrRejects marks a run that finished but rejected or failed some records;
// wrap it (fmt.Errorf("...: %w", cli.ErrRejects)) to exit 3.
var ErrRejects = errors.New("finished with rejected records")

// ErrInterrupted is the cancellation cause after SIGINT or SIGTERM.
var ErrInterrupted = errors.New("interrupted")

// UsageError is a mistake in how the tool was called, found after parsing
// (e.g. two flags that exclude each other); it exits 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef builds a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Version is set at link time (-ldflags "-X tokenmill/lib/cli.Version=v1.2.3");
// otherwise the module version and commit from the build info (see help.go).
var Version = ""

// Globals are the flags every tool has; embed it in the command struct.
type Globals struct {
	Version kong.VersionFlag `help:"Print the version and exit." env:"-"`
}

// Env is what a command may touch of the outside world. Commands take their
// streams from here, never from the os package, so tests can drive them.
type Env struct {
	Name   string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Interactive is true when Stderr is a terminal: live progress displays
	// are drawn only then; otherwise progress is periodic plain lines.
	Interactive bool
	// Width is the terminal's width in columns, asked again at every
	// redraw of a live display (the window may be resized); 0 or a nil
	// func when unknown. See term.go.
	Width func() int
	// Height is the terminal's height in rows, the same way.
	Height func() int

	// interrupted, when set (OnInterrupt), says what the tool does on the
	// first SIGINT or SIGTERM, in place of the generic line.
	interrupted atomic.Pointer[func()]
	// forced, when set (OnSecondInterrupt), runs on every further signal:
	// true exits at once, false lets the run go on finishing.
	forced atomic.Pointer[func() bool]
	// Secrets are the run's credentials, replaced by *** in everything it
	// writes (see Protect); nil: none.
	Secrets *Secrets
}

// OnInterrupt makes the first SIGINT or SIGTERM call say (after the run's
// context is cancelled) instead of printing the generic "interrupted"
// line, so that a tool can tell at once what it is doing about it: what
// it finishes, for how long, how to stop it at once, how to continue.
func (e *Env) OnInterrupt(say func()) { e.interrupted.Store(&say) }

// OnSecondInterrupt makes every SIGINT or SIGTERM after the first call
// last before the process exits at once: what a tool that started
// processes of its own does so that none outlives it (serve kills its
// servers). last returns false to let the run go on instead (serve takes
// a signal that comes twice at once, from a job scheduler and its
// launcher, for one).
func (e *Env) OnSecondInterrupt(last func() bool) { e.forced.Store(&last) }

// Logf writes one diagnostic line to stderr, prefixed with the tool name.
// The line is escaped for the terminal and bounded (Escape): its
// arguments often quote outside text.
func (e *Env) Logf(format string, args ...any) {
	fmt.Fprint(e.Stderr, e.Line(format, args...))
}

// Line is the diagnostic line Logf writes, newline included.
func (e *Env) Line(format string, args ...any) string {
	return e.Name + ": " + Escape(fmt.Sprintf(format, args...), MaxLogLine) + "\n"
}

// OSEnv is the Env of a real process.
func OSEnv(name string) *Env {
	return &Env{
		Name:        name,
		Stdin:       os.Stdin,
		Stdout:      os.Stdout,
		Stderr:      os.Stderr,
		Interactive: term.IsTerminal(int(os.Stderr.Fd())),
		Width:       stderrWidth,
		Height:      stderrHeight,
	}
}

// Main runs cmd as the tool name with the process's arguments and exits
// with the code Run chose.
func Main(name, description string, cmd any) {
	code := Run(context.Background(), OSEnv(name), description, cmd, os.Args[1:])
	runAtExit()
	os.Exit(code)
}

// atExit holds what must be undone however the process ends, a second
// SIGINT or SIGTERM (which exits at once) included: temporary files not
// yet put in place.
var atExit struct {
	mu   sync.Mutex
	next int
	fns  map[int]func()
}

// AtExit registers f to run when the process exits through Main or on a
// second signal, unless the returned cancel runs first. f must be quick
// and safe to call from another goroutine.
func AtExit(f func()) (cancel func()) {
	atExit.mu.Lock()
	defer atExit.mu.Unlock()
	if atExit.fns == nil {
		atExit.fns = map[int]func(){}
	}
	id := atExit.next
	atExit.next++
	atExit.fns[id] = f
	return func() {
		atExit.mu.Lock()
		delete(atExit.fns, id)
		atExit.mu.Unlock()
	}
}

func runAtExit() {
	atExit.mu.Lock()
	fns := atExit.fns
	atExit.fns = nil
	atExit.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

type exitRequest int

// Run parses args into cmd, runs it, and returns the exit code. description
// is the --help text, which should show a real example pipeline.
func Run(parent context.Context, env *Env, description string, cmd any, args []string) (code int) {
	defer func() {
		if r := recover(); r != nil {
			if c, ok := r.(exitRequest); ok {
				code = int(c)
				return
			}
			panic(r)
		}
	}()
	parser, err := kong.New(cmd,
		kong.Name(env.Name),
		kong.Description(description),
		kong.Writers(env.Stdout, env.Stderr),
		kong.Exit(func(c int) { panic(exitRequest(c)) }),
		kong.DefaultEnvars("TOKENMILL_"+strings.ToUpper(env.Name)),
		aliasEnvars("TOKENMILL_"+strings.ToUpper(env.Name)),
		kong.Vars{"version": env.Name + " (tokenmill) " + version()},
		kong.ConfigureHelp(kong.HelpOptions{Compact: true, WrapUpperBound: 100}),
		kong.ValueFormatter(helpValue),
	)
	if err != nil {
		// A broken grammar is a bug in the tool, not in the call.
		fmt.Fprintf(env.Stderr, "%s: internal error: %v\n", env.Name, err)
		return ExitFailure
	}
	if err := misspelledCommand(parser.Model.Node, args); err != nil {
		return exitCode(env, parent, err)
	}
	kctx, err := parser.Parse(defaultCommandHelp(parser.Model.Node, args))
	if err != nil {
		fmt.Fprint(env.Stderr, env.Line("%s", parseError(err)))
		fmt.Fprintf(env.Stderr, "Run '%s --help' for usage.\n", env.Name)
		return ExitUsage
	}

	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	stop := handleSignals(env, cancel)
	defer stop()

	kctx.BindTo(ctx, (*context.Context)(nil))
	err = kctx.Run(env)
	return exitCode(env, ctx, err)
}

// exitCode is the one place where an outcome becomes an exit code.
func exitCode(env *Env, ctx context.Context, err error) int {
	interrupted := errors.Is(context.Cause(ctx), ErrInterrupted)
	var usage *UsageError
	switch {
	case interrupted:
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrInterrupted) && !errors.Is(err, ErrRejects) {
			env.Logf("error: %s", Plain(err.Error()))
		}
		return ExitInterrupted
	case err == nil:
		return ExitOK
	case errors.As(err, &usage):
		env.Logf("%s", Plain(err.Error()))
		fmt.Fprintf(env.Stderr, "Run '%s --help' for usage.\n", env.Name)
		return ExitUsage
	case errors.Is(err, ErrRejects):
		return ExitRejects
	}
	env.Logf("error: %s", Plain(err.Error()))
	return ExitFailure
}

// handleSignals cancels the run on the first SIGINT or SIGTERM so the tool
// can stop reading, flush and exit 130; a second signal exits at once.
// SIGPIPE is left alone: Go's default ends the process quietly when stdout
// is a closed pipe, which is what `| head` wants.
func handleSignals(env *Env, cancel context.CancelCauseFunc) (stop func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
		case <-done:
			return
		}
		// Cancel before saying so: a test (or a user) that sees the line
		// may rely on the run being cancelled already.
		cancel(ErrInterrupted)
		if say := env.interrupted.Load(); say != nil {
			(*say)()
		} else {
			env.Logf("interrupted: finishing up (signal again to exit at once)")
		}
		for {
			select {
			case <-ch:
				if last := env.forced.Load(); last != nil && !(*last)() {
					continue
				}
				env.Logf("interrupted twice: exiting now")
				runAtExit()
				os.Exit(ExitInterrupted)
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// Interrupted reports whether ctx ended because of a signal.
func Interrupted(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), ErrInterrupted)
}
