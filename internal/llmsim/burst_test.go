package llmsim

import (
	"context"
	"strings"
	"testing"
)

// A fail burst answers 500 to requests FailBurstAfter+1 to
// FailBurstAfter+FailBurst after every (re)start, health ready throughout,
// each the same answer; the rest are answered. FailRate 1 is the fault that
// never recovers: the same 500 to every request.
func TestFailBurst(t *testing.T) {
	statuses := func(t *testing.T, base string, n int) string {
		t.Helper()
		var got []string
		for i := 0; i < n; i++ {
			s, b, err := postChat(t, base, chatBody("question "+string(rune('a'+i)), 3, false))
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if s == 500 && !strings.Contains(string(b), msgFail) {
				t.Fatalf("request %d: a 500 without the failure's message: %s", i, b)
			}
			if getStatus(t, base+pathHealth) != 200 {
				t.Fatalf("request %d: health not ready during the burst", i)
			}
			got = append(got, map[int]string{200: "ok", 500: "500"}[s])
		}
		return strings.Join(got, " ")
	}
	tests := []struct {
		name   string
		faults Faults
		want   string
	}{
		{"at start", Faults{FailBurst: 3}, "500 500 500 ok ok ok"},
		{"after some", Faults{FailBurst: 2, FailBurstAfter: 2}, "ok ok 500 500 ok ok"},
		{"for ever", Faults{FailRate: 1}, "500 500 500 500 500 500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fleet := startFleet(t, Config{Instant: true, Flavor: FlavorLlamaCpp, Faults: tt.faults}, 1)
			base := fleet.URLs()[0]
			if got := statuses(t, base, 6); got != tt.want {
				t.Fatalf("answers %q, want %q", got, tt.want)
			}
			if tt.faults.FailBurst == 0 {
				return
			}
			// A restart starts the count again.
			ep := fleet.Endpoint(0)
			ep.Crash()
			if err := ep.Restart(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "ready again", func() bool { return ep.State() == stateReady })
			testClient.CloseIdleConnections() // the crash dropped them
			if got := statuses(t, base, 6); got != tt.want {
				t.Fatalf("after a restart: answers %q, want %q", got, tt.want)
			}
			if st := ep.Stats(); st.Failed != 2*int64(tt.faults.FailBurst) || st.Completed != 12-st.Failed {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestFailBurstSpec(t *testing.T) {
	f, err := ParseFaultSpec(Faults{}, "fail-burst:12,fail-burst-after:40,crash-after:200")
	if err != nil || f.FailBurst != 12 || f.FailBurstAfter != 40 || f.CrashAfter != 200 {
		t.Fatalf("ParseFaultSpec: %+v %v", f, err)
	}
	for _, bad := range []string{"fail-burst:-1", "fail-burst-after:-3", "fail-burst:x"} {
		if _, err := ParseFaultSpec(Faults{}, bad); err == nil {
			t.Errorf("ParseFaultSpec(%q) succeeded", bad)
		}
	}
	if f, err := Start(context.Background(), Config{Faults: Faults{FailBurst: -1}}, 1); err == nil {
		f.Close()
		t.Error("Start with a negative fail burst succeeded")
	}
}
