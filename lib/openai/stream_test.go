package openai

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll reads every event of a stream.
func readAll(r io.Reader) ([]string, error) {
	er := NewEventReader(r)
	var out []string
	for {
		data, err := er.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, string(data))
	}
}

// streamed is what a whole stream adds up to.
type streamed struct {
	text, reasoning, finish string
	tokens, prompt, events  int
	done                    bool
	err                     string
}

func decodeStream(t testing.TB, kind StreamKind, body []byte) streamed {
	t.Helper()
	events, err := readAll(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var s streamed
	s.tokens = -1
	dec := StreamDecoder{Kind: kind}
	for _, ev := range events {
		d, err := dec.Decode([]byte(ev))
		if err != nil {
			s.err = err.Error()
			continue
		}
		s.events++
		s.text += d.Text
		s.reasoning += d.Reasoning
		if d.FinishReason != "" {
			s.finish = d.FinishReason
		}
		if d.CompletionTokens >= 0 {
			if d.CompletionTokens < s.tokens {
				t.Errorf("token count went back from %d to %d", s.tokens, d.CompletionTokens)
			}
			s.tokens = d.CompletionTokens
			s.prompt = d.PromptTokens
		}
		s.done = s.done || d.Done
	}
	return s
}

func TestStreamGolden(t *testing.T) {
	tests := []struct {
		file string
		kind StreamKind
		want streamed
	}{
		{"stream_chat_sglang.txt", StreamChat, streamed{text: "The capital of France is Paris.", finish: "stop", tokens: 8, prompt: 36, events: 11, done: true}},
		{"stream_chat_sglang_continuous_usage.txt", StreamChat, streamed{text: "The capital of France is Paris.", finish: "stop", tokens: 8, prompt: 36, events: 11, done: true}},
		{"stream_chat_reasoning_sglang.txt", StreamChat, streamed{text: "\n\n3 + 5 =", reasoning: "The user asks for 3 + 5. That is 8.", finish: "length", tokens: 32, prompt: 14, events: 9, done: true}},
		{"stream_chat_openai.txt", StreamChat, streamed{text: "Hello! How can I help?", finish: "stop", tokens: 7, prompt: 9, events: 11, done: true}},
		{"stream_completion_sglang.txt", StreamCompletion, streamed{text: " 1. United States - Washington", finish: "length", tokens: 5, prompt: 9, events: 7, done: true}},
		{"stream_completion_openai.txt", StreamCompletion, streamed{text: "This is a test", finish: "length", tokens: -1, events: 5, done: true}},
		{"stream_generate_sglang.txt", StreamGenerate, streamed{text: " Paris. It is the capital", finish: "length", tokens: 6, prompt: 7, events: 7, done: true}},
		{"stream_error_sglang.txt", StreamChat, streamed{tokens: -1, events: 1, done: true, err: "503 The request queue is full."}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			if got := decodeStream(t, tt.kind, golden(t, tt.file)); got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	// Continuous usage counts tokens as they come.
	var counts []int
	dec := StreamDecoder{Kind: StreamChat}
	events, _ := readAll(bytes.NewReader(golden(t, "stream_chat_sglang_continuous_usage.txt")))
	for _, ev := range events[:len(events)-1] {
		d, err := dec.Decode([]byte(ev))
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, d.CompletionTokens)
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 8}; !slices.Equal(counts, want) {
		t.Errorf("continuous usage counts %v, want %v", counts, want)
	}
}

var eventTests = []struct {
	name, in string
	want     []string
}{
	{"lf", "data: a\n\ndata: b\n\n", []string{"a", "b"}},
	{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"a", "b"}},
	{"cr", "data: a\r\rdata: b\r\r", []string{"a", "b"}},
	{"mixed ends", "data: a\r\n\ndata: b\r\r\n", []string{"a", "b"}},
	{"no space after the colon", "data:a\n\n", []string{"a"}},
	{"only one space is stripped", "data:  a \n\n", []string{" a "}},
	{"several data lines", "data: {\"a\":\ndata: 1}\n\n", []string{"{\"a\":\n1}"}},
	{"comments and other fields", ": keep-alive\nevent: message\nid: 7\nretry: 100\ndata: x\n\n", []string{"x"}},
	{"an event with no data is none", "event: ping\n\ndata: x\n\n", []string{"x"}},
	{"empty data is an event", "data:\n\n", []string{""}},
	{"a bare data field", "data\n\n", []string{""}},
	{"blank lines between events", "\n\n\ndata: x\n\n\n\n", []string{"x"}},
	{"byte order mark", "\xef\xbb\xbfdata: x\n\n", []string{"x"}},
	{"unfinished event dropped", "data: a\n\ndata: b\n", []string{"a"}},
	{"unfinished line dropped", "data: a\n\ndata: b", []string{"a"}},
	{"colon in the value", "data: {\"k\": \"v:w\"}\n\n", []string{"{\"k\": \"v:w\"}"}},
	{"field names are exact", "Data: x\ndata : y\n\n", nil},
}

func TestEventReader(t *testing.T) {
	for _, tt := range eventTests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tt.in), iotest.OneByteReader(strings.NewReader(tt.in)), iotest.HalfReader(strings.NewReader(tt.in))} {
				got, err := readAll(r)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
					t.Fatalf("%q: got %q, want %q", tt.in, got, tt.want)
				}
			}
		})
	}
}

func TestEventReaderLimits(t *testing.T) {
	long := "data: " + strings.Repeat("x", MaxEventSize+1) + "\n\n"
	if _, err := readAll(strings.NewReader(long)); !errors.Is(err, ErrEventTooLarge) {
		t.Errorf("a line past the limit: %v", err)
	}
	half := strings.Repeat("data: "+strings.Repeat("y", MaxEventSize/2)+"\n", 3) + "\n"
	if _, err := readAll(strings.NewReader(half)); !errors.Is(err, ErrEventTooLarge) {
		t.Errorf("data lines adding up past the limit: %v", err)
	}
	reset := errors.New("connection reset")
	broken := io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(reset))
	if got, err := readAll(broken); !errors.Is(err, reset) || len(got) != 1 || got[0] != "a" {
		t.Errorf("a read error: %q %v", got, err)
	}
}

func TestStreamDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		kind StreamKind
		data string
		want string
	}{
		{"malformed chat", StreamChat, `{"choices":[{"delta":`, "malformed response body"},
		{"malformed generate", StreamGenerate, `{"text":5}`, "malformed response body"},
		{"openai error object", StreamChat, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, "Rate limit reached"},
		{"error as a string", StreamCompletion, `{"error":"boom"}`, "boom"},
		{"native error", StreamGenerate, `{"error":{"message":"Abort in waiting queue","code":503}}`, "503 Abort in waiting queue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec := StreamDecoder{Kind: tt.kind}
			_, err := dec.Decode([]byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
	// A null error, or "error" inside the text, is no error.
	dec := StreamDecoder{Kind: StreamChat}
	for _, data := range []string{`{"choices":[{"delta":{"content":"error"}}],"error":null}`, `{"choices":[{"delta":{"content":"\"error\""}}]}`} {
		if d, err := dec.Decode([]byte(data)); err != nil || !strings.Contains(d.Text, "error") {
			t.Errorf("%s: %+v %v", data, d, err)
		}
	}
	// /generate from a server that streams increments rather than the whole text.
	gen := StreamDecoder{Kind: StreamGenerate}
	var text string
	for _, data := range []string{`{"text":"abc","meta_info":{}}`, `{"text":"d","meta_info":{}}`, `{"text":"e","meta_info":{}}`} {
		d, err := gen.Decode([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		text += d.Text
	}
	if text != "abcde" {
		t.Errorf("increments added up to %q", text)
	}
}

// FuzzEventReader: any input, read whole or a byte at a time, gives the
// same events, none longer than the input.
func FuzzEventReader(f *testing.F) {
	for _, tt := range eventTests {
		f.Add([]byte(tt.in))
	}
	for _, name := range []string{"stream_chat_sglang.txt", "stream_completion_openai.txt", "stream_generate_sglang.txt"} {
		f.Add(golden(f, name))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		whole, err1 := readAll(bytes.NewReader(in))
		bytewise, err2 := readAll(iotest.OneByteReader(bytes.NewReader(in)))
		if (err1 == nil) != (err2 == nil) || strings.Join(whole, "\x00") != strings.Join(bytewise, "\x00") || len(whole) != len(bytewise) {
			t.Fatalf("whole %q %v, byte by byte %q %v", whole, err1, bytewise, err2)
		}
		for _, ev := range whole {
			if len(ev) > len(in) {
				t.Fatalf("event %q longer than the input", ev)
			}
		}
	})
}

// FuzzStreamDecode: no event makes a decoder panic, and only [DONE] ends
// a stream.
func FuzzStreamDecode(f *testing.F) {
	for _, name := range []string{"stream_chat_sglang_continuous_usage.txt", "stream_chat_reasoning_sglang.txt", "stream_completion_sglang.txt", "stream_generate_sglang.txt", "stream_error_sglang.txt"} {
		events, _ := readAll(bytes.NewReader(golden(f, name)))
		for _, ev := range events {
			f.Add([]byte(ev))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, kind := range []StreamKind{StreamChat, StreamCompletion, StreamGenerate} {
			dec := StreamDecoder{Kind: kind}
			d, err := dec.Decode(data)
			if err == nil && d.Done != IsDone(data) {
				t.Fatalf("%q: done %v", data, d.Done)
			}
		}
	})
}

// BenchmarkStreamDecode: reading and decoding a chat stream with usage in
// every chunk, as infer bench does for each answer.
func BenchmarkStreamDecode(b *testing.B) {
	body := golden(b, "stream_chat_sglang_continuous_usage.txt")
	b.SetBytes(int64(len(body)))
	events := 0
	for i := 0; i < b.N; i++ {
		er := NewEventReader(bytes.NewReader(body))
		dec := StreamDecoder{Kind: StreamChat}
		for {
			data, err := er.Next()
			if err != nil {
				break
			}
			if _, err := dec.Decode(data); err != nil {
				b.Fatal(err)
			}
			events++
		}
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// A chunk's reasoning under either name: reasoning_content (SGLang,
// llama.cpp, vLLM before the rename), reasoning (current vLLM); the delta
// says which.
func TestStreamReasoningFields(t *testing.T) {
	for _, tt := range []struct{ data, text, field string }{
		{`{"choices":[{"delta":{"reasoning_content":"Let"}}]}`, "Let", FieldReasoningContent},
		{`{"choices":[{"delta":{"reasoning":"Let"}}]}`, "Let", FieldReasoning},
		{`{"choices":[{"delta":{"content":"x","reasoning":null}}]}`, "", ""},
	} {
		dec := StreamDecoder{Kind: StreamChat}
		d, err := dec.Decode([]byte(tt.data))
		if err != nil || d.Reasoning != tt.text || d.ReasoningField != tt.field {
			t.Errorf("%s: reasoning %q in %q (%v), want %q in %q", tt.data, d.Reasoning, d.ReasoningField, err, tt.text, tt.field)
		}
	}
}
