package merge

import (
	"bytes"
	"fmt"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/record"
)

// --for TRAINER writes the training file one drafter trainer's own data
// path loads, with the fields, roles and JSON types its loader reads, and
// refuses (with a reason) the records it cannot carry faithfully. What
// each loader reads was taken from its repository (the commits named in
// trainerread_test.go, whose readers follow them):
//
//   - specforge: `specforge train` (specforge/data/prompt_builder.py,
//     load_dataset("json") then preprocessing.py build_eagle3_dataset and
//     parse.py GeneralParser/ThinkingParser): {"id", "conversations":
//     [{role, content, reasoning_content, tool_calls, tool_call_id,
//     name}], "tools": JSON text}. Every other column is handed to the
//     chat template as a keyword, so there is none. It trains on every
//     assistant span, or with data.train_only_last_turn on the last one
//     only: the file is one row per generation event, the history up to
//     an answer of the model's own and that answer last, trained with
//     train_only_last_turn, so that no other assistant turn (kept as
//     context, the prompt's history, earlier answers) is trained on, and
//     each answer sees the history it was generated after: earlier
//     answers without their reasoning, as infer sent them.
//   - speculators: its data generation (data_generation/preprocessing.py,
//     load_dataset("json"), _normalize_conversation, _render_boundary_rows):
//     {"id", "conversations": [{role, content, reasoning_content,
//     tool_calls, tool_call_id}], "tools": JSON text or ""}, one line per
//     conversation, which it fans out into a row per assistant turn
//     (after the first message), each trained on that turn. A turn kept as
//     context would be trained on: such records are refused.
//   - modelopt: examples/speculative_decoding (eagle_utils.py, ShardedDataset
//     load_dataset("json"), LanguageDataCollator): {"id", "messages":
//     [{role, content}]}, rendered without tools, trained on every
//     assistant turn with training.answer_only_loss (on every token
//     without it). Reasoning goes inline, <think> before the answer.
//   - eagle: eagle/traineagle3/main.py (build_dataset_rank):
//     {"id", "conversations": [{from: human|gpt, value}]}, strictly
//     alternating, under the loader's own system prompt, trained on every
//     gpt turn. Reasoning inline.
const (
	forSpecForge   = "specforge"
	forSpeculators = "speculators"
	forModelOpt    = "modelopt"
	forEAGLE       = "eagle"
)

// trainerForms is the --to form each trainer reads.
var trainerForms = map[string]string{
	forSpecForge:   toConversations,
	forSpeculators: toConversations,
	forModelOpt:    toMessages,
	forEAGLE:       toShareGPT,
}

// Why --for refuses a record.
const (
	// A role the trainer's loader does not know (it would drop the record,
	// fail, or take the turn for an assistant turn).
	ReasonRoleUnsupported = "role_unsupported"
	// Tool calls or tool results, which the loader drops, fails on or
	// trains on as text.
	ReasonToolTurnsUnsupported = "tool_turns_unsupported"
	// Tools the answer was generated with, which the loader never renders.
	ReasonToolsUnsupported = "tools_unsupported"
	// A system prompt, where the loader puts its own instead.
	ReasonSystemUnsupported = "system_unsupported"
	// An assistant turn that is not the model's own answer (weight 0, kept
	// as context; an answer of the prompt's history), which the loader
	// would train on.
	ReasonContextTurn = "context_turn_unmaskable"
	// Turns in an order the loader cuts, drops or asserts against.
	ReasonTurnOrder = "turn_order_unsupported"
)

// forTurn is a chat turn of the OpenAI shape, as SpecForge's parsers and
// speculators' _normalize_conversation read it.
type forTurn struct {
	Role             string            `json:"role"`
	Content          string            `json:"content"`
	ReasoningContent string            `json:"reasoning_content,omitempty"`
	ToolCalls        []record.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string            `json:"tool_call_id,omitempty"`
	Name             string            `json:"name,omitempty"`
}

// forConversationsRow is a SpecForge or speculators row. Tools is always
// there, a string (so that the column has one type from the first record
// on): the tools' JSON text, or for none "[]" (SpecForge parses it to no
// tools) or "" (speculators reads an empty value as none).
type forConversationsRow struct {
	ID            string    `json:"id"`
	Conversations []forTurn `json:"conversations"`
	Tools         string    `json:"tools"`
}

// roleContent is a ModelOpt message: role and content, all its recipes'
// templates render.
type roleContent struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type forMessagesRow struct {
	ID       string        `json:"id"`
	Messages []roleContent `json:"messages"`
}

// fromValue is an EAGLE turn.
type fromValue struct {
	From  string `json:"from"`
	Value string `json:"value"`
}

type forEAGLERow struct {
	ID            string      `json:"id"`
	Conversations []fromValue `json:"conversations"`
}

// forMeta heads a record's --for form, before its rows (one a line): what
// the trainer will make of it, tallied by trainerSink.
type forMeta struct {
	// Rows the trainer makes of the lines (speculators fans a line out
	// into a row per assistant turn), answers of the model's own trained
	// on, and other assistant turns kept in the rows as context, not
	// trained on.
	Rows    int `json:"rows"`
	Answers int `json:"answers"`
	Context int `json:"context"`
}

// encodeFor writes the laid-out turns (c.msgs, the model's own answers
// marked) in the --for trainer's shape: a meta line, then the rows.
func (c *converter) encodeFor() ([]byte, *rejection) {
	if rej := c.forCheck(); rej != nil {
		return nil, rej
	}
	var meta forMeta
	var rows [][]byte
	var err error
	id := c.gen.ID.Text
	for _, m := range c.msgs {
		switch {
		case m.Role != "assistant":
		case m.own:
			meta.Answers++
		default:
			meta.Context++
		}
	}
	switch c.trainer {
	case forSpecForge:
		// One row per answer of the model's own, ending with it.
		tools := "[]"
		if len(c.tools) > 0 {
			tools = string(c.tools)
		}
		for k, m := range c.msgs {
			if !m.own {
				continue
			}
			turns, rej := c.forTurns(c.msgs[:k+1], k)
			if rej != nil {
				return nil, rej
			}
			b, err := json.Marshal(forConversationsRow{ID: id, Conversations: turns, Tools: tools})
			if err != nil {
				return nil, encodeRejection(err)
			}
			rows = append(rows, b)
		}
		meta.Rows = len(rows)
	case forSpeculators:
		turns, rej := c.forTurns(c.msgs, -1)
		if rej != nil {
			return nil, rej
		}
		b, err := json.Marshal(forConversationsRow{ID: id, Conversations: turns, Tools: string(c.tools)})
		if err != nil {
			return nil, encodeRejection(err)
		}
		rows, meta.Rows = append(rows, b), meta.Answers
	case forModelOpt:
		msgs := make([]roleContent, len(c.msgs))
		for i, m := range c.msgs {
			msgs[i] = roleContent{Role: m.Role, Content: c.withThink(m)}
		}
		b, err := json.Marshal(forMessagesRow{ID: id, Messages: msgs})
		if err != nil {
			return nil, encodeRejection(err)
		}
		rows, meta.Rows = append(rows, b), 1
	case forEAGLE:
		turns := make([]fromValue, len(c.msgs))
		for i, m := range c.msgs {
			turns[i] = fromValue{From: shareGPTFrom[m.Role], Value: c.withThink(m)}
		}
		b, err := json.Marshal(forEAGLERow{ID: id, Conversations: turns})
		if err != nil {
			return nil, encodeRejection(err)
		}
		rows, meta.Rows = append(rows, b), 1
	}
	if c.out, err = json.Append(c.out[:0], meta, 0); err != nil {
		return nil, encodeRejection(err)
	}
	for _, r := range rows {
		c.out = append(append(c.out, '\n'), r...)
	}
	return c.out, nil
}

// forTurns is msgs as OpenAI-shaped turns, their calls in one shape
// (arguments as JSON text). Reasoning is kept on the turn at last (the
// row's answer, SpecForge) or on every answer of the model's own (last
// -1, speculators, whose renders keep what the chat template keeps).
func (c *converter) forTurns(msgs []trainMessage, last int) ([]forTurn, *rejection) {
	turns := make([]forTurn, len(msgs))
	for i, m := range msgs {
		t := forTurn{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.own && (last < 0 || i == last) {
			t.ReasoningContent = m.ReasoningContent
		}
		if makesCalls(m.ToolCalls) {
			calls, err := openAICalls(m.ToolCalls)
			if err != nil {
				return nil, reject(ReasonBadRecord, "message %d: tool_calls: %v", i, err)
			}
			t.ToolCalls = calls
		}
		turns[i] = t
	}
	return turns, nil
}

// openAICalls reads tool calls into the OpenAI shape, the arguments as
// JSON text whichever way the record held them, so that the field has one
// type in every row.
func openAICalls(raw json.RawMessage) ([]record.ToolCall, error) {
	var calls []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, err
	}
	out := make([]record.ToolCall, len(calls))
	for i, call := range calls {
		args := bytes.TrimSpace(call.Function.Arguments)
		text := string(args)
		switch {
		case len(args) == 0 || string(args) == "null":
			text = "{}"
		case args[0] == '"':
			if err := json.Unmarshal(args, &text); err != nil {
				return nil, err
			}
		}
		typ := call.Type
		if typ == "" {
			typ = "function"
		}
		out[i] = record.ToolCall{ID: call.ID, Type: typ, Function: record.FunctionCall{Name: call.Function.Name, Arguments: text}}
	}
	return out, nil
}

// forCheck refuses a record the trainer cannot carry as the model saw and
// wrote it, checked in this order: roles, tools, system prompts, turns
// kept as context, the order of the turns.
func (c *converter) forCheck() *rejection {
	msgs := c.msgs
	for i, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return reject(ReasonRoleUnsupported, "message %d: role %q: %s reads system, user, assistant and tool turns", i, m.Role, c.trainer)
		}
	}
	switch c.trainer {
	case forModelOpt, forEAGLE:
		for i, m := range msgs {
			if m.Role == "tool" || makesCalls(m.ToolCalls) {
				return reject(ReasonToolTurnsUnsupported, "message %d: %s's loader has no tool turns (%s)", i, c.trainer, toolsWhy[c.trainer])
			}
		}
		if len(c.tools) > 0 {
			return reject(ReasonToolsUnsupported, "the answers were generated with tools, which %s's loader never renders (%s)", c.trainer, toolsWhy[c.trainer])
		}
	}
	if c.trainer == forEAGLE {
		for i, m := range msgs {
			if m.Role == "system" {
				return reject(ReasonSystemUnsupported, "message %d: EAGLE's loader puts its own system prompt first and reads no system turn", i)
			}
		}
	}
	for i, m := range msgs {
		if m.Role != "assistant" || m.own {
			continue
		}
		switch c.trainer {
		case forSpecForge:
			// Trained on only as a row's last turn, which it never is.
		case forSpeculators:
			if i == 0 {
				continue // speculators makes no row of a first message
			}
			return reject(ReasonContextTurn, "message %d is %s, and speculators trains on every assistant turn after the first message (its token rows, --to tokens, carry their own loss mask)", i, contextWhat(m))
		default:
			return reject(ReasonContextTurn, "message %d is %s, and %s trains on every assistant turn (--for specforge trains on the model's own answers only)", i, contextWhat(m), c.trainer)
		}
	}
	return c.forOrder()
}

// toolsWhy says where a loader leaves tools.
var toolsWhy = map[string]string{
	forModelOpt: "LanguageDataCollator renders messages without tools, and its recipes' training templates drop tool calls and results",
	forEAGLE:    "traineagle3 reads human and gpt turns only and renders no tools",
}

// contextWhat says why an assistant turn is not the model's own.
func contextWhat(m trainMessage) string {
	if m.Weight != nil && *m.Weight == 0 {
		return "kept as context (weight 0)"
	}
	return "not the model's own answer (kept as it was)"
}

// forOrder checks the order of the turns as the trainer's loader does:
// SpecForge's GeneralParser drops turns before the first user turn (a
// system turn first aside) and cuts the conversation at an assistant turn
// after anything but a user or tool turn, or a tool turn after anything
// but an assistant or tool turn; EAGLE's loader asserts that human and gpt
// turns alternate from a human one.
func (c *converter) forOrder() *rejection {
	msgs := c.msgs
	switch c.trainer {
	case forSpecForge:
		start := 0
		if len(msgs) > 0 && msgs[0].Role == "system" {
			start = 1
		}
		if start < len(msgs) && msgs[start].Role != "user" {
			return reject(ReasonTurnOrder, "message %d: a %s turn before the first user turn, which SpecForge drops", start, msgs[start].Role)
		}
		for j := start + 1; j < len(msgs); j++ {
			prev, role := msgs[j-1].Role, msgs[j].Role
			if (role == "tool" && prev != "assistant" && prev != "tool") || (role == "assistant" && prev != "user" && prev != "tool") {
				return reject(ReasonTurnOrder, "message %d: a %s turn after a %s turn, where SpecForge cuts the conversation", j, role, prev)
			}
		}
	case forEAGLE:
		for j, m := range msgs {
			if want := [2]string{"user", "assistant"}[j%2]; m.Role != want {
				return reject(ReasonTurnOrder, "message %d: a %s turn where EAGLE's loader asserts a %s turn (human and gpt turns alternate, from a human one)", j, m.Role, shareGPTFrom[want])
			}
		}
	}
	return nil
}

// trainerSink counts what the trainer will make of each record's --for
// form and writes its rows, one a line.
type trainerSink struct {
	inner sink
	tally *trainerTally
}

// trainerTally is what --for wrote.
type trainerTally struct {
	trainer string
	// Records written, their lines, the rows the trainer makes of them,
	// the answers trained on and the assistant turns kept as context.
	records, lines, rows, answers, context int64
}

func (s *trainerSink) Write(data []byte) error {
	head, rest, _ := bytes.Cut(data, []byte{'\n'})
	var meta forMeta
	if err := json.Unmarshal(head, &meta); err != nil {
		return fmt.Errorf("--for %s: %w", s.tally.trainer, err)
	}
	t := s.tally
	t.records++
	t.rows += int64(meta.Rows)
	t.answers += int64(meta.Answers)
	t.context += int64(meta.Context)
	for len(rest) > 0 {
		var row []byte
		row, rest, _ = bytes.Cut(rest, []byte{'\n'})
		t.lines++
		if err := s.inner.Write(row); err != nil {
			return err
		}
	}
	return nil
}

func (s *trainerSink) Finish() error { return s.inner.Finish() }

// summary is the tally's part of merge's summary line.
func (t *trainerTally) summary() string {
	return fmt.Sprintf("--for %s: %d records as %d lines, %d training rows, %d answers trained on, %d assistant turns kept as context (not trained on)",
		t.trainer, t.records, t.lines, t.rows, t.answers, t.context)
}

// forUsage checks --for against the other flags and sets --to to the
// form the trainer reads.
func (c *Command) forUsage() error {
	if c.For == "" {
		return nil
	}
	form := trainerForms[c.For]
	switch {
	case c.To != toGeneration && c.To != form:
		return cli.Usagef("--for %s writes what %s reads, --to %s: --to %s contradicts it", c.For, c.For, form, c.To)
	case isParquet(c.Output):
		return cli.Usagef("-o %s: %s loads JSON Lines (load_dataset(\"json\")), not a local Parquet file: name a .jsonl file", c.Output, c.For)
	case c.Missing:
		return cli.Usagef("--missing writes prompts; it does not go with --for")
	case c.For == forEAGLE && c.SoftSwitch:
		return cli.Usagef("--soft-switch puts the switch in the system prompt, and EAGLE's loader reads none (it puts its own first)")
	}
	c.To = form
	return nil
}
