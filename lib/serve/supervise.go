package serve

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"

	"tokenmill/lib/cli"
	"tokenmill/lib/clock"
)

// checker asks server i once whether it is ready, and says what it saw:
// lib/fleet's readiness rule, the one infer waits on.
type checker interface {
	Check(i int) (ready bool, note string)
}

// supervisor keeps the servers up: one goroutine per server starts it,
// asks its readiness, restarts it when it exits or stops answering, and
// gives up on it after too many failed starts; every change goes to the
// status file and, when the servers ready change, to the endpoints file.
type supervisor struct {
	pol        policy
	clk        clock.Clock
	probeEvery time.Duration
	grace      time.Duration
	progress   time.Duration
	check      checker
	specs      []spec
	logs       []*lumberjack.Logger
	dir        string // the state directory
	endpoints  string // the endpoints file
	logf       func(format string, args ...any)
	secrets    *cli.Secrets // replaced by *** in the status file (nil: none)
	saveBound  time.Duration
	write      func(path string, b []byte) error // writeAtomic; a test's stand-in

	mu      sync.Mutex
	st      State
	procs   []*proc // the start running now, per server (nil: none)
	failed  map[string]bool
	changed chan struct{} // closed and replaced on every change
	// The files are written by a goroutine of their own (writer), never
	// under mu: a write that blocks (a file system that hangs) holds up
	// neither the servers' supervision nor a signal's stop.
	next    *saveJob      // the latest state to write, nil once taken
	queued  uint64        // saves asked for
	written uint64        // saves done (written or failed)
	wrote   chan struct{} // closed and replaced whenever a save is done
	wake    chan struct{} // a save waits (capacity 1)
}

// saveJob is one save: the status file's bytes, and the endpoints file's
// with the URLs it lists.
type saveJob struct {
	state     []byte
	urls      string
	endpoints []byte
	n         uint64
}

func newSupervisor(specs []spec, st State) *supervisor {
	return &supervisor{specs: specs, st: st, procs: make([]*proc, len(specs)), failed: map[string]bool{}, changed: make(chan struct{}),
		wrote: make(chan struct{}), wake: make(chan struct{}, 1), saveBound: saveBound, write: writeAtomic}
}

// openLogs opens each server's log, rotated at maxMB megabytes, keep old
// ones kept.
func (s *supervisor) openLogs(maxMB, keep int) {
	for i := range s.specs {
		path := filepath.Join(s.dir, logsName, fmt.Sprintf("server-%d.log", i))
		s.logs = append(s.logs, &lumberjack.Logger{Filename: path, MaxSize: maxMB, MaxBackups: keep})
		s.st.Servers[i].Log = path
	}
}

// update changes server i's entry and saves the state.
func (s *supervisor) update(i int, f func(*Server)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.st.Servers[i])
	s.saveLocked()
}

// saveLocked hands the state to the writer: the status file and, when
// the servers ready have changed, the endpoints file, each replaced at
// once, so that a reader never sees half of one. A write that fails is
// said once per error and tried again at the next change.
func (s *supervisor) saveLocked() {
	s.st.Updated = s.clk.Now()
	var urls []string
	for _, sv := range s.st.Servers {
		if sv.State == stateReady {
			urls = append(urls, sv.URL)
		}
	}
	state, err := stateBytes(&s.st, s.secrets)
	if err != nil {
		s.reportLocked("the status file", err)
	}
	s.queued++
	s.next = &saveJob{state: state, urls: strings.Join(urls, "\n"), endpoints: endpointsText(&s.st), n: s.queued}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// writer writes what saveLocked hands it until stop is closed: the
// latest state only, however many changes came while it wrote.
func (s *supervisor) writer(stop <-chan struct{}) {
	listed := "\x00" // what the endpoints file lists; the first save writes it
	for {
		select {
		case <-s.wake:
		case <-stop:
			return
		}
		s.mu.Lock()
		job := s.next
		s.next = nil
		s.mu.Unlock()
		if job == nil {
			continue
		}
		var errs [2]error
		if job.state != nil {
			errs[0] = s.write(filepath.Join(s.dir, stateName), job.state)
		}
		if job.urls != listed {
			if errs[1] = s.write(s.endpoints, job.endpoints); errs[1] == nil {
				listed = job.urls
			}
		}
		s.mu.Lock()
		for i, what := range []string{"the status file", "the endpoints file"} {
			if errs[i] != nil {
				s.reportLocked(what, errs[i])
			}
		}
		s.written = job.n
		close(s.wrote)
		s.wrote = make(chan struct{})
		s.mu.Unlock()
	}
}

// flush waits, up to bound, for the saves asked for so far to be done;
// false (said) when the writer is held up past it.
func (s *supervisor) flush(bound time.Duration) bool {
	if s.saved(context.Background(), bound) {
		return true
	}
	s.logf("the status file and the endpoints file are not written after %v (their file system does not answer?): they may show an earlier state", bound)
	return false
}

// saved waits, up to bound or until ctx ends, for the saves asked
// for so far to be done (written, or failed and said): a server said to
// be ready is listed in the endpoints file by then.
func (s *supervisor) saved(ctx context.Context, bound time.Duration) bool {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for {
		s.mu.Lock()
		done, wrote := s.written >= s.queued, s.wrote
		s.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-wrote:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func (s *supervisor) reportLocked(what string, err error) {
	if msg := err.Error(); !s.failed[msg] {
		s.failed[msg] = true
		s.logf("cannot write %s: %v (tried again at the next change)", what, err)
	}
}

// snapshot is a copy of the state, and a channel closed at its next change.
func (s *supervisor) snapshot() (State, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Servers = slices.Clone(s.st.Servers)
	return st, s.changed
}

func (s *supervisor) setProc(i int, p *proc) {
	s.mu.Lock()
	s.procs[i] = p
	s.mu.Unlock()
}

// killAll sends SIGKILL to every server's family at once: the second
// signal, when waiting out the grace period is not wanted. It holds mu
// until the processes are gone, so that the run does not end meanwhile
// (serve then exits at once, saying so); mu is never held across a
// write, so nothing here waits on one.
func (s *supervisor) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	procs := s.procs
	for _, p := range procs {
		if p != nil {
			p.killNow()
		}
	}
	// serve exits next: it waits (bounded) until the processes are gone,
	// so nothing of them outlives it for as long as a loaded machine
	// takes to end them.
	for _, p := range procs {
		if p != nil {
			waitFamily(p.fam, killBound)
		}
	}
	// serve exits at once: its deferred calls do not run. Its cgroups are
	// removed if they can be now (each once its last process is reaped).
	reapNow()
	for _, p := range procs {
		if p != nil && p.fam.cg != nil {
			p.fam.cg.tryRemove()
		}
	}
	tryRemoveCgroups()
}

// run keeps every server up until ctx ends, then stops them all; or
// until every server has been given up, which is an error.
func (s *supervisor) run(ctx context.Context) error {
	stopWriter := make(chan struct{})
	go s.writer(stopWriter)
	defer close(stopWriter)
	var wg sync.WaitGroup
	for i := range s.specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.keepUp(ctx, i)
		}()
	}
	progressDone := make(chan struct{})
	progressCtx, stopProgress := context.WithCancel(ctx)
	go func() {
		defer close(progressDone)
		s.report(progressCtx)
	}()
	wg.Wait()
	stopProgress()
	<-progressDone
	sweepOrphans(s.grace, s.logf)
	s.mu.Lock()
	stopped := ctx.Err() != nil
	s.st.State = serveFailed
	if stopped {
		s.st.State = serveStopped
	}
	s.saveLocked()
	s.mu.Unlock()
	s.flush(s.saveBound)
	if stopped {
		return nil
	}
	return fmt.Errorf("every server was given up (see their logs in %s)", filepath.Join(s.dir, logsName))
}

// keepUp runs server i, again and again, until ctx ends or it is given up.
func (s *supervisor) keepUp(ctx context.Context, i int) {
	var h history
	for start := 0; ; start++ {
		l, why := s.runOnce(ctx, i, start)
		if ctx.Err() != nil {
			return
		}
		now := s.clk.Now()
		wait, giveUp := s.pol.next(&h, l, now)
		lived := now.Sub(l.started).Round(time.Second)
		sv := s.specs[i]
		if giveUp {
			s.update(i, func(e *Server) { e.State, e.FailedStarts = stateGivenUp, h.failedStarts })
			s.logf("server %d (%s) failed to start %d times in a row (last: %s); giving up on it (--max-failures %d); its log: %s",
				i, sv.url, h.failedStarts, why, s.pol.maxFailures, s.logs[i].Filename)
			return
		}
		s.update(i, func(e *Server) {
			e.State, e.FailedStarts, e.NextStart = stateRestarting, h.failedStarts, now.Add(wait)
		})
		s.logf("server %d (%s) %s after %v; restarting it in %v (restart %d); its log: %s", i, sv.url, why, lived, wait, start+1, s.logs[i].Filename)
		t := s.clk.NewTimer(wait)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			s.update(i, func(e *Server) { e.State, e.NextStart = stateStopped, time.Time{} })
			return
		}
	}
}

// checked is one readiness check's answer.
type checked struct {
	ready bool
	note  string
}

// runOnce starts server i (start 0 is the first) and watches it until it
// exits, is stopped for failing its checks, or ctx ends (then it stops
// it). It returns what the checks saw of this start and why it ended.
func (s *supervisor) runOnce(ctx context.Context, i, start int) (life, string) {
	sv := s.specs[i]
	now := s.clk.Now()
	l := life{started: now}
	fmt.Fprintf(s.logs[i], "=== serve: start %d of server %d (%s) at %s: %s\n", start+1, i, sv.url, now.Format(time.RFC3339), commandLine(sv))
	fam := newFamily(i, start)
	p, err := launch(sv, s.logs[i], fam)
	if err != nil {
		fam.close()
		why := "could not start (" + err.Error() + ")"
		s.update(i, func(e *Server) {
			e.Restarts, e.State, e.Started, e.LastExit, e.LastExitAt = start, stateStarting, now, why, now
		})
		return l, why
	}
	s.setProc(i, p)
	defer s.setProc(i, nil)
	s.update(i, func(e *Server) {
		e.Restarts, e.State, e.PID, e.PIDStart, e.Started = start, stateStarting, p.pgid, p.start, now
		e.ReadySince, e.NextStart, e.Check, e.Cgroup = time.Time{}, time.Time{}, "", ""
		if fam.cg != nil {
			e.Cgroup = fam.cg.dir
		}
	})
	var looked time.Time // when the family was last looked at
	results := make(chan checked, 1)
	checking := false
	probe := s.clk.NewTimer(min(s.probeEvery, 250*time.Millisecond))
	defer func() { probe.Stop() }()
	for {
		select {
		case <-ctx.Done():
			s.update(i, func(e *Server) { e.State = stateStopping })
			report, err := p.stop(s.grace)
			return l, s.end(i, p, "stopped by serve", report, err)
		case <-p.done:
			report, err := clearFamily(p.fam, s.grace, nil, false)
			return l, s.end(i, p, "exited ("+p.exitText()+")", report, err)
		case <-probe.C():
			// The family is looked at now and then, so that a worker that
			// leaves the server's tree unmarked is known by then.
			if now := time.Now(); now.Sub(looked) >= time.Second {
				looked = now
				p.fam.members()
			}
			if !checking {
				checking = true
				go func() {
					ready, note := s.check.Check(i)
					results <- checked{ready, note}
				}()
			}
			probe = s.clk.NewTimer(s.probeEvery)
		case r := <-results:
			checking = false
			now := s.clk.Now()
			v, reason := s.pol.check(&l, now, r.ready)
			switch v {
			case nowReady:
				s.update(i, func(e *Server) { e.State, e.ReadySince, e.FailedStarts, e.Check = stateReady, now, 0, r.note })
				s.saved(ctx, s.saveBound) // said once the endpoints file lists it
				s.logf("server %d (%s) is ready after %v (%s)", i, sv.url, now.Sub(l.started).Round(time.Millisecond), r.note)
			case nowFailing:
				s.update(i, func(e *Server) { e.State, e.Check = stateUnhealthy, r.note })
				s.logf("server %d (%s) stopped answering its readiness check (%s); restarted if that lasts %v (--unhealthy-after)", i, sv.url, r.note, s.pol.unhealthyAfter)
			case recovered:
				s.update(i, func(e *Server) { e.State, e.Check = stateReady, r.note })
				s.logf("server %d (%s) answers again (%s)", i, sv.url, r.note)
			case restart:
				s.update(i, func(e *Server) { e.State, e.Check = stateStopping, r.note })
				s.logf("server %d (%s): %s (last: %s): stopping it (SIGTERM, SIGKILL after %v)", i, sv.url, reason, r.note, s.grace)
				report, err := p.stop(s.grace)
				return l, s.end(i, p, "stopped: "+reason, report, err)
			default:
				if s.note(i) != r.note {
					s.update(i, func(e *Server) { e.Check = r.note })
				}
			}
		}
	}
}

// end records how a start of server i ended and returns why, with what
// of its processes had left its group (report) and what could not be
// stopped (stopErr).
func (s *supervisor) end(i int, p *proc, why, report string, stopErr error) string {
	if why == "stopped by serve" || strings.HasPrefix(why, "stopped: ") {
		why += " (" + p.exitText() + ")"
	}
	if report != "" {
		s.logf("server %d (%s): %s", i, s.specs[i].url, report)
		why += "; " + report
	}
	if stopErr != nil {
		s.logf("server %d: %v", i, stopErr)
		why += "; " + stopErr.Error()
	} else {
		p.fam.close()
	}
	now := s.clk.Now()
	fmt.Fprintf(s.logs[i], "=== serve: server %d %s at %s\n", i, why, now.Format(time.RFC3339))
	s.update(i, func(e *Server) {
		e.State, e.PID, e.PIDStart, e.ReadySince, e.LastExit, e.LastExitAt, e.Check, e.Cgroup = stateStopped, 0, 0, time.Time{}, why, now, "", ""
		if stopErr != nil {
			e.PID, e.PIDStart = p.pgid, p.start // still there: serve stop and the next serve find it
			if p.fam.cg != nil {
				e.Cgroup = p.fam.cg.dir
			}
		}
	})
	return why
}

func (s *supervisor) note(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Servers[i].Check
}

// report says, every --progress while some server is not ready, how many
// are and what the others' checks see, and once when all are.
func (s *supervisor) report(ctx context.Context) {
	start := s.clk.Now()
	var tick <-chan time.Time
	if s.progress > 0 {
		t := s.clk.NewTicker(s.progress)
		defer t.Stop()
		tick = t.C()
	}
	full, once := false, false
	for {
		st, changed := s.snapshot()
		ready, active := 0, 0
		for _, sv := range st.Servers {
			if sv.State != stateGivenUp {
				active++
			}
			if sv.State == stateReady {
				ready++
			}
		}
		if active > 0 && ready == active && !full {
			s.saved(ctx, s.saveBound) // said once the endpoints file lists them
		}
		switch {
		case active > 0 && ready == active && !full && !once:
			s.logf("all %d servers ready after %v; endpoints in %s: infer --endpoints-file %s ...", ready, s.clk.Now().Sub(start).Round(time.Millisecond), s.endpoints, s.endpoints)
			full, once = true, true
		case active > 0 && ready == active && !full:
			s.logf("the fleet is back to full: %d of %d servers ready", ready, len(st.Servers))
			full = true
		case ready < active:
			full = false
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick:
			if ready < active {
				s.logf("%d of %d servers ready after %v; %s", ready, active, s.clk.Now().Sub(start).Round(time.Second), waitingText(st, s.clk.Now(), s.pol))
			}
		}
	}
}

// waitingText names the servers not ready and what each is at.
func waitingText(st State, now time.Time, pol policy) string {
	var parts []string
	for _, sv := range st.Servers {
		switch sv.State {
		case stateReady, stateGivenUp:
			continue
		case stateStarting:
			check := sv.Check
			if check == "" {
				check = "not asked yet"
			}
			parts = append(parts, fmt.Sprintf("server %d: starting for %v, %s", sv.Index, now.Sub(sv.Started).Round(time.Second), check))
		case stateRestarting:
			parts = append(parts, fmt.Sprintf("server %d: restarting in %v", sv.Index, max(sv.NextStart.Sub(now), 0).Round(time.Second)))
		default:
			parts = append(parts, fmt.Sprintf("server %d: %s, %s", sv.Index, sv.State, sv.Check))
		}
	}
	return strings.Join(parts, "; ") + fmt.Sprintf(" (a server not ready %v after its start is restarted: --start-timeout)", pol.startTimeout)
}

// commandLine is s's command as a shell would show it, for the log.
func commandLine(s spec) string {
	if s.gpus != "" {
		return "CUDA_VISIBLE_DEVICES=" + s.gpus + " " + ShellJoin(s.args)
	}
	return ShellJoin(s.args)
}

// ShellJoin joins args as a shell would read them back, each quoted where
// it needs it.
func ShellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = a
		if a == "" || strings.ContainsFunc(a, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_./:=,+@%-{}", c))
		}) {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// closeLogs closes every server's log.
func (s *supervisor) closeLogs() {
	for _, l := range s.logs {
		l.Close()
	}
}
