package lifeline

import (
	"fmt"
	"os"
)

// program is the Host a program passes (the benchmark harness, which
// holds a real server up outside any test): a skip or a failure ends the
// start by a panic (abort) that Hold recovers, and the cleanups, the
// server's stop among them, run when the program is done with it.
type program struct {
	cleanups []func()
	failed   bool
	logf     func(string, ...any)
}

type abort struct{ why string }

func (p *program) Helper()                           {}
func (p *program) Skip(args ...any)                  { panic(abort{fmt.Sprint(args...)}) }
func (p *program) Fatal(args ...any)                 { p.failed = true; panic(abort{fmt.Sprint(args...)}) }
func (p *program) Fatalf(format string, args ...any) { p.Fatal(fmt.Sprintf(format, args...)) }
func (p *program) Errorf(format string, args ...any) { p.failed = true; p.Logf(format, args...) }
func (p *program) Logf(format string, args ...any)   { p.logf(format, args...) }
func (p *program) Cleanup(f func())                  { p.cleanups = append(p.cleanups, f) }
func (p *program) Failed() bool                      { return p.failed }

func (p *program) TempDir() string {
	dir, err := os.MkdirTemp("", "lifeline-")
	if err != nil {
		p.Fatal(err)
	}
	p.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// stop runs the cleanups, last first; one that fails does not keep the
// others from running.
func (p *program) stop() {
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		func() {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(abort); !ok {
						panic(r)
					}
				}
			}()
			p.cleanups[i]()
		}()
	}
	p.cleanups = nil
}

// Hold runs start (a server's Start) for a program rather than a test,
// logging through logf. It returns what start returned and the stop that
// runs its cleanups, or, when start skipped or failed, why, with the
// cleanups already run.
func Hold[T any](logf func(string, ...any), start func(Host) T) (v T, stop func(), why string) {
	p := &program{logf: logf}
	defer func() {
		if r := recover(); r != nil {
			a, ok := r.(abort)
			p.stop()
			if !ok {
				panic(r)
			}
			var zero T
			v, stop, why = zero, nil, a.why
		}
	}()
	return start(p), p.stop, ""
}
