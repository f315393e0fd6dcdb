package fleet

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"tokenmill/lib/clock"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/openai"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name                       string
		f                          *Failure
		retriable, down, blame, ft bool
		msg                        string
	}{
		{"refused", ClassifyTransport(&dialError{errors.New("connection refused")}, time.Minute), true, true, true, false, "connect: connection refused"},
		{"timeout", ClassifyTransport(fasthttp.ErrTimeout, time.Minute), true, false, true, false, "no answer within 1m0s"},
		{"closed", ClassifyTransport(fasthttp.ErrConnectionClosed, time.Minute), true, false, true, false, "closed the connection"},
		{"400", ClassifyStatus(400, []byte(`{"object":"error","message":"too long","type":"BadRequestError","code":400}`)), false, false, false, false, "too long"},
		{"404", ClassifyStatus(404, []byte(`{"detail":"Not Found"}`)), false, false, false, false, "Not Found"},
		{"413", ClassifyStatus(413, nil), false, false, false, false, "Request Entity Too Large"},
		{"422", ClassifyStatus(422, []byte(`{"detail":[{"msg":"Field required"}]}`)), false, false, false, false, "Field required"},
		{"401", ClassifyStatus(401, nil), false, false, false, true, "Unauthorized"},
		{"429", ClassifyStatus(429, nil), true, false, false, false, "Too Many Requests"},
		{"503", ClassifyStatus(503, []byte(`{"object":"error","message":"The request queue is full."}`)), true, false, false, false, "queue is full"},
		{"500", ClassifyStatus(500, []byte("boom")), true, false, true, false, "boom"},
		{"abort", ClassifyAnswer(&openai.Completion{FinishReason: "abort"}), true, false, true, false, "aborted"},
		{"abort 400", ClassifyAnswer(&openai.Completion{FinishReason: "abort", AbortStatus: 400, AbortMessage: "too long"}), false, false, false, false, "too long"},
	}
	for _, tt := range tests {
		f := tt.f
		if f.Retriable != tt.retriable || f.Down != tt.down || f.Blame != tt.blame || f.Fatal != tt.ft || !strings.Contains(f.Error(), tt.msg) {
			t.Errorf("%s: %+v (%v)", tt.name, f, f)
		}
	}
	if ClassifyAnswer(&openai.Completion{FinishReason: "length"}) != nil {
		t.Error("length is not a failure")
	}
}

func TestRateWindow(t *testing.T) {
	var w RateWindow
	t0 := time.Unix(1000, 0)
	if w.Rate(t0, time.Minute) != 0 {
		t.Error("empty window has a rate")
	}
	for s := 0; s < 120; s++ {
		w.Add(t0.Add(time.Duration(s)*time.Second), 100)
	}
	now := t0.Add(119 * time.Second)
	if r := w.Rate(now, time.Minute); r < 99 || r > 101 {
		t.Errorf("rate %v, want 100/s", r)
	}
	// An idle minute later nothing is left.
	if r := w.Rate(now.Add(2*time.Minute), time.Minute); r != 0 {
		t.Errorf("rate %v after an idle minute", r)
	}
	var young RateWindow
	young.Add(t0, 50)
	young.Add(t0.Add(4*time.Second), 50)
	if r := young.Rate(t0.Add(4*time.Second), time.Minute); r != 25 {
		t.Errorf("a 4-second-old window: rate %v, want 25", r)
	}
}

// The policies on a pool of endpoints with no servers behind them.
func TestPick(t *testing.T) {
	mk := func(policy Policy, slots ...int) *Pool {
		p := &Pool{cfg: Config{Policy: policy}, clk: clock.Or(nil)}
		for i, s := range slots {
			p.eps = append(p.eps, &Endpoint{idx: i, state: StateReady, slots: s})
		}
		return p
	}
	take := func(p *Pool, avoid *Endpoint) int {
		ep := p.pickLocked(avoid)
		if ep == nil {
			return -1
		}
		ep.inflight++
		return ep.idx
	}
	// Least-outstanding fills by free room relative to the cap.
	p := mk(LeastOutstanding, 2, 4)
	counts := map[int]int{}
	for i := 0; i < 6; i++ {
		counts[take(p, nil)]++
	}
	if counts[0] != 2 || counts[1] != 4 || take(p, nil) != -1 {
		t.Errorf("least-outstanding filled %v", counts)
	}
	// A retry avoids the endpoint that failed it when another has room.
	p = mk(LeastOutstanding, 4, 4)
	if got := take(p, p.eps[0]); got != 1 {
		t.Errorf("avoid: got %d", got)
	}
	p.eps[1].inflight = 4
	if got := take(p, p.eps[0]); got != 0 {
		t.Errorf("avoid with no alternative: got %d", got)
	}
	// Endpoints out of service get nothing.
	p = mk(LeastOutstanding, 4, 4)
	p.eps[0].state = StateDown
	for i := 0; i < 4; i++ {
		if got := take(p, nil); got != 1 {
			t.Fatalf("down endpoint picked")
		}
	}
	// Round-robin waits for the endpoint whose turn it is.
	p = mk(RoundRobin, 1, 3)
	seq := []int{take(p, nil), take(p, nil), take(p, nil)}
	if fmt.Sprint(seq) != "[0 1 -1]" {
		t.Errorf("round-robin took %v, want [0 1 -1] (waiting for endpoint 0)", seq)
	}
	p.eps[0].state = StateStarting
	if got := take(p, nil); got != 1 {
		t.Errorf("round-robin did not skip an endpoint out of service: %d", got)
	}
}
