package merge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Readers that follow each trainer's own loader, to read back what
// merge --for writes. Each cites the file, function and commit read; none
// copies their code, they do in Go what it does to a record.
//
//   SpecForge   github.com/sgl-project/SpecForge      a6b6b0230009d15ec2a97a57384e6f53f0f96946
//   speculators github.com/vllm-project/speculators   c05b95b303f7d4f21e8d7624e0ffa1c2d9b4d73b
//   ModelOpt    github.com/NVIDIA/Model-Optimizer     a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73
//   EAGLE       github.com/SafeAILab/EAGLE            cb7e0841fe0c206c6ed74a197ad5e2a1f13f5a2b
//   datasets    github.com/huggingface/datasets       b7cb10b0e38ab8bbefdb142d0279bc85ac8c7ab8

// arrowNode is the type Arrow infers for one path of a JSON Lines file.
type arrowNode struct {
	kind   string // null, bool, int64, double, string, list, struct
	fields map[string]*arrowNode
	elem   *arrowNode
}

// arrowLoad reads JSON Lines as load_dataset("json") does before any
// trainer sees a record (datasets' packaged_modules/json/json.py,
// Json._generate_tables, hands the lines to pyarrow.json.read_json): each
// line is an object, a row; every path (a column, a field of a struct, the
// items of a list) has one type inferred from all its values: null fits
// any type, an integer column takes floats (int64 becomes double), a
// struct's fields are the union of the keys seen; a path whose values are
// of two kinds (a number and a string, a list and an object, ...) is
// refused, as pyarrow refuses it ("JSON parse error: Column(/id) changed
// from number to string") and the trainers' datasets versions with it.
// It returns the rows as Go values (numbers as json.Number).
func arrowLoad(data []byte) ([]map[string]any, error) {
	root := &arrowNode{kind: "struct", fields: map[string]*arrowNode{}}
	var rows []map[string]any
	for i, line := range bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %v", i+1, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, fmt.Errorf("line %d: more than one JSON value", i+1)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("line %d: not an object", i+1)
		}
		if err := root.infer(obj, ""); err != nil {
			return nil, fmt.Errorf("line %d: JSON parse error: Column(%s)", i+1, err)
		}
		rows = append(rows, obj)
	}
	return rows, nil
}

// infer folds v into the type of path.
func (n *arrowNode) infer(v any, path string) error {
	kind := "null"
	switch x := v.(type) {
	case nil:
		return nil
	case bool:
		kind = "bool"
	case json.Number:
		kind = "int64"
		if strings.ContainsAny(string(x), ".eE") {
			kind = "double"
		}
	case string:
		kind = "string"
	case []any:
		kind = "list"
	case map[string]any:
		kind = "struct"
	}
	switch {
	case n.kind == "" || n.kind == "null":
		n.kind = kind
	case n.kind == kind:
	case n.kind == "int64" && kind == "double", n.kind == "double" && kind == "int64":
		n.kind = "double"
	default:
		return fmt.Errorf("%s) changed from %s to %s", path, n.kind, kind)
	}
	switch x := v.(type) {
	case []any:
		if n.elem == nil {
			n.elem = &arrowNode{}
		}
		for _, e := range x {
			if err := n.elem.infer(e, path+"/[]"); err != nil {
				return err
			}
		}
	case map[string]any:
		if n.fields == nil {
			n.fields = map[string]*arrowNode{}
		}
		for k, e := range x {
			f := n.fields[k]
			if f == nil {
				f = &arrowNode{}
				n.fields[k] = f
			}
			if err := f.infer(e, path+"/"+k); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadedTurn is a turn as a loader hands it to the chat template.
type loadedTurn struct {
	Role, Content, Reasoning string
	Calls                    int // tool calls
}

// trainRow is one training row a loader makes: the turns rendered, and
// which of them it trains on.
type trainRow struct {
	ID      string
	Turns   []loadedTurn
	Trained []int // indices into Turns
}

// trainedTurns and contextTurns are the assistant turns a row trains on
// and those it only shows.
func (r trainRow) trainedTurns() []loadedTurn {
	var out []loadedTurn
	for _, i := range r.Trained {
		out = append(out, r.Turns[i])
	}
	return out
}

// str is a JSON value as the loaders' `x or ""` reads it.
func str(v any) string {
	s, _ := v.(string)
	return s
}

// loadSpecForge reads a file as `specforge train` does with raw
// conversations (specforge/data/prompt_builder.py _prepare_raw_prompts:
// load_dataset("json"), then specforge/data/preprocessing.py
// build_eagle3_dataset and preprocess_conversations, and
// specforge/data/parse.py GeneralParser.parse with ThinkingParser's keys),
// with data.train_only_last_turn as given. It fails where SpecForge fails
// or would hand the chat template something other than what merge meant:
// a column besides id, conversations and tools (preprocess_conversations
// passes it to the template as a keyword; HarmonyParser.parse takes none),
// tools or tool-call arguments that are not JSON (warned and dropped), a
// turn dropped before the first user turn, a conversation cut by its
// order checks.
func loadSpecForge(data []byte, lastTurnOnly bool) ([]trainRow, error) {
	recs, err := arrowLoad(data)
	if err != nil {
		return nil, err
	}
	var rows []trainRow
	for n, rec := range recs {
		for k := range rec {
			if k != "id" && k != "conversations" && k != "tools" {
				return nil, fmt.Errorf("row %d: column %q would be a chat template keyword", n, k)
			}
		}
		switch tools := rec["tools"].(type) {
		case nil, []any:
		case string:
			var v any
			if json.Unmarshal([]byte(tools), &v) != nil {
				return nil, fmt.Errorf("row %d: tools %.40q is not JSON: SpecForge warns and drops them", n, tools)
			}
		default:
			return nil, fmt.Errorf("row %d: tools of type %T: SpecForge drops them", n, tools)
		}
		conv, _ := rec["conversations"].([]any)
		if len(conv) == 0 {
			continue // `if not source: continue`
		}
		var msgs []map[string]any
		for _, c := range conv {
			m := c.(map[string]any)
			role := str(m["role"])
			if role == "" {
				role = str(m["from"])
			}
			switch role {
			case "human":
				role = "user"
			case "gpt":
				role = "assistant"
			}
			content := str(m["content"])
			if content == "" {
				content = str(m["value"])
			}
			msgs = append(msgs, map[string]any{"role": role, "content": content, "reasoning_content": m["reasoning_content"], "tool_calls": m["tool_calls"]})
		}
		row := trainRow{ID: str(rec["id"])}
		if msgs[0]["role"] == "system" {
			row.Turns = append(row.Turns, loadedTurn{Role: "system", Content: str(msgs[0]["content"])})
			msgs = msgs[1:]
		}
		if len(msgs) > 0 && msgs[0]["role"] != "user" {
			return nil, fmt.Errorf("row %d: SpecForge drops a leading %s turn", n, msgs[0]["role"])
		}
		for j, m := range msgs {
			role := m["role"].(string)
			if j > 0 {
				prev := msgs[j-1]["role"]
				if (role == "tool" && prev != "assistant" && prev != "tool") || (role == "assistant" && prev != "user" && prev != "tool") {
					return nil, fmt.Errorf("row %d: SpecForge cuts the conversation at a %s turn after a %s turn", n, role, prev)
				}
			}
			t := loadedTurn{Role: role, Content: str(m["content"]), Reasoning: str(m["reasoning_content"])}
			if calls := m["tool_calls"]; calls != nil {
				list, ok := calls.([]any)
				if s, isStr := calls.(string); isStr {
					if json.Unmarshal([]byte(s), &list) != nil {
						return nil, fmt.Errorf("row %d: tool_calls %.40q is not JSON: SpecForge removes them", n, s)
					}
					ok = true
				}
				if !ok {
					return nil, fmt.Errorf("row %d: tool_calls of type %T", n, calls)
				}
				for _, c := range list {
					fn, _ := c.(map[string]any)["function"].(map[string]any)
					if args, isStr := fn["arguments"].(string); isStr {
						var v map[string]any
						if json.Unmarshal([]byte(args), &v) != nil {
							return nil, fmt.Errorf("row %d: arguments %.40q are not a JSON object: SpecForge warns and sends {}", n, args)
						}
					}
				}
				t.Calls = len(list)
			}
			row.Turns = append(row.Turns, t)
		}
		for i, t := range row.Turns {
			if t.Role == "assistant" {
				row.Trained = append(row.Trained, i)
			}
		}
		if lastTurnOnly && len(row.Trained) > 1 {
			row.Trained = row.Trained[len(row.Trained)-1:]
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// loadSpeculators reads a file as speculators' data preparation does
// (src/speculators/data_generation/preprocessing.py load_raw_dataset:
// load_dataset("json"); _preprocess_batch, _parse_conv_tools,
// _normalize_conversation, _render_boundary_rows): a row per assistant
// turn after the first message, the conversation up to it, trained on
// that turn. It fails where speculators would not read what merge meant:
// a role it relabels as assistant (function_call, observation, ...),
// tools it cannot parse (warned, left out).
func loadSpeculators(data []byte) ([]trainRow, error) {
	recs, err := arrowLoad(data)
	if err != nil {
		return nil, err
	}
	var rows []trainRow
	for n, rec := range recs {
		switch tools := rec["tools"].(type) {
		case nil, []any:
		case string:
			var v []any
			if tools != "" && json.Unmarshal([]byte(tools), &v) != nil {
				return nil, fmt.Errorf("row %d: tools %.40q: invalid JSON, speculators proceeds without them", n, tools)
			}
		default:
			return nil, fmt.Errorf("row %d: tools of type %T: speculators proceeds without them", n, tools)
		}
		conv, _ := rec["conversations"].([]any)
		var turns []loadedTurn
		for _, c := range conv {
			m := c.(map[string]any)
			role := str(m["from"])
			if _, ok := m["from"]; !ok {
				role = str(m["role"])
			}
			content := str(m["value"])
			if content == "" {
				content = str(m["content"])
			}
			switch role {
			case "human", "user":
				role = "user"
			case "gpt", "assistant":
				role = "assistant"
			case "system", "tool":
			default:
				return nil, fmt.Errorf("row %d: speculators maps role %q to assistant", n, role)
			}
			t := loadedTurn{Role: role, Content: content, Reasoning: str(m["thinking"])}
			if t.Reasoning == "" {
				t.Reasoning = str(m["reasoning_content"])
			}
			if calls, ok := m["tool_calls"].([]any); ok {
				t.Calls = len(calls)
			}
			turns = append(turns, t)
		}
		for j, t := range turns {
			if t.Role != "assistant" || j == 0 {
				continue
			}
			rows = append(rows, trainRow{ID: str(rec["id"]), Turns: turns[:j+1], Trained: []int{j}})
		}
	}
	return rows, nil
}

// loadModelOpt reads a file as ModelOpt's online EAGLE training does
// (examples/speculative_decoding/eagle_utils.py make_speculative_data_module:
// ShardedDataset, load_dataset("json"); modelopt/torch/utils/plugins/
// transformers_dataset.py LanguageDataCollator.__call__ and
// _process_chat_sample with training.answer_only_loss and a template with
// generation tags, such as tools/launcher/examples/Qwen/Qwen3-8B/
// chat_template_train.jinja): a string "text" is trained on whole, else
// "messages" (or the deprecated "conversations") go to the template,
// without tools, trained on every assistant turn; a row without one is
// skipped. It fails on what the collator would not render as merge meant:
// a "text" column, tool calls or tool turns, fields besides role and
// content.
func loadModelOpt(data []byte) ([]trainRow, error) {
	recs, err := arrowLoad(data)
	if err != nil {
		return nil, err
	}
	var rows []trainRow
	for n, rec := range recs {
		if _, ok := rec["text"].(string); ok {
			return nil, fmt.Errorf("row %d: a text column: trained on as plain text", n)
		}
		msgs, _ := rec["messages"].([]any)
		if len(msgs) == 0 {
			msgs, _ = rec["conversations"].([]any)
		}
		if len(msgs) == 0 {
			return nil, fmt.Errorf("row %d: no messages", n)
		}
		row := trainRow{ID: str(rec["id"])}
		for _, x := range msgs {
			m := x.(map[string]any)
			for k := range m {
				if k != "role" && k != "content" {
					return nil, fmt.Errorf("row %d: field %q, which ModelOpt's training templates do not render", n, k)
				}
			}
			role := str(m["role"])
			if role == "tool" {
				return nil, fmt.Errorf("row %d: a tool turn, which ModelOpt's training templates drop", n)
			}
			t := loadedTurn{Role: role}
			t.Reasoning, t.Content = splitThink(str(m["content"]))
			if role == "assistant" {
				row.Trained = append(row.Trained, len(row.Turns))
			}
			row.Turns = append(row.Turns, t)
		}
		if len(row.Trained) == 0 {
			continue // "Skipping sample with no assistant turn in messages."
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// loadEAGLE reads a file as EAGLE-3's trainer does
// (eagle/traineagle3/main.py build_dataset_rank: load_dataset('json'),
// examples['id'] and examples['conversations'], roles
// {"human": "user", "gpt": "assistant"}, a first turn that is not human
// skipped, then `assert role == convroles[j % 2]`, every gpt turn trained
// on under the loader's own system prompt). A role it does not know is the
// KeyError it raises, a turn out of order its AssertionError.
func loadEAGLE(data []byte) ([]trainRow, error) {
	recs, err := arrowLoad(data)
	if err != nil {
		return nil, err
	}
	var rows []trainRow
	for n, rec := range recs {
		if _, ok := rec["id"]; !ok {
			return nil, fmt.Errorf("row %d: KeyError: 'id'", n)
		}
		conv, _ := rec["conversations"].([]any)
		if len(conv) == 0 {
			continue
		}
		roles := map[string]string{"human": "user", "gpt": "assistant"}
		first := conv[0].(map[string]any)
		role, ok := roles[str(first["from"])]
		if !ok {
			return nil, fmt.Errorf("row %d: KeyError: %q", n, first["from"])
		}
		if role != "user" {
			conv = conv[1:]
		}
		row := trainRow{ID: str(rec["id"]), Turns: []loadedTurn{{Role: "system", Content: "(EAGLE's own)"}}}
		for j, x := range conv {
			m := x.(map[string]any)
			role, ok := roles[str(m["from"])]
			if !ok {
				return nil, fmt.Errorf("row %d: KeyError: %q", n, m["from"])
			}
			if want := [2]string{"user", "assistant"}[j%2]; role != want {
				return nil, fmt.Errorf("row %d: AssertionError: turn %d is %s", n, j, role)
			}
			t := loadedTurn{Role: role}
			t.Reasoning, t.Content = splitThink(str(m["value"]))
			if role == "assistant" {
				row.Trained = append(row.Trained, len(row.Turns))
			}
			row.Turns = append(row.Turns, t)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// splitThink takes an inline <think> block, as --with-reasoning writes it
// for trainers that read only the text, off an answer.
func splitThink(s string) (reasoning, content string) {
	if rest, ok := strings.CutPrefix(s, "<think>\n"); ok {
		if r, c, ok := strings.Cut(rest, "\n</think>\n\n"); ok {
			return r, c
		}
	}
	return "", s
}

// loaders are the readers by trainer (SpecForge with
// data.train_only_last_turn, as --for specforge is trained).
var loaders = map[string]func([]byte) ([]trainRow, error){
	forSpecForge:   func(b []byte) ([]trainRow, error) { return loadSpecForge(b, true) },
	forSpeculators: loadSpeculators,
	forModelOpt:    loadModelOpt,
	forEAGLE:       loadEAGLE,
}

// answerKey is a trained answer as text, to compare what a loader trains
// on with what merge meant.
func answerKey(id string, t loadedTurn) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%d", id, t.Content, t.Reasoning, t.Calls)
}

// sortedKeys lists a multiset.
func sortedKeys(m map[string]int) []string {
	var out []string
	for k, n := range m {
		for range n {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
