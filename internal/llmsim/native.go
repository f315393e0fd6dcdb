package llmsim

// llama.cpp's own /completion answers (tools/server/server-task.cpp
// server_task_result_cmpl_final/partial::to_json_non_oaicompat; field
// meanings in tools/server/README.md).

// stopType is llama.cpp's stop_type: eos when the model ended the answer,
// limit when n_predict or the context cut it.
func stopType(end string) string {
	if end == finishStop {
		return "eos"
	}
	return "limit"
}

// appendNative writes the final /completion object after n tokens; the
// text is left out (content "") when it was streamed already.
func (f *flight) appendNative(dst []byte, n int, withText bool) []byte {
	c := f.choices[0]
	cfg := &f.e.f.cfg
	dst = append(dst, `{"index":0,"content":"`...)
	if withText {
		dst = escapeInPlace(dst, func(b []byte) []byte { return c.appendContent(b, 0, n) })
	}
	dst = append(dst, `","tokens":`...)
	dst = f.appendNativeTokens(dst, n)
	dst = append(dst, `,"id_slot":0,"stop":true,"model":`...)
	dst = appendString(dst, cfg.ModelName)
	dst = append(dst, `,"tokens_predicted":`...)
	dst = appendInt(dst, n)
	dst = append(dst, `,"tokens_evaluated":`...)
	dst = appendInt(dst, f.prompt)
	dst = append(dst, `,"generation_settings":{"n_predict":`...)
	dst = appendInt(dst, f.job.maxTokens)
	dst = append(dst, `,"seed":4294967295,"temperature":0.800000011920929,"top_k":40,"top_p":0.949999988079071,"min_p":0.05000000074505806,"n_keep":0,"stream":`...)
	if f.stream {
		dst = append(dst, "true"...)
	} else {
		dst = append(dst, "false"...)
	}
	dst = append(dst, `,"n_probs":0},"prompt":`...)
	dst = appendString(dst, f.job.prompt.Text)
	dst = append(dst, `,"has_new_line":false,"truncated":`...)
	// truncated: the context, not n_predict, ended the answer.
	if c.End == finishLength && (f.job.maxTokens < 0 || c.limit < f.job.maxTokens) {
		dst = append(dst, "true"...)
	} else {
		dst = append(dst, "false"...)
	}
	dst = append(dst, `,"stop_type":"`...)
	dst = append(dst, stopType(c.End)...)
	dst = append(dst, `","stopping_word":"","tokens_cached":`...)
	dst = appendInt(dst, f.cached)
	dst = f.appendTimings(dst)
	return append(dst, '}')
}

// appendNativeChunk writes the stream events for the tokens since the
// last event: one partial object, then the final one once done.
func (f *flight) appendNativeChunk(dst []byte, c *choiceState, from, to int, done bool) []byte {
	if to > from {
		dst = append(dst, `data: {"index":0,"content":"`...)
		dst = escapeInPlace(dst, func(b []byte) []byte { return c.appendContent(b, from, to) })
		dst = append(dst, `","tokens":[`...)
		for k := from; k < to; k++ {
			if k > from {
				dst = append(dst, ',')
			}
			dst = appendInt(dst, c.streamedID(k))
		}
		dst = append(dst, `],"stop":false,"id_slot":0,"tokens_predicted":`...)
		dst = appendInt(dst, to)
		dst = append(dst, `,"tokens_evaluated":`...)
		dst = appendInt(dst, f.prompt)
		dst = append(dst, "}\n\n"...)
	}
	if done {
		dst = append(dst, "data: "...)
		dst = f.appendNative(dst, to, false)
		dst = append(dst, "\n\n"...)
	}
	return dst
}

// streamedID is the id a /completion stream shows for token k: the
// model's own with a model's tokenizer, else a plausible one.
func (c *choiceState) streamedID(k int) int {
	if c.model != nil {
		return c.model.ids[min(k, len(c.model.ids)-1)]
	}
	return tokenID(c.words, k)
}
