package merge

import (
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/segmentio/encoding/json"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// isParquet tells an output to write as Parquet, by its name.
func isParquet(path string) bool { return strings.HasSuffix(strings.ToLower(path), ".parquet") }

// sink is where the good records go: JSON Lines or a Parquet file.
type sink interface {
	Write(rec []byte) error
	// Finish ends the output's format; the file itself is the run's
	// jsonl.Outputs' to put in place or drop.
	Finish() error
}

// Row groups end at whichever comes first: maxGroupRows rows, or records
// of a byte budget (JSON text) that bounds what a row group holds in
// memory before it is written out.
const (
	maxGroupRows  = 10000
	maxGroupBytes = 64 << 20
	minGroupBytes = 1 << 20
)

// The Parquet rows, in the shape Hugging Face datasets reads and writes
// chat data: a list<struct<role, content, ...>> column beside the scalar
// columns. Fields a turn may lack are optional (null).
type (
	pqFunction struct {
		Name      string `parquet:"name"`
		Arguments string `parquet:"arguments"`
	}
	pqCall struct {
		ID       string     `parquet:"id"`
		Type     string     `parquet:"type"`
		Function pqFunction `parquet:"function"`
	}
	pqTurn struct {
		Role             string   `parquet:"role"`
		Content          string   `parquet:"content"`
		ReasoningContent *string  `parquet:"reasoning_content,optional"`
		Name             *string  `parquet:"name,optional"`
		ToolCalls        []pqCall `parquet:"tool_calls,optional,list"`
		ToolCallID       *string  `parquet:"tool_call_id,optional"`
		Weight           *float64 `parquet:"weight,optional"`
	}
	pqShareGPTTurn struct {
		From   string   `parquet:"from"`
		Value  string   `parquet:"value"`
		Weight *float64 `parquet:"weight,optional"`
	}
	pqMessagesRow struct {
		ID       string   `parquet:"id"`
		Sample   int64    `parquet:"sample"`
		Messages []pqTurn `parquet:"messages,list"`
		Tools    *string  `parquet:"tools,optional"`
		Arm      *string  `parquet:"arm,optional"` // infer --mix's arm, null without
	}
	pqConversationsRow struct {
		ID            string   `parquet:"id"`
		Sample        int64    `parquet:"sample"`
		Conversations []pqTurn `parquet:"conversations,list"`
		Tools         *string  `parquet:"tools,optional"`
		Arm           *string  `parquet:"arm,optional"`
	}
	pqShareGPTRow struct {
		ID            string           `parquet:"id"`
		Sample        int64            `parquet:"sample"`
		Conversations []pqShareGPTTurn `parquet:"conversations,list"`
		Tools         *string          `parquet:"tools,optional"`
		Arm           *string          `parquet:"arm,optional"`
	}
)

// parquetSink turns each training record (JSON, as --to writes it) into
// a row of a zstd-compressed Parquet file, written through file, which
// puts it in place only when complete.
type parquetSink[T any] struct {
	file       *jsonl.Writer
	pw         *parquet.GenericWriter[T]
	row        []T
	fill       func(*T, []byte) error
	groupRows  int
	groupBytes int64
	maxBytes   int64
}

// newParquetSink writes the --to format to over file; budget is merge's
// memory budget, of which a row group takes at most an eighth.
func newParquetSink(file *jsonl.Writer, to string, budget int64) sink {
	limit := min(max(budget/8, minGroupBytes), maxGroupBytes)
	switch to {
	case toMessages:
		return newSink(file, limit, func(r *pqMessagesRow, data []byte) (err error) {
			r.ID, r.Sample, r.Tools, r.Arm, r.Messages, err = pqChat(data, r.Messages[:0])
			return err
		})
	case toTokens:
		return newSink(file, limit, fillTokenRow)
	case toConversations:
		return newSink(file, limit, func(r *pqConversationsRow, data []byte) (err error) {
			r.ID, r.Sample, r.Tools, r.Arm, r.Conversations, err = pqChat(data, r.Conversations[:0])
			return err
		})
	}
	return newSink(file, limit, func(r *pqShareGPTRow, data []byte) error {
		var v shareGPTRecord
		if err := record.Decode(data, &v); err != nil {
			return err
		}
		r.ID, r.Sample, r.Tools, r.Arm = v.ID, int64(v.Sample), nil, optional(v.Arm)
		if v.Tools != "" {
			r.Tools = &v.Tools
		}
		r.Conversations = r.Conversations[:0]
		for _, t := range v.Conversations {
			r.Conversations = append(r.Conversations, pqShareGPTTurn(t))
		}
		return nil
	})
}

func newSink[T any](file *jsonl.Writer, maxBytes int64, fill func(*T, []byte) error) *parquetSink[T] {
	// The root is named as pyarrow names it.
	schema := parquet.NewSchema("schema", parquet.SchemaOf(new(T)))
	pw := parquet.NewGenericWriter[T](file.Raw(), schema,
		parquet.Compression(&zstd.Codec{Level: zstd.SpeedDefault, Concurrency: 1}),
		parquet.CreatedBy("tokenmill merge", "", ""))
	return &parquetSink[T]{file: file, pw: pw, row: make([]T, 1), fill: fill, maxBytes: maxBytes}
}

func (s *parquetSink[T]) Write(rec []byte) error {
	if err := s.fill(&s.row[0], rec); err != nil {
		return err
	}
	if _, err := s.pw.Write(s.row); err != nil {
		return err
	}
	s.groupRows++
	s.groupBytes += int64(len(rec))
	if s.groupRows >= maxGroupRows || s.groupBytes >= s.maxBytes {
		s.groupRows, s.groupBytes = 0, 0
		return s.pw.Flush()
	}
	return nil
}

func (s *parquetSink[T]) Finish() error { return s.pw.Close() }

// pqChat reads a messages or conversations training record into the
// columns of its row, appending its turns to turns.
func pqChat(data []byte, turns []pqTurn) (id string, sample int64, tools, arm *string, _ []pqTurn, err error) {
	var v struct {
		ID            record.ID       `json:"id"`
		Sample        int             `json:"sample"`
		Messages      []trainMessage  `json:"messages"`
		Conversations []trainMessage  `json:"conversations"`
		Tools         json.RawMessage `json:"tools"`
		Arm           string          `json:"arm"`
	}
	if err := record.Decode(data, &v); err != nil {
		return "", 0, nil, nil, turns, err
	}
	turns, err = pqTurns(turns, append(v.Messages, v.Conversations...))
	return v.ID.Text, int64(v.Sample), pqText(v.Tools), optional(v.Arm), turns, err
}

// pqText is a JSON value's text as a nullable string column.
func pqText(raw json.RawMessage) *string {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	s := string(raw)
	return &s
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// pqTurns converts chat turns, their tool calls in the OpenAI shape with
// the arguments as a string (JSON text when a dataset gave an object).
func pqTurns(dst []pqTurn, msgs []trainMessage) ([]pqTurn, error) {
	for _, m := range msgs {
		t := pqTurn{Role: m.Role, Content: m.Content, ReasoningContent: optional(m.ReasoningContent),
			Name: optional(m.Name), ToolCallID: optional(m.ToolCallID), Weight: m.Weight}
		if len(m.ToolCalls) > 0 && string(m.ToolCalls) != "null" {
			var calls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			}
			if err := json.Unmarshal(m.ToolCalls, &calls); err != nil {
				return dst, err
			}
			t.ToolCalls = make([]pqCall, len(calls))
			for i, c := range calls {
				args := string(c.Function.Arguments)
				if len(args) > 0 && args[0] == '"' {
					if err := json.Unmarshal(c.Function.Arguments, &args); err != nil {
						return dst, err
					}
				}
				t.ToolCalls[i] = pqCall{ID: c.ID, Type: c.Type, Function: pqFunction{Name: c.Function.Name, Arguments: args}}
			}
		}
		dst = append(dst, t)
	}
	return dst, nil
}
