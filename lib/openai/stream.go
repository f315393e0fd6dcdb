package openai

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/segmentio/encoding/json"
)

// Streaming: with "stream": true the chat and completions APIs, and
// SGLang's /generate, answer with server-sent events (text/event-stream),
// one JSON chunk per "data:" line and a final "data: [DONE]". Chat chunks
// carry a delta of the message, completion chunks a piece of the text,
// /generate chunks the whole text so far with meta_info. Usage comes in a
// last chunk with empty choices when stream_options.include_usage is set,
// and in every chunk with SGLang's (and vLLM's)
// stream_options.continuous_usage_stats.

// MaxEventSize bounds one event, so a server that never ends a line
// cannot make a client buffer without end.
const MaxEventSize = 16 << 20

// ErrEventTooLarge is returned for an event longer than MaxEventSize.
var ErrEventTooLarge = errors.New("server-sent event too large")

// EventReader reads the data of server-sent events, as the HTML standard
// defines them: lines end in LF, CRLF or CR; a blank line ends an event;
// "data:" lines are joined with LF; comments (":...") and other fields
// (event, id, retry) are skipped; an event cut off by the end of the
// stream is dropped.
type EventReader struct {
	r     *bufio.Reader
	line  []byte
	data  []byte
	cr    bool // the last line ended in CR: an LF right after it is part of that end
	first bool
}

// NewEventReader reads events from r.
func NewEventReader(r io.Reader) *EventReader {
	return &EventReader{r: bufio.NewReaderSize(r, 16<<10), first: true}
}

// Next returns the data of the next event, or io.EOF at the end of the
// stream. The slice is valid until the next call.
func (e *EventReader) Next() ([]byte, error) {
	e.data = e.data[:0]
	has := false
	for {
		line, err := e.readLine()
		if err != nil {
			if err == io.EOF {
				return nil, io.EOF // an unfinished event is dropped
			}
			return nil, err
		}
		if len(line) == 0 {
			if has {
				return e.data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		if string(field) != "data" {
			continue
		}
		if has {
			e.data = append(e.data, '\n')
		}
		if len(e.data)+len(value) > MaxEventSize {
			return nil, ErrEventTooLarge
		}
		e.data = append(e.data, value...)
		has = true
	}
}

// readLine returns the next line without its end.
func (e *EventReader) readLine() ([]byte, error) {
	e.line = e.line[:0]
	if e.cr {
		e.cr = false
		if b, err := e.r.Peek(1); err == nil && b[0] == '\n' {
			e.r.Discard(1)
		}
	}
	if e.first {
		e.first = false
		if b, _ := e.r.Peek(3); string(b) == "\xef\xbb\xbf" {
			e.r.Discard(3)
		}
	}
	for {
		if _, err := e.r.Peek(1); err != nil {
			return nil, err // a last line without its end is unfinished too
		}
		chunk, _ := e.r.Peek(e.r.Buffered())
		i := bytes.IndexAny(chunk, "\r\n")
		if i < 0 {
			if len(e.line)+len(chunk) > MaxEventSize {
				return nil, ErrEventTooLarge
			}
			e.line = append(e.line, chunk...)
			e.r.Discard(len(chunk))
			continue
		}
		if len(e.line)+i > MaxEventSize {
			return nil, ErrEventTooLarge
		}
		e.line = append(e.line, chunk[:i]...)
		e.cr = chunk[i] == '\r'
		e.r.Discard(i + 1)
		return e.line, nil
	}
}

// IsDone reports whether an event's data is the stream's end marker.
func IsDone(data []byte) bool { return string(bytes.TrimSpace(data)) == "[DONE]" }

// ChatChunk is one event of a streamed chat completion.
type ChatChunk = Response[ChatChunkChoice]

// CompletionChunk is one event of a streamed text completion: the same
// shape as the whole answer, the choice's text being the new piece.
type CompletionChunk = Response[CompletionChoice]

// ChatChunkChoice is one choice of a chat chunk: its delta has the
// fields of a message, each the piece this chunk adds (or none).
type ChatChunkChoice struct {
	Index        int             `json:"index"`
	Delta        ChatMessage     `json:"delta"`
	FinishReason *string         `json:"finish_reason"`
	MatchedStop  json.RawMessage `json:"matched_stop,omitempty"`
}

// StreamOptions is a request's stream_options. ContinuousUsageStats is
// SGLang's and vLLM's extension: usage in every chunk.
type StreamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats,omitempty"`
}

// StreamKind is the shape of a stream's chunks.
type StreamKind int

const (
	StreamChat StreamKind = iota
	StreamCompletion
	StreamGenerate
)

// Delta is one event of a streamed answer, reduced to what a client
// counts: the text it adds (the first choice's), why the answer ended
// once it has, and token counts when the event carries them.
type Delta struct {
	Text, Reasoning string
	ReasoningField  string // the field Reasoning came in (Completion's)
	// ToolCalls are the pieces of tool calls this chunk adds (chat), each
	// under its call's index.
	ToolCalls    []WireToolCall
	FinishReason string
	// CompletionTokens is the answer's tokens so far, or -1 when the event
	// does not say (chat and completions without usage in it).
	CompletionTokens int
	PromptTokens     int
	Done             bool // the [DONE] marker
}

// StreamError is an error a server reports inside a stream (after HTTP
// 200), e.g. SGLang's full queue.
type StreamError struct {
	Code    int
	Message string
}

func (e *StreamError) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("%d %s", e.Code, e.Message)
	}
	return e.Message
}

// StreamDecoder reduces the events of one streamed answer to Deltas.
type StreamDecoder struct {
	Kind StreamKind
	// text of /generate seen so far: its chunks repeat the whole text.
	genText int
}

type streamErrorBody struct {
	Error json.RawMessage `json:"error"`
}

type generateChunk struct {
	Text     string `json:"text"`
	MetaInfo struct {
		FinishReason     *NativeFinish `json:"finish_reason"`
		PromptTokens     int           `json:"prompt_tokens"`
		CompletionTokens *int          `json:"completion_tokens"`
	} `json:"meta_info"`
}

// Decode reads one event's data.
func (s *StreamDecoder) Decode(data []byte) (Delta, error) {
	d := Delta{CompletionTokens: -1}
	if IsDone(data) {
		d.Done = true
		return d, nil
	}
	if bytes.Contains(data, []byte(`"error"`)) {
		var eb streamErrorBody
		if decoded(data, &eb) && len(eb.Error) > 0 && string(eb.Error) != "null" {
			return d, streamError(eb.Error)
		}
	}
	switch s.Kind {
	case StreamGenerate:
		var c generateChunk
		if err := decode(data, &c); err != nil {
			return d, err
		}
		if len(c.Text) >= s.genText {
			d.Text = c.Text[s.genText:]
			s.genText = len(c.Text)
		} else {
			// A server streaming increments instead of the whole text.
			d.Text = c.Text
			s.genText += len(c.Text)
		}
		if c.MetaInfo.CompletionTokens != nil {
			d.CompletionTokens = *c.MetaInfo.CompletionTokens
		}
		d.PromptTokens = c.MetaInfo.PromptTokens
		if f := c.MetaInfo.FinishReason; f != nil {
			d.FinishReason = f.Type
		}
		return d, nil
	case StreamCompletion:
		var c CompletionChunk
		if err := decode(data, &c); err != nil {
			return d, err
		}
		if len(c.Choices) > 0 {
			d.Text, d.FinishReason = c.Choices[0].Text, deref(c.Choices[0].FinishReason)
		}
		d.usage(c.Usage)
		return d, nil
	}
	var c ChatChunk
	if err := decode(data, &c); err != nil {
		return d, err
	}
	if len(c.Choices) > 0 {
		ch := &c.Choices[0]
		d.Text, d.FinishReason = deref(ch.Delta.Content), deref(ch.FinishReason)
		d.Reasoning, d.ReasoningField = ch.Delta.thinking()
		if len(ch.Delta.ToolCalls) > 0 && string(ch.Delta.ToolCalls) != "null" {
			if err := json.Unmarshal(ch.Delta.ToolCalls, &d.ToolCalls); err != nil {
				return d, fmt.Errorf("malformed tool_calls delta: %w", err)
			}
		}
	}
	d.usage(c.Usage)
	return d, nil
}

func (d *Delta) usage(u *Usage) {
	if u != nil {
		d.CompletionTokens, d.PromptTokens = u.CompletionTokens, u.PromptTokens
	}
}

// streamError reads the "error" of an error event: an object with
// message and code (SGLang, OpenAI), or a bare message.
func streamError(raw json.RawMessage) *StreamError {
	var o struct {
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
	}
	e := &StreamError{}
	if json.Unmarshal(raw, &o) == nil && o.Message != "" {
		e.Message = bounded(o.Message)
		var code int
		if json.Unmarshal(o.Code, &code) == nil {
			e.Code = code
		}
		return e
	}
	e.Message = messageOf(raw)
	return e
}
