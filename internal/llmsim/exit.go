package llmsim

import (
	"context"
	"fmt"
	"time"

	"tokenmill/lib/cli"
)

// A server process that dies and one that is slow to start, for the
// supervisor of a fleet (serve) to restart and wait for: --exit-after,
// --exit-at and --listen-delay act on the process, where the faults act
// on an endpoint that stays.

// exitFaults makes --exit-after a crash of every endpoint after that many
// generation requests (the crash then ends the process: watchExit).
func (c *Command) exitFaults(cfg *Config) error {
	switch {
	case c.ExitAfter < 0 || c.ExitAt < 0 || c.ListenDelay < 0:
		return cli.Usagef("--exit-after, --exit-at and --listen-delay must not be negative")
	case c.ExitAfter > 0 && (c.CrashAfter > 0 || c.RestartAfter > 0):
		return cli.Usagef("--exit-after ends the process on a crash: it goes without --crash-after and --restart-after")
	case c.ExitAfter > 0:
		cfg.Faults.CrashAfter = c.ExitAfter
	}
	return nil
}

// waitToListen waits --listen-delay (simulated time) before the fleet
// listens; false if ctx ended first.
func (c *Command) waitToListen(ctx context.Context) bool {
	if c.ListenDelay <= 0 {
		return true
	}
	scale := c.TimeScale
	if scale <= 0 {
		scale = 1
	}
	clock := NewScaledClock(scale)
	return clock.Sleep(ctx, c.ListenDelay)
}

// watchExit says why the process ends by itself: an endpoint crashed
// under --exit-after, or --exit-at came. Nothing is sent while neither is
// set.
func (c *Command) watchExit(ctx context.Context, f *Fleet) <-chan error {
	out := make(chan error, 1)
	if c.ExitAt > 0 {
		clock := f.Clock()
		exitAt := clock.Now() + c.ExitAt // taken now, as start's readyAt
		go func() {
			if clock.Sleep(ctx, exitAt) {
				send(out, fmt.Errorf("exiting %v after it started (--exit-at)", c.ExitAt))
			}
		}()
	}
	if c.ExitAfter > 0 {
		go func() {
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if f.Stats().Crashes > 0 {
					send(out, fmt.Errorf("exiting on generation request %d (--exit-after %d)", c.ExitAfter+1, c.ExitAfter))
					return
				}
			}
		}()
	}
	return out
}

// send hands err on unless a reason is there already: the first wins.
func send(out chan<- error, err error) {
	select {
	case out <- err:
	default:
	}
}
