package llmsim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

type chatAnswer struct {
	ID      string `json:"id"`
	Choices []struct {
		Message struct {
			Content          string  `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func chatBody(user string, maxTokens int, stream bool) string {
	b, _ := json.Marshal(map[string]any{
		"messages": []map[string]string{{"role": "user", "content": user}}, "max_tokens": maxTokens, "stream": stream,
	})
	return string(b)
}

func postChat(t *testing.T, base, body string) (int, []byte, error) {
	t.Helper()
	resp, err := testClient.Post(base+pathChat, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitFor polls cond until it holds, failing the test after a bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Every answer, from any endpoint, starts with its prompt's digest and
// has exactly as many words as the completion tokens it reports.
func TestAnswersBelongToPrompts(t *testing.T) {
	fleet := startFleet(t, Config{TimeScale: 2000}, 3)
	var wg sync.WaitGroup
	errs := make(chan error, 60)
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			user := fmt.Sprintf("question %d", i)
			status, b, err := postChat(t, fleet.URLs()[i%3], chatBody(user, 40, false))
			if err != nil || status != 200 {
				errs <- fmt.Errorf("request %d: %d %v", i, status, err)
				return
			}
			var a chatAnswer
			if err := json.Unmarshal(b, &a); err != nil {
				errs <- err
				return
			}
			text := a.Choices[0].Message.Content
			digest := PromptDigest(Prompt{Messages: []Message{{"user", user}}})
			if !strings.HasPrefix(text, digest+" ") && text != digest {
				errs <- fmt.Errorf("request %d: answer %.30q does not start with digest %s", i, text, digest)
			}
			if n := len(strings.Fields(text)); n != a.Usage.CompletionTokens || n > 40 {
				errs <- fmt.Errorf("request %d: %d words, usage says %d tokens", i, n, a.Usage.CompletionTokens)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := fleet.Stats(); st.Requests != 60 || st.Completed != 60 {
		t.Errorf("stats: %+v", st)
	}
}

// The scheduler batches concurrent requests: 20 sent at once on one
// endpoint all run in one batch.
func TestConcurrentRequestsShareTheBatch(t *testing.T) {
	clock := NewManualClock()
	fleet := startFleet(t, Config{Clock: clock}, 1)
	ep := fleet.Endpoint(0)
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if status, _, err := postChat(t, fleet.URLs()[0], chatBody(fmt.Sprintf("q%d", i), 300, false)); err != nil || status != 200 {
				t.Errorf("request %d: %d %v", i, status, err)
			}
		}(i)
	}
	waitFor(t, "20 requests in the scheduler", func() bool { st := ep.Stats(); return st.Running+st.Waiting == 20 })
	stop := advanceUntil(clock, func() bool { return ep.Stats().Completed == 20 })
	wg.Wait()
	stop()
	if st := ep.Stats(); st.MaxRunning != 20 || st.Running != 0 {
		t.Errorf("max running %d, running %d: want one batch of 20", st.MaxRunning, st.Running)
	}
}

// advanceUntil moves a manual clock forward a second at a time until done
// holds, so the scheduler steps on without real waiting.
func advanceUntil(clock *ManualClock, done func() bool) (stop func()) {
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for !done() {
			select {
			case <-quit:
				return
			default:
			}
			clock.Advance(time.Second)
			time.Sleep(100 * time.Microsecond)
		}
	}()
	return func() { close(quit); <-finished }
}

// With a clock that stands still, requests join the batch and stay there:
// one running and one waiting fill an endpoint with one slot and a queue
// of one.
func TestQueueLimit(t *testing.T) {
	clock := NewManualClock()
	fleet := startFleet(t, Config{MaxRunning: 1, MaxQueued: 1, Clock: clock, Seed: 7}, 1)
	ep, base := fleet.Endpoint(0), fleet.URLs()[0]
	body := chatBody("Name a prime number. (1104)", 3, false)
	results := make(chan int, 2)
	for i := 0; i < 2; i++ {
		go func() {
			status, _, err := postChat(t, base, body)
			if err != nil {
				status = -1
			}
			results <- status
		}()
		waitFor(t, "the request to be scheduled", func() bool {
			st := ep.Stats()
			return st.Running+st.Waiting == int64(i+1) && clock.Sleepers() == 1
		})
	}
	// One running, one waiting: the next is rejected the way SGLang does.
	g := readGolden(t, "error_queue_full.json")
	checkGolden(t, "error_queue_full.json", g, do(t, base, g.Request))
	gs := readGolden(t, "error_queue_full_stream.json")
	checkGolden(t, "error_queue_full_stream.json", gs, do(t, base, gs.Request))
	if st := ep.Stats(); st.Rejected != 2 || st.MaxWaiting != 1 {
		t.Errorf("rejected %d, max waiting %d", st.Rejected, st.MaxWaiting)
	}
	clock.Advance(time.Hour)
	for i := 0; i < 2; i++ {
		if s := <-results; s != 200 {
			t.Errorf("held request answered %d", s)
		}
	}
}

func TestStartupDelayHealth(t *testing.T) {
	clock := NewManualClock()
	fleet := startFleet(t, Config{Instant: true, Clock: clock, Faults: Faults{StartupDelay: 30 * time.Second}}, 1)
	base := fleet.URLs()[0]
	if s := getStatus(t, base+pathHealth); s != 503 {
		t.Fatalf("health while starting: %d, want 503", s)
	}
	if s := getStatus(t, base+pathHealthGen); s != 503 {
		t.Fatalf("health_generate while starting: %d, want 503", s)
	}
	done := make(chan int, 1)
	go func() {
		s, _, _ := postChat(t, base, chatBody("early", 4, false))
		done <- s
	}()
	select {
	case s := <-done:
		t.Fatalf("a request was answered (%d) before the server was up", s)
	case <-time.After(50 * time.Millisecond):
	}
	clock.Advance(30 * time.Second)
	if s := <-done; s != 200 {
		t.Errorf("held request answered %d", s)
	}
	if s := getStatus(t, base+pathHealth); s != 200 {
		t.Errorf("health once up: %d", s)
	}
	fleet.Endpoint(0).SetHealthy(false)
	if s := getStatus(t, base+pathHealth); s != 503 {
		t.Errorf("health after SetHealthy(false): %d", s)
	}
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := testClient.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// crash-after N: N requests are served, the next finds the endpoint
// crashing (connection dropped, port closed); it comes back after
// restart-after and is starting for startup-delay.
func TestCrashAfterAndRestart(t *testing.T) {
	clock := NewManualClock()
	faults := Faults{CrashAfter: 2, RestartAfter: 10 * time.Second, StartupDelay: 5 * time.Second}
	fleet := startFleet(t, Config{Instant: true, Clock: clock, PerEndpoint: map[int]Faults{0: faults}}, 2)
	ep, base := fleet.Endpoint(0), fleet.URLs()[0]
	waitFor(t, "the startup timer", func() bool { return clock.Sleepers() >= 1 })
	clock.Advance(5 * time.Second) // past the first startup delay
	waitFor(t, "endpoint ready", func() bool { return ep.State() == stateReady })
	for i := 0; i < 2; i++ {
		if s, _, err := postChat(t, base, chatBody("ok", 3, false)); err != nil || s != 200 {
			t.Fatalf("request %d before the crash: %d %v", i, s, err)
		}
	}
	if _, _, err := postChat(t, base, chatBody("boom", 3, false)); err == nil {
		t.Fatal("the crashing request got an answer")
	}
	if ep.State() != stateDown {
		t.Fatalf("state after crash: %s", ep.State())
	}
	if _, err := net.DialTimeout("tcp", ep.Addr(), time.Second); err == nil {
		t.Fatal("a crashed endpoint still accepts connections")
	}
	// The other endpoint is unaffected.
	if s, _, err := postChat(t, fleet.URLs()[1], chatBody("ok", 3, false)); err != nil || s != 200 {
		t.Fatalf("healthy endpoint: %d %v", s, err)
	}
	waitFor(t, "the restart timer", func() bool { return clock.Sleepers() >= 1 })
	clock.Advance(10 * time.Second)
	waitFor(t, "the restart", func() bool { return ep.State() == stateStarting })
	if s := getStatus(t, base+pathHealth); s != 503 {
		t.Errorf("health while restarting: %d", s)
	}
	waitFor(t, "the startup timer", func() bool { return clock.Sleepers() >= 1 })
	clock.Advance(5 * time.Second)
	waitFor(t, "ready again", func() bool { return ep.State() == stateReady })
	if s, _, err := postChat(t, base, chatBody("again", 3, false)); err != nil || s != 200 {
		t.Fatalf("after restart: %d %v", s, err)
	}
	if st := ep.Stats(); st.Crashes != 1 || st.Restarts != 1 || st.Completed != 3 || st.Lost != 1 {
		t.Errorf("stats %+v", st)
	}
}

// Crash and Restart by hand, with requests in flight: they are lost, and
// the endpoint serves again on the same address.
func TestManualCrashDropsInflight(t *testing.T) {
	clock := NewManualClock()
	fleet := startFleet(t, Config{Clock: clock}, 1)
	ep, base := fleet.Endpoint(0), fleet.URLs()[0]
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func(i int) {
			_, _, err := postChat(t, base, chatBody(fmt.Sprint(i), 5, false))
			errs <- err
		}(i)
	}
	waitFor(t, "three requests in the batch", func() bool { return ep.Stats().Running+ep.Stats().Waiting == 3 })
	ep.Crash()
	for i := 0; i < 3; i++ {
		if err := <-errs; err == nil {
			t.Error("an in-flight request was answered across a crash")
		}
	}
	if err := ep.Restart(); err != nil {
		t.Fatal(err)
	}
	if ep.URL() != base {
		t.Errorf("restarted on %s, was %s", ep.URL(), base)
	}
	stop := advanceUntil(clock, func() bool { return ep.Stats().Completed > 0 })
	defer stop()
	if s, _, err := postChat(t, base, chatBody("after", 5, false)); err != nil || s != 200 {
		t.Fatalf("after restart: %d %v", s, err)
	}
	// A client sees its connection drop before the handler that held it
	// has counted the request lost.
	waitFor(t, "three requests counted lost", func() bool { return ep.Stats().Lost >= 3 })
	if st := ep.Stats(); st.Lost != 3 || st.Crashes != 1 || st.Restarts != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestFaultRates(t *testing.T) {
	cases := []struct {
		name   string
		faults Faults
		check  func(t *testing.T, base string, fleet *Fleet)
	}{
		{"fail", Faults{FailRate: 1}, func(t *testing.T, base string, fleet *Fleet) {
			s, b, err := postChat(t, base, chatBody("x", 5, false))
			if err != nil || s != 500 || !strings.Contains(string(b), `"type":"InternalServerError"`) {
				t.Errorf("fail: %d %s %v", s, b, err)
			}
		}},
		{"limit", Faults{LimitRate: 1}, func(t *testing.T, base string, fleet *Fleet) {
			resp, err := testClient.Post(base+pathChat, "application/json", strings.NewReader(chatBody("x", 5, false)))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), "Rate limit reached") || fleet.Stats().Limited != 1 {
				t.Errorf("limit: %d, Retry-After %q, %s, %+v", resp.StatusCode, resp.Header.Get("Retry-After"), b, fleet.Stats())
			}
		}},
		{"abort", Faults{AbortRate: 1}, func(t *testing.T, base string, fleet *Fleet) {
			s, b, err := postChat(t, base, chatBody("x", 500, false))
			var a chatAnswer
			if err != nil || s != 200 || json.Unmarshal(b, &a) != nil {
				t.Fatalf("abort: %d %s %v", s, b, err)
			}
			if c := a.Choices[0]; c.FinishReason != "abort" || a.Usage.CompletionTokens < 1 || len(strings.Fields(c.Message.Content)) != a.Usage.CompletionTokens {
				t.Errorf("abort: finish %q after %d tokens: %.40q", c.FinishReason, a.Usage.CompletionTokens, c.Message.Content)
			}
		}},
		{"hang", Faults{HangRate: 1}, func(t *testing.T, base string, fleet *Fleet) {
			c := &http.Client{Timeout: 300 * time.Millisecond}
			_, err := c.Post(base+pathChat, "application/json", strings.NewReader(chatBody("x", 5, false)))
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Errorf("hang: want a client timeout, got %v", err)
			}
			if fleet.Stats().Hung != 1 {
				t.Errorf("hung %d", fleet.Stats().Hung)
			}
		}},
		{"drop", Faults{DropRate: 1}, func(t *testing.T, base string, fleet *Fleet) {
			s, b, err := postChat(t, base, chatBody("x", 50, false))
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("drop: want a body cut short (unexpected EOF), got %d %q %v", s, b, err)
			}
		}},
		{"drop stream", Faults{DropRate: 1}, func(t *testing.T, base string, fleet *Fleet) {
			s, b, err := postChat(t, base, chatBody("x", 50, true))
			if s != 200 || !errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(string(b), "[DONE]") || !strings.Contains(string(b), "data: ") {
				t.Errorf("drop stream: want some events, then the body cut short, got %d %q %v", s, b, err)
			}
		}},
		{"slow", Faults{Slow: 3}, func(t *testing.T, base string, fleet *Fleet) {
			if got := fleet.Endpoint(0).model.Timing.StepDuration(1, 0); got != 3*DefaultTiming().StepDuration(1, 0) {
				t.Errorf("slow 3: step %v", got)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fleet := startFleet(t, Config{TimeScale: 1000, Faults: c.faults}, 1)
			c.check(t, fleet.URLs()[0], fleet)
		})
	}
}

// Faults are drawn per request from the seed: the same seed and order
// give the same faults, and the rates hold on average.
func TestFaultDrawsAreSeeded(t *testing.T) {
	f := Faults{FailRate: 0.1, AbortRate: 0.2, HangRate: 0.05, DropRate: 0.15}
	run := func(seed uint64) []faultKind {
		fleet := &Fleet{cfg: Config{Seed: seed}}
		e := &Endpoint{f: fleet, index: 3}
		out := make([]faultKind, 20000)
		for i := range out {
			out[i], _ = e.draw(f, uint64(i+1))
		}
		return out
	}
	a, b, c := run(1), run(1), run(2)
	count := map[faultKind]int{}
	same := true
	for i := range a {
		count[a[i]]++
		same = same && a[i] == b[i]
	}
	if !same {
		t.Error("the same seed drew different faults")
	}
	if fmt.Sprint(a[:50]) == fmt.Sprint(c[:50]) {
		t.Error("different seeds drew the same faults")
	}
	for k, want := range map[faultKind]float64{faultFail: 0.1, faultAbort: 0.2, faultHang: 0.05, faultDrop: 0.15, faultNone: 0.5} {
		if got := float64(count[k]) / float64(len(a)); got < want-0.02 || got > want+0.02 {
			t.Errorf("fault %d: rate %.3f, want %.2f", k, got, want)
		}
	}
}

// A streaming client that goes away frees its slot.
func TestStreamClientGoneFreesSlot(t *testing.T) {
	fleet := startFleet(t, Config{TimeScale: 50}, 1)
	ep := fleet.Endpoint(0)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", fleet.URLs()[0]+pathChat, strings.NewReader(chatBody("long story", 5000, true)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event: %q %v", line, err)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the slot to be freed", func() bool { return ep.Stats().Running == 0 })
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		cfg Config
		n   int
	}{
		{Config{}, 0},
		{Config{Listen: []string{"127.0.0.1:0", "127.0.0.1:0"}}, 1},
		{Config{Faults: Faults{FailRate: 0.6, HangRate: 0.6}}, 1},
		{Config{Faults: Faults{DropRate: -0.1}}, 1},
		{Config{PerEndpoint: map[int]Faults{3: {}}}, 2},
		{Config{MaxQueued: -1}, 1},
		{Config{Listen: []string{"256.0.0.1:1"}}, 1},
	}
	for _, c := range cases {
		if f, err := Start(context.Background(), c.cfg, c.n); err == nil {
			f.Close()
			t.Errorf("Start(%+v, %d) succeeded", c.cfg, c.n)
		}
	}
}

func TestParseListenAndFaults(t *testing.T) {
	addrs, err := ParseListen([]string{"127.0.0.1:30000-30002,127.0.0.1:0", "127.0.0.1:0"})
	if err != nil || strings.Join(addrs, " ") != "127.0.0.1:30000 127.0.0.1:30001 127.0.0.1:30002 127.0.0.1:0 127.0.0.1:0" {
		t.Fatalf("ParseListen: %v %v", addrs, err)
	}
	for _, bad := range []string{"30000", "127.0.0.1:30002-30000", "127.0.0.1:x", "127.0.0.1:1-99999", "127.0.0.1:5,127.0.0.1:5", ""} {
		if _, err := ParseListen([]string{bad}); err == nil {
			t.Errorf("ParseListen(%q) succeeded", bad)
		}
	}
	f, err := ParseFaultSpec(Faults{FailRate: 0.1}, "slow:3,crash-after:100,restart-after:30s,startup-delay:500ms,hang-rate:0.2")
	want := Faults{FailRate: 0.1, HangRate: 0.2, Slow: 3, CrashAfter: 100, RestartAfter: 30 * time.Second, StartupDelay: 500 * time.Millisecond}
	if err != nil || !reflect.DeepEqual(f, want) {
		t.Errorf("ParseFaultSpec: %+v %v", f, err)
	}
	for _, bad := range []string{"slow", "slow:x", "nope:1", "fail-rate:2", "fail-rate:0.7,drop-rate:0.7", "restart-after:-1s"} {
		if _, err := ParseFaultSpec(Faults{}, bad); err == nil {
			t.Errorf("ParseFaultSpec(%q) succeeded", bad)
		}
	}
	for key, want := range map[string]int{"1": 1, "127.0.0.1:30002": 2, ":30000": 0} {
		if i, err := ResolveEndpoint(key, addrs[:3]); err != nil || i != want {
			t.Errorf("ResolveEndpoint(%q) = %d %v, want %d", key, i, err, want)
		}
	}
	for _, bad := range []string{"3", "-1", ":3000", "127.0.0.1:9"} {
		if _, err := ResolveEndpoint(bad, addrs[:3]); err == nil {
			t.Errorf("ResolveEndpoint(%q) succeeded", bad)
		}
	}
}

// curl, a real-world client, accepts the stream (and the -N flag keeps it
// unbuffered as a user would run it).
func TestCurlReadsStream(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed; skipping the real-client check")
	}
	fleet := startFleet(t, Config{TimeScale: 1000}, 1)
	out, err := exec.Command(curl, "-sS", "-N", "--fail-with-body", "--max-time", "20", fleet.URLs()[0]+pathChat,
		"-H", "Content-Type: application/json", "-d", chatBody("hello from curl", 20, true)).CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	events, err := testbin.SSEEvents(out)
	if err != nil || len(events) < 3 {
		t.Fatalf("curl got %d events: %v\n%s", len(events), err, out)
	}
	var text strings.Builder
	for _, ev := range events[:len(events)-1] {
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(ev, &chunk); err != nil {
			t.Fatal(err)
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	if d := PromptDigest(Prompt{Messages: []Message{{"user", "hello from curl"}}}); !strings.HasPrefix(text.String(), d) {
		t.Errorf("streamed text %.40q does not start with %s", text.String(), d)
	}
}

// A slot schedule changes how many requests run at once over simulated
// time: one slot before a minute, three after, reported by
// /get_server_info too.
func TestSlotSchedule(t *testing.T) {
	clock := NewManualClock()
	sched, err := ParseSlotSchedule("0s:1/1m:3")
	if err != nil {
		t.Fatal(err)
	}
	fleet := startFleet(t, Config{Clock: clock, MaxRunning: 8, Faults: Faults{Slots: sched}}, 1)
	ep, base := fleet.Endpoint(0), fleet.URLs()[0]
	burst := func(tag string) {
		t.Helper()
		var wg sync.WaitGroup
		for i := 0; i < 3; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				if s, _, err := postChat(t, base, chatBody(fmt.Sprintf("%s %d", tag, i), 3, false)); err != nil || s != 200 {
					t.Errorf("%s request %d: %d %v", tag, i, s, err)
				}
			}(i)
		}
		waitFor(t, "three requests in the scheduler", func() bool { st := ep.Stats(); return st.Running+st.Waiting == 3 })
		stop := advanceUntil(clock, func() bool { return ep.Stats().Running+ep.Stats().Waiting == 0 })
		wg.Wait()
		stop()
	}
	if _, body := getBody(t, base+pathServerInfo); !strings.Contains(body, `"max_running_requests":1,`) {
		t.Errorf("server info before the step: %.200s", body)
	}
	burst("early")
	if st := ep.Stats(); st.MaxRunning != 1 {
		t.Fatalf("before a minute: max running %d, want 1", st.MaxRunning)
	}
	clock.Advance(time.Minute)
	if _, body := getBody(t, base+pathServerInfo); !strings.Contains(body, `"max_running_requests":3,`) {
		t.Errorf("server info after the step: %.200s", body)
	}
	burst("late")
	if st := ep.Stats(); st.MaxRunning != 3 {
		t.Errorf("after a minute: max running %d, want 3", st.MaxRunning)
	}
	for _, bad := range []string{"", "5m", "0s:0", "1m:4,30s:2", "x:3"} {
		if _, err := ParseSlotSchedule(bad); err == nil {
			t.Errorf("ParseSlotSchedule(%q) succeeded", bad)
		}
	}
	if f, err := ParseFaultSpec(Faults{}, "slots:0s:48/5m:16,slow:2"); err != nil || len(f.Slots) != 2 || f.Slots[1] != (SlotStep{5 * time.Minute, 16}) || f.Slow != 2 {
		t.Errorf("ParseFaultSpec slots: %+v %v", f, err)
	}
}
