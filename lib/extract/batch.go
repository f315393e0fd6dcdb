package extract

import (
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"
)

// batchBody is the request of an OpenAI batch input line: a chat request
// (messages), a completion request (prompt) or a Responses API request
// (input, instructions).
type batchBody struct {
	Messages     json.RawMessage `json:"messages"`
	Prompt       json.RawMessage `json:"prompt"`
	Input        json.RawMessage `json:"input"`
	Instructions json.RawMessage `json:"instructions"`
	Tools        json.RawMessage `json:"tools"`
	Functions    json.RawMessage `json:"functions"`
	ToolChoice   json.RawMessage `json:"tool_choice"`
	Parallel     json.RawMessage `json:"parallel_tool_calls"`
	FunctionCall json.RawMessage `json:"function_call"`
}

// responseItem is one element of a Responses API input: a message (its
// type "message" or left out), a function call, or a function call's
// output.
type responseItem struct {
	Type      json.RawMessage `json:"type"`
	Role      json.RawMessage `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    json.RawMessage `json:"call_id"`
	Name      json.RawMessage `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// Batch endpoints, by the end of a line's url.
const (
	endpointChat        = "/chat/completions"
	endpointCompletions = "/completions"
	endpointResponses   = "/responses"
	endpointEmbeddings  = "/embeddings"
	endpointModerations = "/moderations"
)

// endpoint names the API a batch line's url calls ("" for none), in the
// order that tells /chat/completions from /completions.
func endpoint(url string) string {
	url, _, _ = strings.Cut(url, "?")
	url = strings.TrimRight(url, "/")
	for _, e := range []string{endpointChat, endpointCompletions, endpointResponses, endpointEmbeddings, endpointModerations} {
		if strings.HasSuffix(url, e) {
			return e
		}
	}
	return ""
}

// readBatch reads an OpenAI batch input line by its url: a chat request's
// messages, a completion request's prompt (which stays a completion
// prompt), or a Responses API request's input after its instructions.
// Embeddings and moderations requests have nothing to generate from. A
// line without a url is read by what its body holds.
func (x *Extractor) readBatch(f *fields) *badRecord {
	var body batchBody
	if _, err := json.Parse(f.Body, &body, parseFlags); err != nil {
		return reject(ReasonUnknownLayout, "body is not a request object")
	}
	// The request's own tool settings; legacy functions are its tools.
	x.settings = toolSettings{choice: body.ToolChoice, parallel: body.Parallel, legacy: legacySetting(body.FunctionCall)}
	var bad *badRecord
	if body.Tools, bad = legacyTools("body", body.Tools, body.Functions); bad != nil {
		return bad
	}
	var api string
	switch {
	case isString(f.URL):
		url := string(tokenText(x.scratch[:0], f.URL))
		if api = endpoint(url); api == "" {
			return reject(ReasonUnknownLayout, "url %q is not an endpoint that generates text (/v1/chat/completions, /v1/completions, /v1/responses)", url)
		}
	case present(body.Messages):
		api = endpointChat
	case present(body.Prompt):
		api = endpointCompletions
	case present(body.Input):
		return reject(ReasonUnknownLayout, "body.input without a url: a /v1/responses or a /v1/embeddings request?")
	default:
		return reject(ReasonUnknownLayout, "body has neither messages nor prompt")
	}
	switch api {
	case endpointEmbeddings:
		return reject(ReasonEmbeddings, "a /v1/embeddings request has no prompt to generate from")
	case endpointModerations:
		return reject(ReasonModerations, "a /v1/moderations request has no prompt to generate from")
	case endpointChat:
		if !present(body.Messages) {
			return reject(ReasonUnknownLayout, "a chat request without body.messages")
		}
		return x.readConversation("body.messages", body.Messages, nil, body.Tools)
	case endpointCompletions:
		return x.readCompletion(body.Prompt)
	}
	return x.readResponses(&body)
}

// readCompletion reads a completion request's prompt: one string, or a
// list of exactly one.
func (x *Extractor) readCompletion(prompt []byte) *badRecord {
	if present(prompt) && prompt[0] == '[' {
		var list []json.RawMessage
		if _, err := json.Parse(prompt, &list, parseFlags); err == nil && len(list) == 1 && isString(list[0]) {
			prompt = list[0]
		} else if err == nil && len(list) > 1 {
			return reject(ReasonUnknownLayout, "body.prompt holds %d prompts; a batch line makes one prompt record", len(list))
		}
	}
	switch {
	case isString(prompt):
		x.completion = x.clean(&x.arena, prompt)
		return nil
	case present(prompt):
		return reject(ReasonUnknownLayout, "body.prompt is not a single string (token ids are not read)")
	}
	return reject(ReasonUnknownLayout, "a completion request without body.prompt")
}

// readResponses reads a Responses API request: input as text (one user
// turn) or as a list of items, after instructions as the system prompt.
// Function calls and their outputs become assistant tool_calls and tool
// turns; reasoning items, which replay a model's hidden reasoning, are
// left out.
func (x *Extractor) readResponses(body *batchBody) *badRecord {
	switch {
	case isString(body.Input):
		x.addMessage(roleUser, x.clean(&x.arena, body.Input))
	case present(body.Input) && body.Input[0] == '[':
		var items []responseItem
		if _, err := json.Parse(body.Input, &items, parseFlags); err != nil {
			return notAll("body.input", body.Input, '{', "an item")
		}
		if len(items) == 0 {
			return reject(ReasonEmpty, "body.input is empty")
		}
		for i := range items {
			if bad := x.responseItem(&items[i]); bad != nil {
				bad.detail = "body.input[" + strconv.Itoa(i) + "]: " + bad.detail
				return bad
			}
		}
	case present(body.Input):
		return reject(ReasonUnknownLayout, "body.input is neither text nor a list of items")
	default:
		return reject(ReasonUnknownLayout, "a /v1/responses request without body.input")
	}
	if present(body.Instructions) && !isString(body.Instructions) {
		return reject(ReasonUnknownLayout, "body.instructions is not a string")
	}
	if bad := x.addSystem(body.Instructions); bad != nil {
		return bad
	}
	return x.setTools(body.Tools)
}

func (x *Extractor) responseItem(it *responseItem) *badRecord {
	typ := ""
	if isString(it.Type) {
		typ = string(tokenText(x.scratch[:0], it.Type))
	}
	switch typ {
	case "", "message":
		role, err := x.role(it.Role)
		if err != nil {
			return reject(ReasonUnknownRole, "%v", err)
		}
		tok, bad := x.content(it.Content, false)
		if bad != nil {
			return bad
		}
		x.addMessage(role, tok)
	case "function_call":
		if !isString(it.CallID) || !isString(it.Name) || !isString(it.Arguments) {
			return reject(ReasonUnknownLayout, "a function_call item needs string call_id, name and arguments")
		}
		x.addToolCall(it.CallID, it.Name, it.Arguments)
	case "function_call_output":
		if !isString(it.CallID) {
			return reject(ReasonUnknownLayout, "a function_call_output item needs a string call_id")
		}
		tok, bad := x.content(it.Output, false)
		if bad != nil {
			return bad
		}
		x.add(message{role: roleTool, content: tok, toolCallID: x.clean(&x.arena, it.CallID)})
	case "reasoning":
	default:
		return reject(ReasonUnknownLayout, "item type %q is not read", typ)
	}
	return nil
}

// addToolCall adds an OpenAI tool call (id, name and arguments as string
// tokens) to the assistant turn at the end of x.msgs, or to a new one: a
// run of calls is one assistant turn, as in chat requests.
func (x *Extractor) addToolCall(id, name, arguments []byte) {
	id, name, arguments = x.clean(&x.scratchArena, id), x.clean(&x.scratchArena, name), x.clean(&x.scratchArena, arguments)
	n := len(x.msgs)
	start := len(x.arena)
	if n > 0 && x.msgs[n-1].role == roleAssistant && x.msgs[n-1].toolCalls != nil && x.msgs[n-1].callsBuilt {
		calls := x.msgs[n-1].toolCalls
		x.arena = append(x.arena, calls[:len(calls)-1]...)
		x.arena = append(x.arena, ',')
	} else {
		x.msgs = append(x.msgs, message{role: roleAssistant, content: []byte(`""`), callsBuilt: true})
		n++
		x.arena = append(x.arena, '[')
	}
	x.arena = x.appendCall(x.arena, id, name, arguments)
	x.arena = append(x.arena, ']')
	x.msgs[n-1].toolCalls = x.arena[start:]
}
