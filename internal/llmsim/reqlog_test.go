package llmsim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
)

type logLine struct {
	Time         string          `json:"time"`
	SimTime      *float64        `json:"sim_time"`
	Endpoint     string          `json:"endpoint"`
	Route        string          `json:"route"`
	Status       int             `json:"status"`
	PromptTokens *int            `json:"prompt_tokens"`
	CachedTokens *int            `json:"cached_tokens"`
	Outcome      string          `json:"outcome"`
	Body         json.RawMessage `json:"body"`
	BodyText     *string         `json:"body_text"`
}

func readLog(t *testing.T, b []byte) []logLine {
	t.Helper()
	var out []logLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// Every generation request, from many clients at once, is one whole line
// with its body as sent, its status and its token counts; refused ones too.
func TestRequestLog(t *testing.T) {
	var buf bytes.Buffer
	fleet, err := Start(t.Context(), Config{Instant: true, Flavor: FlavorVLLM, KVTokens: 4096, RequestLog: &buf}, 2)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	var wg sync.WaitGroup
	sent := map[string]bool{}
	var mu sync.Mutex
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := fmt.Sprintf(`{"model": "%s", "messages": [{"role": "user", "content": "question %d \"quoted\""}], "max_tokens": 5}`, DefaultModelName, i)
			mu.Lock()
			sent[fmt.Sprintf("question %d \"quoted\"", i)] = true
			mu.Unlock()
			if s, b := postJSON(t, fleet.URLs()[i%2]+pathChat, body); s != 200 {
				t.Errorf("request %d: %d %s", i, s, b)
			}
		}(i)
	}
	wg.Wait()
	postJSON(t, fleet.URLs()[0]+pathChat, `{"model":"other","messages":[{"role":"user","content":"x"}]}`)
	postJSON(t, fleet.URLs()[0]+pathChat, `{"messages": [}`)
	getBody(t, fleet.URLs()[0]+pathModels) // not a generation request: not logged
	if err := fleet.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLog(t, buf.Bytes())
	if len(lines) != n+2 {
		t.Fatalf("%d lines for %d requests", len(lines), n+2)
	}
	statuses := map[int]int{}
	for _, l := range lines {
		statuses[l.Status]++
		if l.Route != pathChat || l.SimTime == nil || l.Time == "" || (l.Endpoint != fleet.URLs()[0] && l.Endpoint != fleet.URLs()[1]) {
			t.Errorf("line %+v", l)
		}
		if l.Status != 200 {
			continue
		}
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.Unmarshal(l.Body, &req); err != nil || len(req.Messages) != 1 || !sent[req.Messages[0].Content] {
			t.Errorf("logged body %s: %v", l.Body, err)
		}
		delete(sent, req.Messages[0].Content)
		want := PromptTokens(&Prompt{Messages: []Message{{"user", req.Messages[0].Content}}})
		if l.PromptTokens == nil || *l.PromptTokens != want || l.CachedTokens == nil {
			t.Errorf("logged tokens %v %v, want %d prompt", l.PromptTokens, l.CachedTokens, want)
		}
	}
	if len(sent) != 0 || statuses[200] != n || statuses[404] != 1 || statuses[400] != 1 {
		t.Errorf("statuses %v, %d bodies never logged", statuses, len(sent))
	}
	for _, l := range lines {
		if l.Status == 400 && (l.BodyText == nil || *l.BodyText != `{"messages": [}`) {
			t.Errorf("a body that is not JSON is logged as %+v", l)
		}
	}
}

// The log shows the history each turn carried: turn 2 holds turn 1's
// answer, and found it cached.
func TestRequestLogConversation(t *testing.T) {
	var buf bytes.Buffer
	fleet, err := Start(t.Context(), Config{Instant: true, KVTokens: 4096, RequestLog: &buf}, 1)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := conversation(t, fleet.URLs()[0], "Be brief.")
	fleet.Close()
	var a struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	json.Unmarshal(first, &a)
	lines := readLog(t, buf.Bytes())
	if len(lines) != 2 {
		t.Fatalf("%d lines", len(lines))
	}
	var turn2 struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	json.Unmarshal(lines[1].Body, &turn2)
	if len(turn2.Messages) != 4 || turn2.Messages[2].Content != a.Choices[0].Message.Content || *lines[1].CachedTokens == 0 || *lines[0].CachedTokens != 0 {
		t.Errorf("turn 2 logged %+v, cached %d (turn 1 %d)", turn2, *lines[1].CachedTokens, *lines[0].CachedTokens)
	}
}

func TestAppendCompact(t *testing.T) {
	in := "{ \"a\" : [1, 2],\n\t\"s\": \"keep  spaces \\\" and \\\\\" }"
	var want, got any
	json.Unmarshal([]byte(in), &want)
	out := appendCompact(nil, []byte(in))
	if err := json.Unmarshal(out, &got); err != nil || fmt.Sprint(got) != fmt.Sprint(want) || bytes.ContainsAny(out, "\n\t") {
		t.Errorf("compact %q -> %q (%v)", in, out, err)
	}
}
