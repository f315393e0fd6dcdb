package merge

import (
	"bytes"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/record"
)

// The sampling mixture's arm (infer --mix) reaches every training form:
// "arm" beside "id" in messages, conversations, sharegpt and token rows
// (a nullable column in Parquet). Qwen3-style trainers may want the mode
// in the prompt instead, as the model's soft switch: --soft-switch ends the
// system prompt with /think or /no_think, as the arm set
// chat_template_kwargs.enable_thinking.

// Qwen3's soft switches (its model card, "Advanced Usage: Switching
// Between Thinking and Non-Thinking Mode").
const (
	switchThink   = "/think"
	switchNoThink = "/no_think"
)

// withSoftSwitch ends msgs' system prompt with the switch armParams call
// for, adding a system turn where there is none; msgs as they are when the
// arm says nothing of thinking.
func withSoftSwitch(msgs []trainMessage, armParams json.RawMessage) []trainMessage {
	var on *bool
	if kw, err := record.FieldValue(armParams, "chat_template_kwargs"); err == nil && len(bytes.TrimSpace(kw)) > 0 {
		var k struct {
			EnableThinking *bool `json:"enable_thinking"`
		}
		if json.Unmarshal(kw, &k) == nil {
			on = k.EnableThinking
		}
	}
	if on == nil {
		return msgs
	}
	word := switchNoThink
	if *on {
		word = switchThink
	}
	if len(msgs) > 0 && msgs[0].Role == "system" {
		if msgs[0].Content == "" {
			msgs[0].Content = word
		} else {
			msgs[0].Content += " " + word
		}
		return msgs
	}
	return append([]trainMessage{{Role: "system", Content: word}}, msgs...)
}
