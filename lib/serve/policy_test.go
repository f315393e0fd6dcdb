package serve

import (
	"strings"
	"testing"
	"time"
)

var testPolicy = policy{startTimeout: 10 * time.Minute, unhealthyAfter: time.Minute, backoff: 5 * time.Second, maxBackoff: 5 * time.Minute, maxFailures: 3}

// A start's checks on virtual time: not ready until its first 200, a
// restart once --start-timeout has passed without one; once ready, a
// failed check starts the --unhealthy-after count, an answer ends it, and
// a restart comes when the checks have failed that long.
func TestPolicyChecks(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at     time.Duration
		ready  bool
		want   verdict
		reason string
	}
	for _, tt := range []struct {
		name  string
		steps []step
	}{
		{"loads then runs", []step{{2 * time.Second, false, keep, ""}, {9 * time.Minute, false, keep, ""}, {9*time.Minute + 2*time.Second, true, nowReady, ""}, {time.Hour, true, keep, ""}}},
		{"never ready", []step{{time.Minute, false, keep, ""}, {10*time.Minute - time.Second, false, keep, ""}, {10 * time.Minute, false, restart, "not ready within 10m0s (--start-timeout)"}}},
		{"a blip", []step{{time.Second, true, nowReady, ""}, {time.Hour, false, nowFailing, ""}, {time.Hour + 59*time.Second, false, keep, ""}, {time.Hour + 61*time.Second, true, recovered, ""}, {2 * time.Hour, false, nowFailing, ""}, {2*time.Hour + 30*time.Second, true, recovered, ""}}},
		{"stops answering", []step{{time.Second, true, nowReady, ""}, {time.Hour, false, nowFailing, ""}, {time.Hour + 30*time.Second, false, keep, ""}, {time.Hour + time.Minute, false, restart, "its readiness check failed for 1m0s (--unhealthy-after 1m0s)"}}},
	} {
		l := life{started: t0}
		for _, s := range tt.steps {
			v, reason := testPolicy.check(&l, t0.Add(s.at), s.ready)
			if v != s.want || reason != s.reason {
				t.Errorf("%s: at %v ready=%v: %v %q, want %v %q", tt.name, s.at, s.ready, v, reason, s.want, s.reason)
			}
		}
	}
	// --unhealthy-after 0: the first failed check of a ready server restarts it.
	strict := testPolicy
	strict.unhealthyAfter = 0
	l := life{started: t0, readySince: t0}
	if v, reason := strict.check(&l, t0.Add(time.Second), false); v != restart || !strings.Contains(reason, "--unhealthy-after 0") {
		t.Errorf("--unhealthy-after 0: %v %q", v, reason)
	}
}

// What follows each start that ended, on virtual time: the wait doubles
// with every restart in a row up to --max-backoff and starts over after
// the server stayed ready that long; --max-failures starts in a row that
// never got ready give up, and a start that got ready clears that count.
func TestPolicyNext(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	type end struct {
		ready  time.Duration // how long after its start it was ready (-1: never)
		lasted time.Duration // how long it ran
		wait   time.Duration
		giveUp bool
	}
	for _, tt := range []struct {
		name string
		ends []end
	}{
		{"crashes after a while", []end{{time.Minute, 3 * time.Hour, 5 * time.Second, false}, {time.Minute, 3 * time.Hour, 5 * time.Second, false}}},
		{"crash loop once ready", []end{{time.Second, 2 * time.Second, 5 * time.Second, false}, {time.Second, 2 * time.Second, 10 * time.Second, false},
			{time.Second, 2 * time.Second, 20 * time.Second, false}, {time.Second, 2 * time.Second, 40 * time.Second, false},
			{time.Second, 2 * time.Second, 80 * time.Second, false}, {time.Second, 2 * time.Second, 160 * time.Second, false},
			{time.Second, 2 * time.Second, 5 * time.Minute, false}, {time.Second, 2 * time.Second, 5 * time.Minute, false},
			{time.Second, 6 * time.Minute, 5 * time.Second, false}}},
		{"never starts", []end{{-1, time.Second, 5 * time.Second, false}, {-1, time.Second, 10 * time.Second, false}, {-1, time.Second, 0, true}}},
		{"starts in between", []end{{-1, time.Second, 5 * time.Second, false}, {-1, time.Second, 10 * time.Second, false},
			{time.Second, 10 * time.Second, 20 * time.Second, false}, {-1, time.Second, 40 * time.Second, false}, {-1, time.Second, 80 * time.Second, false}, {-1, time.Second, 0, true}}},
	} {
		var h history
		at := t0
		for k, e := range tt.ends {
			l := life{started: at}
			if e.ready >= 0 {
				l.readySince = at.Add(e.ready)
			}
			wait, giveUp := testPolicy.next(&h, l, at.Add(e.lasted))
			if wait != e.wait || giveUp != e.giveUp {
				t.Errorf("%s: end %d: wait %v, give up %v; want %v, %v", tt.name, k+1, wait, giveUp, e.wait, e.giveUp)
			}
			at = at.Add(e.lasted + wait)
		}
	}
}
