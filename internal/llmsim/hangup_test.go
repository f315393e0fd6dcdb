package llmsim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// longRequest is a chat request for a long answer, under ctx.
func longRequest(t *testing.T, ctx context.Context, base, user string, stream bool) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", base+pathChat, strings.NewReader(chatBody(user, 30000, stream)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// A client that gives up on a request (its timeout, or a cancellation)
// closes the connection, and the server frees the request's slot or
// queue place at once instead of generating the answer for nobody.
func TestClientGoneFreesSlot(t *testing.T) {
	cases := []struct {
		name   string
		stream bool
		// queued: the request waits behind another on a one-slot server.
		queued bool
		// timeout: the client's own timeout ends it, else a cancellation.
		timeout bool
	}{
		{name: "timeout", timeout: true},
		{name: "cancel"},
		{name: "cancel queued", queued: true},
		{name: "cancel stream", stream: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{TimeScale: 20}
			if c.queued {
				cfg.MaxRunning = 1
			}
			fleet := startFleet(t, cfg, 1)
			ep, base := fleet.Endpoint(0), fleet.URLs()[0]
			blocker := make(chan error, 1)
			if c.queued {
				// A long answer takes the one slot for the whole test.
				bctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() {
					_, err := testClient.Do(longRequest(t, bctx, base, "first in line", false))
					blocker <- err
				}()
				waitFor(t, "the first request to run", func() bool { return ep.Stats().Running == 1 })
			}

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			client := testClient
			if c.timeout {
				client = &http.Client{Timeout: 300 * time.Millisecond}
			}
			errc := make(chan error, 1)
			go func() {
				resp, err := client.Do(longRequest(t, ctx, base, "a long story", c.stream))
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				errc <- err
			}()
			if c.queued {
				waitFor(t, "the request to queue", func() bool { return ep.Stats().Waiting == 1 })
			} else {
				waitFor(t, "the request to run", func() bool { return ep.Stats().Running == 1 })
			}
			if !c.timeout {
				cancel()
			}
			select {
			case err := <-errc:
				if err == nil {
					t.Fatal("the request was answered; want the client to give up")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the client did not give up within 10s")
			}
			want := int64(0)
			if c.queued {
				want = 1 // the first request still runs
			}
			waitFor(t, "the slot or queue place to be freed", func() bool {
				st := ep.Stats()
				return st.Running == want && st.Waiting == 0 && st.Cancelled == 1 && st.Connections == want
			})
			if st := ep.Stats(); st.Completed != 0 || st.Lost != 0 {
				t.Errorf("stats %+v", st)
			}
			if c.queued {
				cancel()
				testClient.CloseIdleConnections()
			}
		})
	}
}

// The hang fault is a stuck request: it holds its slot, so on a one-slot
// server the next request waits, until the stuck one's client gives up.
func TestHangHoldsSlot(t *testing.T) {
	fleet := startFleet(t, Config{TimeScale: 20, MaxRunning: 1, Faults: Faults{HangRate: 1}}, 1)
	ep, base := fleet.Endpoint(0), fleet.URLs()[0]
	hctx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	hung := make(chan error, 1)
	go func() {
		_, err := testClient.Do(longRequest(t, hctx, base, "stuck", false))
		hung <- err
	}()
	waitFor(t, "the hung request to take the slot", func() bool { return ep.Stats().Running == 1 })
	if err := ep.SetFaults(Faults{}); err != nil {
		t.Fatal(err)
	}
	next := make(chan int, 1)
	go func() {
		s, _, err := postChat(t, base, chatBody("next", 5, false))
		if err != nil {
			t.Error(err)
		}
		next <- s
	}()
	waitFor(t, "the next request to queue behind the hung one", func() bool {
		st := ep.Stats()
		return st.Running == 1 && st.Waiting == 1
	})
	select {
	case s := <-next:
		t.Fatalf("the next request was answered (%d) while the hung one held the slot", s)
	default:
	}
	giveUp()
	if err := <-hung; !errors.Is(err, context.Canceled) {
		t.Errorf("hung request: %v, want it cancelled by the client", err)
	}
	select {
	case s := <-next:
		if s != 200 {
			t.Errorf("next request: %d", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the next request was not answered within 10s of the hung one's client leaving")
	}
	if st := ep.Stats(); st.Hung != 1 || st.Cancelled != 1 || st.Completed != 1 || st.Running != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Without the batching model a hung request counts as running until its
// client leaves.
func TestHangInstantCountsRunning(t *testing.T) {
	fleet := startFleet(t, Config{Instant: true, Faults: Faults{HangRate: 1}}, 1)
	ep := fleet.Endpoint(0)
	client := &http.Client{Timeout: 200 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		_, err := client.Do(longRequest(t, context.Background(), fleet.URLs()[0], "stuck", false))
		done <- err
	}()
	waitFor(t, "the hung request to count as running", func() bool { return ep.Stats().Running == 1 })
	if err := <-done; err == nil {
		t.Fatal("a hung request was answered")
	}
	waitFor(t, "the hung request to stop counting", func() bool { return ep.Stats().Running == 0 })
}

// Watching a connection takes nothing from it: requests one after another
// on one keep-alive connection are all answered, and it stays open.
func TestWatchKeepsKeepAlive(t *testing.T) {
	fleet := startFleet(t, Config{TimeScale: 2000}, 1)
	ep := fleet.Endpoint(0)
	for i := 0; i < 5; i++ {
		s, b, err := postChat(t, fleet.URLs()[0], chatBody("again", 20, false))
		if err != nil || s != 200 {
			t.Fatalf("request %d: %d %s %v", i, s, b, err)
		}
	}
	if st := ep.Stats(); st.Completed != 5 || st.Connections != 1 || st.Cancelled != 0 {
		t.Errorf("stats %+v, want 5 completed on 1 connection", st)
	}
}
