package llmsim

import (
	"container/list"
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// The prefix cache of one endpoint (Config.KVTokens): prompts are cut into
// pages of cachePage tokens, each named by the hash chain of every token
// up to its end, so a page matches only when the whole prefix before it
// matches, as vLLM's block hashes and SGLang's radix tree do. Pages are
// kept least recently used first out; a request's prompt is charged
// prefill only past the pages it finds. A finished answer's pages are kept
// too, so the next turn of a conversation finds its history cached.

const cachePage = 16

type prefixCache struct {
	capacity int // pages
	lru      *list.List
	pages    map[uint64]*list.Element
}

func newPrefixCache(tokens int) *prefixCache {
	return &prefixCache{capacity: max(tokens/cachePage, 1), lru: list.New(), pages: map[uint64]*list.Element{}}
}

// pageHashes is the hash chain of the full pages of ids.
func pageHashes(ids []int) []uint64 {
	out := make([]uint64, 0, len(ids)/cachePage)
	var buf [8 + cachePage*4]byte
	var h uint64
	for i := 0; i+cachePage <= len(ids); i += cachePage {
		binary.LittleEndian.PutUint64(buf[:8], h)
		for k, id := range ids[i : i+cachePage] {
			binary.LittleEndian.PutUint32(buf[8+4*k:], uint32(id))
		}
		h = xxh3.Hash(buf[:])
		out = append(out, h)
	}
	return out
}

// match is the number of leading pages present; they become the most
// recently used.
func (c *prefixCache) match(hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		el, ok := c.pages[h]
		if !ok {
			break
		}
		c.lru.MoveToFront(el)
		n++
	}
	return n
}

// insert keeps the pages, evicting the least recently used past capacity.
func (c *prefixCache) insert(hashes []uint64) {
	for _, h := range hashes {
		if el, ok := c.pages[h]; ok {
			c.lru.MoveToFront(el)
			continue
		}
		c.pages[h] = c.lru.PushFront(h)
		for c.lru.Len() > c.capacity {
			old := c.lru.Back()
			c.lru.Remove(old)
			delete(c.pages, old.Value.(uint64))
		}
	}
}

// consultCache looks the flight's prompt up in the endpoint's prefix cache
// and keeps its pages, and those of the prompt followed by each answer
// (the history of the conversation's next turn). A cache hit never covers
// the last prompt token, which is always computed.
func (e *Endpoint) consultCache(f *flight) {
	if e.f.cfg.KVTokens <= 0 {
		return
	}
	tok := e.tok()
	ids := f.promptIDs()
	hashes := pageHashes(ids)
	var answers [][]uint64
	for _, c := range f.choices {
		answers = append(answers, pageHashes(tok.continued(&f.job.prompt, ids, c)))
	}
	e.mu.Lock()
	cached := min(e.cache.match(hashes)*cachePage, max(len(ids)-1, 0))
	e.cache.insert(hashes)
	for _, a := range answers {
		e.cache.insert(a)
	}
	e.mu.Unlock()
	f.cached = min(cached, f.prompt)
	f.choices[0].PromptTokens = f.prompt - f.cached
	e.stats.cacheQueries.Add(int64(f.prompt))
	e.stats.cachedTokens.Add(int64(f.cached))
}
