package infer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

func ptr[T any](v T) *T { return &v }

func TestRequestBodies(t *testing.T) {
	chat := `{"id":"a","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`
	text := `{"id":"b","prompt":"Once upon"}`
	withParams := `{"id":"c","prompt":"Once upon","params":{"max_tokens":7,"seed":50,"top_k":20}}`
	flags := openai.Sampling{MaxTokens: ptr(100), Temperature: ptr(0.6), Seed: ptr(int64(10)), Stop: []string{"END"}}
	tests := []struct {
		name   string
		api    API
		flags  openai.Sampling
		extra  string
		record string
		sample int
		want   string
	}{
		{"chat", APIChat, openai.Sampling{}, "", chat, 0,
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`},
		{"chat flags and seed per sample", APIChat, flags, "", chat, 2,
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":100,"temperature":0.6,"seed":12,"stop":["END"]}`},
		{"chat extra body", APIChat, flags, `{"chat_template_kwargs":{"enable_thinking":false},"max_tokens":5}`, chat, 0,
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":5,"temperature":0.6,"seed":10,"stop":["END"],"chat_template_kwargs":{"enable_thinking":false}}`},
		{"chat from prompt text", APIChat, openai.Sampling{}, "", text, 0,
			`{"model":"m","messages":[{"role":"user","content":"Once upon"}]}`},
		{"completions params win", APICompletions, flags, `{"max_tokens":5}`, withParams, 1,
			`{"model":"m","prompt":"Once upon","max_tokens":7,"temperature":0.6,"seed":51,"stop":["END"],"top_k":20}`},
		{"generate", APIGenerate, flags, "", text, 0,
			`{"text":"Once upon","sampling_params":{"max_new_tokens":100,"temperature":0.6,"sampling_seed":10,"stop":["END"]}}`},
		{"generate extra and params", APIGenerate, flags, `{"sampling_params":{"top_k":5,"max_new_tokens":9},"return_logprob":false}`, withParams, 3,
			`{"text":"Once upon","sampling_params":{"max_new_tokens":7,"temperature":0.6,"sampling_seed":53,"stop":["END"],"top_k":20},"return_logprob":false}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var extra []byte
			if tt.extra != "" {
				extra = []byte(tt.extra)
			}
			b, err := newBuilder(tt.api, "m", tt.flags, extra)
			if err != nil {
				t.Fatal(err)
			}
			var p record.Prompt
			if err := record.Decode([]byte(tt.record), &p); err != nil {
				t.Fatal(err)
			}
			seed, err := b.check(&p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.body(&p, seed, tt.sample)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestBuilderChecks(t *testing.T) {
	tests := []struct {
		api    API
		record string
		reason string
	}{
		{APIChat, `{"id":"a"}`, ReasonNoPrompt},
		{APIChat, `{"id":"a","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]}`, ReasonNoUserTurn},
		{APIChat, `{"id":"a","messages":[{"role":"user","content":"q"}],"params":[1]}`, ReasonBadParams},
		{APIChat, `{"id":"a","messages":[{"role":"user","content":"q"}],"params":{"seed":"x"}}`, ReasonBadParams},
		{APICompletions, `{"id":"a","messages":[{"role":"user","content":"q"}]}`, ReasonNeedsPromptText},
		{APIGenerate, `{"id":"a","messages":[{"role":"user","content":"q"}]}`, ReasonNeedsPromptText},
		{APIChat, `{"id":"a","messages":[{"role":"user","content":"q"},{"role":"tool","content":"42"}]}`, ""},
	}
	for _, tt := range tests {
		b, _ := newBuilder(tt.api, "m", openai.Sampling{}, nil)
		var p record.Prompt
		if err := record.Decode([]byte(tt.record), &p); err != nil {
			t.Fatal(err)
		}
		_, err := b.check(&p)
		var pe *promptError
		switch {
		case tt.reason == "" && err != nil:
			t.Errorf("%s: unexpected %v", tt.record, err)
		case tt.reason != "" && (!errors.As(err, &pe) || pe.reason != tt.reason):
			t.Errorf("%s: got %v, want %s", tt.record, err, tt.reason)
		}
	}
	if _, err := newBuilder(APIChat, "m", openai.Sampling{}, []byte(`[1]`)); err == nil {
		t.Error("an extra body that is not an object was accepted")
	}
	if _, err := newBuilder(APIGenerate, "m", openai.Sampling{}, []byte(`{"sampling_params":3}`)); err == nil {
		t.Error("sampling_params that is not an object was accepted")
	}
}

func TestLedger(t *testing.T) {
	l := newLedger()
	if l.see("a") || !l.see("a") {
		t.Error("see: first false, then true")
	}
	for _, s := range []int{0, 1, 62, 63, 64, 1000} {
		if l.done("a", s) {
			t.Errorf("sample %d done before marking", s)
		}
		l.markDone("a", s)
		if !l.done("a", s) || l.done("b", s) {
			t.Errorf("sample %d: done not tracked per id and sample", s)
		}
	}
	if l.see("b") {
		t.Error("b seen before")
	}
	l.markDone("c", 0)
	if l.see("c") {
		t.Error("a done answer marked its id as read from the input")
	}
}

func TestRepairTail(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	tests := []struct {
		name, in, want string
		cut            int64
	}{
		{"empty", "", "", 0},
		{"complete", "a\nb\n", "a\nb\n", 0},
		{"partial", "a\nb\n{\"id\":", "a\nb\n", 6},
		{"no newline at all", "{\"id\":1", "", 7},
		{"partial longer than a chunk", "a\n" + big, "a\n", int64(len(big))},
		{"long complete line", big + "\n", big + "\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			os.WriteFile(path, []byte(tt.in), 0o644)
			f, _ := os.OpenFile(path, os.O_RDWR, 0)
			cut, err := repairTail(f)
			f.Close()
			if err != nil || cut != tt.cut {
				t.Fatalf("cut %d err %v, want %d", cut, err, tt.cut)
			}
			if b, _ := os.ReadFile(path); string(b) != tt.want {
				t.Errorf("left %q", b)
			}
		})
	}
}

func TestScanDone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gen.jsonl")
	content := strings.Join([]string{
		`{"id":"a","output":{"text":"x","finish_reason":"stop","sample":0}}`,
		`{"id":"a","output":{"text":"x","finish_reason":"stop","sample":1}}`,
		`{"id":7,"output":{"text":"x","finish_reason":"length","sample":0}}`,
		`{"id":"b","output":{"text":"x","finish_reason":"length","sample":0}}`,
		`{"id":"b","output":{"text":"y","finish_reason":"stop","sample":0}}`,
		`{"id":"c","error":{"status":400}}`,
		`not json`,
	}, "\n") + "\n"
	os.WriteFile(path, []byte(content), 0o644)
	for _, redo := range []bool{false, true} {
		l := newLedger()
		var warned []string
		info, err := scanDone(path, redo, l, func(f string, a ...any) { warned = append(warned, fmt.Sprintf(f, a...)) })
		if err != nil {
			t.Fatal(err)
		}
		wantAnswers, wantLength := int64(4), int64(0)
		if redo {
			wantAnswers, wantLength = 3, 1
		}
		if info.Answers != wantAnswers || info.Length != wantLength || info.Unreadable != 2 || len(warned) != 2 {
			t.Errorf("redo=%v: %+v, warnings %q", redo, info, warned)
		}
		if !l.done("a", 1) || !l.done("b", 0) || l.done("c", 0) || l.done("7", 0) == redo {
			t.Errorf("redo=%v: wrong done set", redo)
		}
	}
}

func TestDefaultErrorsPath(t *testing.T) {
	for in, want := range map[string]string{
		"gen.jsonl": "gen.errors.jsonl", "out/run1.json": "out/run1.errors.json", "gen": "gen.errors.jsonl",
		"gen.txt": "gen.txt.errors.jsonl", "-": "", "": "",
	} {
		if got := DefaultErrorsPath(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}

func TestStripOwnFields(t *testing.T) {
	for in, want := range map[string]string{
		`{"id":1, "messages":[]}`:                              `{"id":1, "messages":[]}`,
		`{"id":1,"output":{"text":"old"},"meta":{"output":1}}`: `{"id":1,"meta":{"output":1}}`,
		`{"error":{},"id":"x"}`:                                `{"id":"x"}`,
	} {
		got, err := stripOwnFields([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("%s: got %s %v, want %s", in, got, err, want)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name                       string
		f                          *failure
		retriable, down, blame, ft bool
		msg                        string
	}{
		{"refused", classifyTransport(&dialError{errors.New("connection refused")}, time.Minute), true, true, true, false, "connect: connection refused"},
		{"timeout", classifyTransport(fasthttp.ErrTimeout, time.Minute), true, false, true, false, "no answer within 1m0s"},
		{"closed", classifyTransport(fasthttp.ErrConnectionClosed, time.Minute), true, false, true, false, "closed the connection"},
		{"400", classifyStatus(400, []byte(`{"object":"error","message":"too long","type":"BadRequestError","code":400}`)), false, false, false, false, "too long"},
		{"404", classifyStatus(404, []byte(`{"detail":"Not Found"}`)), false, false, false, false, "Not Found"},
		{"413", classifyStatus(413, nil), false, false, false, false, "Request Entity Too Large"},
		{"422", classifyStatus(422, []byte(`{"detail":[{"msg":"Field required"}]}`)), false, false, false, false, "Field required"},
		{"401", classifyStatus(401, nil), false, false, false, true, "Unauthorized"},
		{"429", classifyStatus(429, nil), true, false, false, false, "Too Many Requests"},
		{"503", classifyStatus(503, []byte(`{"object":"error","message":"The request queue is full."}`)), true, false, false, false, "queue is full"},
		{"500", classifyStatus(500, []byte("boom")), true, false, true, false, "boom"},
		{"abort", classifyAnswer(&openai.Completion{FinishReason: "abort"}), true, false, true, false, "aborted"},
		{"abort 400", classifyAnswer(&openai.Completion{FinishReason: "abort", AbortStatus: 400, AbortMessage: "too long"}), false, false, false, false, "too long"},
	}
	for _, tt := range tests {
		f := tt.f
		if f.retriable != tt.retriable || f.down != tt.down || f.blame != tt.blame || f.fatal != tt.ft || !strings.Contains(f.Error(), tt.msg) {
			t.Errorf("%s: %+v (%v)", tt.name, f, f)
		}
	}
	if classifyAnswer(&openai.Completion{FinishReason: "length"}) != nil {
		t.Error("length is not a failure")
	}
}

func TestBackoff(t *testing.T) {
	b := newBackoff(100*time.Millisecond, time.Second, 1)
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 30: time.Second} {
		for i := 0; i < 50; i++ {
			if d := b.delay(attempt); d < want/2 || d > want {
				t.Fatalf("attempt %d: %v not in [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
	if d := newBackoff(0, time.Second, 1).delay(3); d != 0 {
		t.Errorf("zero base gave %v", d)
	}
}

func TestRateWindow(t *testing.T) {
	var w rateWindow
	t0 := time.Unix(1000, 0)
	if w.rate(t0, time.Minute) != 0 {
		t.Error("empty window has a rate")
	}
	for s := 0; s < 120; s++ {
		w.add(t0.Add(time.Duration(s)*time.Second), 100)
	}
	now := t0.Add(119 * time.Second)
	if r := w.rate(now, time.Minute); r < 99 || r > 101 {
		t.Errorf("rate %v, want 100/s", r)
	}
	// An idle minute later nothing is left.
	if r := w.rate(now.Add(2*time.Minute), time.Minute); r != 0 {
		t.Errorf("rate %v after an idle minute", r)
	}
	var young rateWindow
	young.add(t0, 50)
	young.add(t0.Add(4*time.Second), 50)
	if r := young.rate(t0.Add(4*time.Second), time.Minute); r != 25 {
		t.Errorf("a 4-second-old window: rate %v, want 25", r)
	}
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 654676: "654,676", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %s", n, got)
		}
	}
	for d, want := range map[time.Duration]string{1500 * time.Millisecond: "1.5s", 245 * time.Second: "4m05s", 19*time.Hour + 2*time.Minute: "19h02m"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %s", d, got)
		}
	}
}

func TestCountInputLines(t *testing.T) {
	dir := t.TempDir()
	a, b, arr := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "arr")
	os.WriteFile(a, []byte("{}\n{}\n{}\n"), 0o644)
	os.WriteFile(b, []byte("{}\n{}"), 0o644)
	os.WriteFile(arr, []byte("[{}, {}]"), 0o644)
	for _, tt := range []struct {
		names []string
		want  int64
	}{{[]string{a}, 3}, {[]string{a, b}, 5}, {nil, -1}, {[]string{"-"}, -1}, {[]string{a, arr}, -1}, {[]string{filepath.Join(dir, "missing")}, -1}} {
		if got := countInputLines(tt.names); got != tt.want {
			t.Errorf("%v: %d, want %d", tt.names, got, tt.want)
		}
	}
}

// The policies on a pool of endpoints with no servers behind them.
func TestPick(t *testing.T) {
	mk := func(policy Policy, slots ...int) *pool {
		p := &pool{cfg: poolConfig{policy: policy}}
		for i, s := range slots {
			p.eps = append(p.eps, &endpoint{idx: i, state: stateReady, slots: s})
		}
		return p
	}
	take := func(p *pool, avoid *endpoint) int {
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
	p.eps[0].state = stateDown
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
	p.eps[0].state = stateStarting
	if got := take(p, nil); got != 1 {
		t.Errorf("round-robin did not skip an endpoint out of service: %d", got)
	}
}

// Whatever a crash leaves, repair keeps exactly the complete lines.
func FuzzRepairTail(f *testing.F) {
	for _, s := range []string{"", "a\n", "a\nb", "{\"id\":1}\n{\"id\"", "\n\n\n", strings.Repeat("x", 70000) + "\ny"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f")
		os.WriteFile(path, data, 0o644)
		fh, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		cut, err := repairTail(fh)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		want := data[:bytes.LastIndexByte(data, '\n')+1]
		if !bytes.Equal(got, want) || cut != int64(len(data)-len(want)) {
			t.Fatalf("kept %q (cut %d), want %q", got, cut, want)
		}
	})
}

// Any record the checks accept yields a request body that is one valid
// JSON object.
func FuzzRequestBody(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","messages":[{"role":"user","content":"hi"}]}`,
		`{"id":"b","prompt":"x","params":{"max_tokens":3,"seed":9}}`,
		`{"id":"c","prompt":"x","params":{"seed":null,"stop":["\n"]}}`,
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, rec []byte, which uint8) {
		api := []API{APIChat, APICompletions, APIGenerate}[int(which)%3]
		b, err := newBuilder(api, "m", openai.Sampling{Seed: ptr(int64(1))}, []byte(`{"sampling_params":{"top_k":5},"x":1}`))
		if err != nil {
			t.Fatal(err)
		}
		var p record.Prompt
		if record.Decode(rec, &p) != nil {
			return
		}
		seed, err := b.check(&p)
		if err != nil {
			return
		}
		body, err := b.body(&p, seed, 2)
		if err != nil {
			return
		}
		if err := openai.ValidObject(body); err != nil {
			t.Fatalf("record %q gave body %q: %v", rec, body, err)
		}
	})
}
