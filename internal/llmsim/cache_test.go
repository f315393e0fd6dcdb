package llmsim

import (
	"encoding/json"
	"strings"
	"testing"
)

// conversation posts turn 1 of a chat, then turn 2 carrying turn 1's
// answer, and returns both answers' bodies.
func conversation(t *testing.T, base, system string) (first, second []byte) {
	t.Helper()
	msgs := []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": "First question, please answer it."}}
	body := func() string {
		b, _ := json.Marshal(map[string]any{"model": DefaultModelName, "messages": msgs, "max_tokens": 40})
		return string(b)
	}
	s, first := postJSON(t, base+pathChat, body())
	var a struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if s != 200 || json.Unmarshal(first, &a) != nil || len(a.Choices) != 1 {
		t.Fatalf("turn 1: %d %s", s, first)
	}
	msgs = append(msgs, map[string]string{"role": "assistant", "content": a.Choices[0].Message.Content},
		map[string]string{"role": "user", "content": "And a second one?"})
	s, second = postJSON(t, base+pathChat, body())
	if s != 200 {
		t.Fatalf("turn 2: %d %s", s, second)
	}
	return first, second
}

type usageOf struct {
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Timings *struct {
		CacheN  int `json:"cache_n"`
		PromptN int `json:"prompt_n"`
	} `json:"timings"`
}

// The second turn of a conversation finds its history (the first prompt
// and answer) in the prefix cache, in whole 16-token pages, and each
// flavour reports it where its server does.
func TestPrefixCacheConversation(t *testing.T) {
	system := strings.Repeat("You are a careful assistant. ", 8)
	for _, c := range []struct {
		flavor Flavor
		report bool
		// cached reads the cached tokens off an answer, -1 if not reported.
		cached func(u usageOf) int
	}{
		{FlavorSGLang, true, detailsCached},
		{FlavorSGLang, false, detailsCached},
		{FlavorVLLM, true, detailsCached},
		{FlavorVLLM, false, detailsCached},
		{FlavorOpenAI, false, detailsCached},
		{FlavorLlamaCpp, false, func(u usageOf) int {
			if u.Timings == nil || u.Timings.CacheN+u.Timings.PromptN != u.Usage.PromptTokens {
				return -2
			}
			return u.Timings.CacheN
		}},
	} {
		fleet := startFleet(t, Config{Instant: true, Flavor: c.flavor, KVTokens: 4096, CacheReport: c.report}, 1)
		first, second := conversation(t, fleet.URLs()[0], system)
		var u1, u2 usageOf
		json.Unmarshal(first, &u1)
		json.Unmarshal(second, &u2)
		got1, got2 := c.cached(u1), c.cached(u2)
		reported := c.report || c.flavor == FlavorOpenAI || c.flavor == FlavorLlamaCpp
		switch {
		case !reported && (got1 != -1 || got2 != -1):
			t.Errorf("%s without report: cached %d, %d shown: %s", c.flavor, got1, got2, second)
		case reported && got1 > 0:
			t.Errorf("%s: the first turn found %d tokens cached", c.flavor, got1)
		case reported && (got2 < u1.Usage.PromptTokens-cachePage || got2%cachePage != 0 || got2 >= u2.Usage.PromptTokens):
			t.Errorf("%s: turn 2 (%d prompt tokens) cached %d, want the history's pages (turn 1 had %d)", c.flavor, u2.Usage.PromptTokens, got2, u1.Usage.PromptTokens)
		}
		st := fleet.Stats()
		cached := int64(fleet.Endpoint(0).stats.cachedTokens.Load())
		if cached <= 0 || st.PromptTokens != int64(u1.Usage.PromptTokens+u2.Usage.PromptTokens)-cached {
			t.Errorf("%s: prefilled %d, cached %d, prompts %d+%d", c.flavor, st.PromptTokens, cached, u1.Usage.PromptTokens, u2.Usage.PromptTokens)
		}
	}
}

func detailsCached(u usageOf) int {
	if u.Usage.PromptTokensDetails == nil {
		return -1
	}
	return u.Usage.PromptTokensDetails.CachedTokens
}

// The cache metrics: vLLM's query and hit counters, SGLang's hit rate.
func TestPrefixCacheMetrics(t *testing.T) {
	fleet := startFleet(t, Config{Instant: true, Flavor: FlavorVLLM, KVTokens: 4096}, 1)
	conversation(t, fleet.URLs()[0], "Be brief.")
	hits := fleet.Endpoint(0).stats.cachedTokens.Load()
	_, body := getBody(t, fleet.URLs()[0]+pathMetrics)
	if hits == 0 || !strings.Contains(body, `vllm:prefix_cache_hits_total{engine="0",model_name="Qwen3.6-27B"} `+promFloat(float64(hits))) {
		t.Errorf("%d hits, metrics:\n%s", hits, body)
	}
	sg := startFleet(t, Config{Instant: true, KVTokens: 4096}, 1)
	conversation(t, sg.URLs()[0], "Be brief.")
	if _, body := getBody(t, sg.URLs()[0]+pathMetrics); !strings.Contains(body, "sglang:cache_hit_rate{") || strings.Contains(body, "sglang:cache_hit_rate{model_name=\"Qwen3.6-27B\"} 0.0\n") {
		t.Errorf("sglang metrics:\n%s", body)
	}
	plain := startFleet(t, Config{Instant: true}, 1)
	if _, body := getBody(t, plain.URLs()[0]+pathMetrics); strings.Contains(body, "cache_hit_rate") {
		t.Error("a fleet without a cache reports a cache hit rate")
	}
}

// Pages are evicted least recently used first: with room for two pages,
// a conversation's history is gone once other prompts passed through.
func TestPrefixCacheEviction(t *testing.T) {
	c := newPrefixCache(2 * cachePage)
	ids := func(seed int) []int {
		out := make([]int, 3*cachePage)
		for i := range out {
			out[i] = seed*1000 + i
		}
		return out
	}
	a, b := pageHashes(ids(1)), pageHashes(ids(2))
	if len(a) != 3 {
		t.Fatalf("%d pages of 48 tokens", len(a))
	}
	c.insert(a)
	if n := c.match(a); n != 0 {
		t.Errorf("three pages in a two-page cache: the first %d still match", n)
	}
	c.insert(a[:2])
	if n := c.match(a); n != 2 {
		t.Errorf("after keeping two pages: %d match", n)
	}
	c.insert(b[:2])
	if n := c.match(a); n != 0 {
		t.Errorf("after two other pages: %d of the first match", n)
	}
	// The chain: a page matches only after the same prefix.
	x, y := ids(3), ids(3)
	y[0]++
	if hx, hy := pageHashes(x), pageHashes(y); hx[1] == hy[1] || hx[2] == hy[2] {
		t.Error("pages after a different first page hash the same")
	}
}

// The KV capacity bounds what runs at once: two sequences that each hold
// 60 of 100 tokens run one after the other; one larger than the capacity
// still runs alone.
func TestKVCapacityAdmission(t *testing.T) {
	m := NewModel(DefaultTiming(), 8, 0)
	m.KVCapacity = 100
	a := &Seq{PromptTokens: 20, KV: 60, Target: 40, End: finishStop}
	b := &Seq{PromptTokens: 20, KV: 60, Target: 40, End: finishStop}
	m.Submit(a)
	m.Submit(b)
	m.Step()
	if m.Running() != 1 || m.Waiting() != 1 {
		t.Fatalf("running %d, waiting %d: want b waiting for room", m.Running(), m.Waiting())
	}
	for !a.Done {
		m.Step()
	}
	m.Step()
	if m.Running() != 1 || b.Generated == 0 {
		t.Errorf("after a finished: running %d, b generated %d", m.Running(), b.Generated)
	}
	big := NewModel(DefaultTiming(), 8, 0)
	big.KVCapacity = 10
	s := &Seq{KV: 500, Target: 3, End: finishStop}
	big.Submit(s)
	big.Step()
	if big.Running() != 1 {
		t.Error("a sequence larger than the KV cache never runs")
	}
	// Cached prompt tokens are not prefilled: a shorter step.
	if DefaultTiming().StepDuration(1, 4) >= DefaultTiming().StepDuration(1, 400) {
		t.Error("prefill is not charged per token")
	}
}
