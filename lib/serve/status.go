package serve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/procgroup"
)

// Status is serve status: what the status file says, and whether the
// serve that wrote it still runs.
type Status struct {
	StateFlag `embed:""`
	JSON      bool `help:"Print the status file itself (JSON): serve's pid and state, and per server its URL, GPUs, state, pid, restarts, failed starts, last exit and log."`
}

// Stop is serve stop: stop the serve of a state directory, or the servers
// a killed one left behind.
type Stop struct {
	StateFlag `embed:""`
	Grace     time.Duration `default:"30s" help:"How long servers left behind have to exit after SIGTERM before their process groups get SIGKILL (a serve that runs stops its servers with its own --grace)."`
	Wait      time.Duration `default:"10m" help:"How long to wait for a serve that runs to stop its servers and exit."`
}

// serveRuns reports whether a serve holds dir's lock now.
func serveRuns(dir string) (bool, error) {
	f, ok, err := lock(filepath.Join(dir, lockName))
	if err != nil {
		return false, err
	}
	if ok {
		f.Close()
	}
	return !ok, nil
}

// loadState reads dir's status file, saying so when no serve ran there.
func loadState(dir string) (*State, error) {
	st, err := readState(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no serve has run with --state-dir %s (no %s there)", dir, stateName)
	}
	return st, err
}

func (c *Status) Run(ctx context.Context, env *cli.Env) error {
	st, err := loadState(c.StateDir)
	if err != nil {
		return err
	}
	runs, err := serveRuns(c.StateDir)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(env.Stdout)
	if c.JSON {
		b, err := readStateFile(c.StateDir)
		if err != nil {
			return err
		}
		out.Write(b)
	} else {
		writeStatus(out, st, runs, time.Now())
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if !runs {
		return fmt.Errorf("no serve runs with --state-dir %s (the last, pid %d, is %s)", c.StateDir, st.PID, lastWord(st))
	}
	return nil
}

// lastWord is what became of a serve that no longer runs.
func lastWord(st *State) string {
	if st.State == serveRunning || st.State == serveStopping {
		return "gone without stopping: killed?"
	}
	return st.State
}

// writeStatus prints st as a table, one server a row.
func writeStatus(w *bufio.Writer, st *State, runs bool, now time.Time) {
	how := "runs"
	if !runs {
		how = "does not run (" + lastWord(st) + ")"
	}
	fmt.Fprintf(w, "serve (pid %d) %s; started %s, updated %s; endpoints file %s\n", st.PID, how,
		st.Started.Format(time.RFC3339), st.Updated.Format(time.RFC3339), cli.Escape(st.EndpointsFile, cli.MaxLogLine))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tURL\tGPUS\tSTATE\tPID\tRESTARTS\tLAST EXIT\tCHECK\tLOG")
	for _, s := range st.Servers {
		state := s.State
		switch {
		case !runs && stillRuns(st, s):
			state = "left running"
		case !runs && state != stateGivenUp:
			state = stateStopped
		case state == stateReady && !s.ReadySince.IsZero():
			state += " " + cli.ShortDuration(now.Sub(s.ReadySince))
		}
		pid, gpus, exit, check := "-", "-", "-", "-"
		if s.PID > 0 {
			pid = fmt.Sprint(s.PID)
		}
		if s.GPUs != "" {
			gpus = s.GPUs
		}
		if s.LastExit != "" {
			exit = s.LastExit + " at " + s.LastExitAt.Format(time.TimeOnly)
		}
		if s.Check != "" {
			check = s.Check
		}
		// What a server answered, and names from outside: shown, never
		// sent to the terminal raw (a tab would break the table too).
		esc := func(v string) string { return cli.Escape(strings.ReplaceAll(v, "\t", " "), cli.MaxLogLine) }
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.Index, esc(s.URL), esc(gpus), esc(state), pid, s.Restarts, esc(exit), esc(check), esc(s.Log))
	}
	tw.Flush()
}

func (c *Stop) Run(ctx context.Context, env *cli.Env) error {
	if c.Grace < 0 || c.Wait <= 0 {
		return usagef("--grace must not be negative and --wait must be positive")
	}
	st, err := loadState(c.StateDir)
	if err != nil {
		return err
	}
	f, free, err := lock(filepath.Join(c.StateDir, lockName))
	if err != nil {
		return err
	}
	if !free {
		// A serve runs: it stops its servers itself.
		if !procgroup.Running(st.PID, st.PIDStart) {
			return fmt.Errorf("a process holds %s, but not the serve (pid %d) that the status file names", filepath.Join(c.StateDir, lockName), st.PID)
		}
		if err := signalProcess(st.PID, syscall.SIGTERM); err != nil {
			return fmt.Errorf("signalling serve (pid %d): %w", st.PID, err)
		}
		env.Logf("sent SIGTERM to serve (pid %d); waiting for it to stop its servers", st.PID)
		if f, err = waitLock(ctx, c.StateDir, c.Wait); err != nil {
			return err
		}
		if st, err = loadState(c.StateDir); err != nil {
			return err
		}
	}
	defer f.Close()
	left := leftovers(st)
	if len(left) == 0 {
		env.Logf("no server of serve (pid %d) runs", st.PID)
		return nil
	}
	env.Logf("stopping %s, left by serve (pid %d): SIGTERM, SIGKILL after %v", describe(left), st.PID, c.Grace)
	var failed []error
	now := time.Now()
	for _, s := range left {
		fam := leftFamily(st, s)
		report, err := clearFamily(fam, c.Grace, nil, false)
		if report != "" {
			env.Logf("server %d: %s", s.Index, report)
		}
		if err != nil {
			failed = append(failed, fmt.Errorf("server %d: %w", s.Index, err))
			continue
		}
		fam.close()
		sv := &st.Servers[s.Index]
		sv.State, sv.PID, sv.PIDStart, sv.LastExit, sv.LastExitAt, sv.Cgroup = stateStopped, 0, 0, "stopped by serve stop", now, ""
		if report != "" {
			sv.LastExit += "; " + report
		}
	}
	for _, s := range left {
		if s.Cgroup != "" {
			os.Remove(filepath.Dir(s.Cgroup)) // the serve's cgroups' directory, once empty
		}
	}
	st.Updated = now
	if err := writeState(c.StateDir, st, nil); err != nil {
		failed = append(failed, err)
	}
	if err := errors.Join(failed...); err != nil {
		return err
	}
	env.Logf("stopped %d servers", len(left))
	return nil
}

// waitLock waits, up to bound, until the serve holding dir's lock has
// exited, and takes the lock.
func waitLock(ctx context.Context, dir string, bound time.Duration) (*jsonl.Flock, error) {
	deadline := time.Now().Add(bound)
	for {
		f, ok, err := lock(filepath.Join(dir, lockName))
		if err != nil || ok {
			return f, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the serve of --state-dir %s still runs %v after SIGTERM (--wait): see serve status --state-dir %s", dir, bound, dir)
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
