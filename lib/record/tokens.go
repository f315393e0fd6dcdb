package record

import "github.com/segmentio/encoding/json"

// TokenIDs are the token ids a server used for one answer (infer
// --token-ids): the rendered prompt as the server tokenized it, chat
// template applied, and the answer as it was generated. A turn of a
// regenerated conversation carries its own; ServedBy is set on a single
// answer, and on a turn only when its server is not the conversation's.
type TokenIDs struct {
	PromptTokenIDs []int32   `json:"prompt_token_ids,omitempty"`
	AnswerTokenIDs []int32   `json:"token_ids,omitempty"`
	ServedBy       *ServedBy `json:"served_by,omitempty"`
	// Sampling is the sampling settings the request sent.
	Sampling json.RawMessage `json:"sampling,omitempty"`
}

// ServedBy is what produced an answer, as far as its server says: the
// model, the kind of server and its version, and a hash of the chat
// template where the server exposes one.
type ServedBy struct {
	Model   string `json:"model"`
	Server  string `json:"server"`
	Version string `json:"version,omitempty"`
	// ChatTemplateHash is the xxh3-64 of the template (hex), with where
	// it was read in ChatTemplateFrom ("/props chat_template", ...).
	ChatTemplateHash string `json:"chat_template_hash,omitempty"`
	ChatTemplateFrom string `json:"chat_template_from,omitempty"`
}

// Same tells whether two answers come from the same model and template:
// the servers may differ in kind or version (a fleet being upgraded
// still serves one model), the template hash only where both say.
func (s *ServedBy) Same(o *ServedBy) bool {
	if s == nil || o == nil {
		return s == o
	}
	if s.Model != o.Model {
		return false
	}
	return s.ChatTemplateHash == "" || o.ChatTemplateHash == "" || s.ChatTemplateHash == o.ChatTemplateHash
}

// ReasonNoTokenIDs: infer --token-ids got an answer without the token ids
// it asked for, or with ids whose counts differ from the answer's usage.
const ReasonNoTokenIDs = "no_token_ids"
