package extract

import (
	"bytes"
	"strconv"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/jsonl"
)

// OpenAssistant (oasst1, oasst2) exports conversations as message trees:
// a prompter message at the root, assistant replies below it, prompter
// replies below those, and so on. Every path from the root down is a
// conversation. They come two ways:
//
//   - *.trees.jsonl: one tree per line, {"message_tree_id", "prompt":
//     {message_id, role, text, replies: [...]}}, read as one record;
//   - *.messages.jsonl (and the Hugging Face tables): one message per line,
//     {message_id, parent_id, role, text, message_tree_id}. The messages of
//     a tree are held until a message of another tree arrives (the exports
//     keep each tree together) or the input ends, then the tree is rebuilt
//     from parent_id. Any other record, or the next input file, ends the
//     tree too. At most Options.MaxHeld messages are held; one past
//     that is rejected as max_held, and a message whose parent was not held
//     as missing_parent.
//
// A prompt ends with a prompter message and holds the path to it from the
// root; its id is that message's message_id (no "#<n>" suffix: message
// ids are unique). --turns picks the prompter messages: first the root
// only, each every one, all-but-last those with no prompter message below
// them (the last question of each branch). --turns all gives each whole
// conversation, the path from the root to each leaf, with the leaf's id.
// The other messages of a flat export end no prompt and are counted as
// such.

// oaMessage is an OpenAssistant message as the exports write it.
type oaMessage struct {
	MessageID     json.RawMessage `json:"message_id"`
	ParentID      json.RawMessage `json:"parent_id"`
	MessageTreeID json.RawMessage `json:"message_tree_id"`
	Role          json.RawMessage `json:"role"`
	Text          json.RawMessage `json:"text"`
	Replies       json.RawMessage `json:"replies"`
}

// oaNode is one message of a tree being turned into prompts.
type oaNode struct {
	id       []byte // message_id token, nil if none
	parentID []byte // parent_id token, nil for a root
	parent   int    // index of the parent node; -1 for a root
	role     string
	content  []byte
	held     *jsonl.RawLine // flat exports: the record it came from
	bad      *badRecord     // flat exports: why it ends no prompt and is rejected
}

// maxTreeDepth bounds the nesting of a tree record, so a hostile one
// cannot exhaust the stack.
const maxTreeDepth = 1000

// DefaultMaxHeld is how many messages of a flat export are held by
// default.
const DefaultMaxHeld = 100000

// oaRole maps OpenAssistant's roles (and the usual chat spellings of
// them) to chat roles.
func (x *Extractor) oaRole(raw []byte) (string, *badRecord) {
	if string(raw) == `"prompter"` {
		return roleUser, nil
	}
	role, err := x.role(raw)
	switch {
	case err != nil:
		return "", reject(ReasonUnknownRole, "%v", err)
	case role != roleUser && role != roleAssistant:
		return "", reject(ReasonUnknownRole, "role %s: an OpenAssistant message is from the prompter or the assistant", raw)
	}
	return role, nil
}

// readTree reads a tree record into x.nodes.
func (x *Extractor) readTree(raw []byte) *badRecord {
	x.nodes = x.nodes[:0]
	return x.readTreeNode(raw, -1, 0, "prompt")
}

func (x *Extractor) readTreeNode(raw []byte, parent, depth int, path string) *badRecord {
	if depth > maxTreeDepth {
		return reject(ReasonUnknownLayout, "the tree is deeper than %d messages", maxTreeDepth)
	}
	var m oaMessage
	if raw[0] != '{' {
		return reject(ReasonUnknownLayout, "%s is not a message object", path)
	}
	if _, err := json.Parse(raw, &m, parseFlags); err != nil {
		return reject(ReasonUnknownLayout, "%s is not a message object", path)
	}
	if !present(m.Role) && !present(m.Text) {
		return reject(ReasonUnknownLayout, "%s is neither text, a list of messages, nor an OpenAssistant message (role, text)", path)
	}
	n, bad := x.oaNode(&m, &x.arena)
	if bad != nil {
		bad.detail = path + ": " + bad.detail
		return bad
	}
	n.parent = parent
	self := len(x.nodes)
	x.nodes = append(x.nodes, n)
	if !present(m.Replies) {
		return nil
	}
	var replies []json.RawMessage
	if _, err := json.Parse(m.Replies, &replies, parseFlags); err != nil {
		return reject(ReasonUnknownLayout, "%s.replies is not a list of messages", path)
	}
	for i, r := range replies {
		if bad := x.readTreeNode(r, self, depth+1, path+".replies["+strconv.Itoa(i)+"]"); bad != nil {
			return bad
		}
	}
	return nil
}

// oaNode checks one message's fields. Text with invalid UTF-8 is
// re-encoded into arena.
func (x *Extractor) oaNode(m *oaMessage, arena *[]byte) (oaNode, *badRecord) {
	role, bad := x.oaRole(m.Role)
	if bad != nil {
		return oaNode{}, bad
	}
	if !isString(m.Text) {
		return oaNode{}, reject(ReasonUnknownLayout, "text is not a string")
	}
	n := oaNode{role: role, content: x.clean(arena, m.Text), parent: -1}
	switch {
	case isString(m.MessageID) && !blankToken(m.MessageID):
		n.id = x.clean(arena, m.MessageID)
	case present(m.MessageID) && !isString(m.MessageID):
		return oaNode{}, reject(ReasonBadID, "message_id %s is not a string", rawExcerpt(m.MessageID))
	}
	switch {
	case isString(m.ParentID) && !blankToken(m.ParentID):
		n.parentID = m.ParentID
	case present(m.ParentID) && !isString(m.ParentID):
		return oaNode{}, reject(ReasonUnknownLayout, "parent_id is not a string")
	}
	return n, nil
}

// oaCandidates turns x.nodes into candidates by the --turns mode (see the
// comment at the top). In a flat export every node gives exactly one
// candidate: a prompt, a reject, a filter, or "ends no prompt"; in a tree
// record only the prompter messages the mode takes do, and a tree that
// gives none is rejected as having no user turn.
func (x *Extractor) oaCandidates(flat bool) {
	x.oaBranches()
	before := len(x.cands)
	for i := range x.nodes {
		n := &x.nodes[i]
		switch {
		case flat && !x.oaUsable(i):
			x.addCandidate(oaUnusable(n))
		case x.oaUsable(i) && x.oaTakes(i):
			x.oaPrompt(i, flat)
		case flat:
			x.addCandidate(Candidate{NoPrompt: true, From: n.held})
		}
	}
	if !flat && len(x.cands) == before {
		x.addCandidate(Candidate{Reason: ReasonNoUserTurn, Detail: "the tree has no prompter message that --turns " + x.opts.Turns + " takes"})
	}
}

// oaBranches marks, over the usable nodes, the leaves (x.oaLeaf: no usable
// reply) and the nodes with a prompter message below them (x.oaBelow: not
// the last question of their branch); every node's state starts unknown.
func (x *Extractor) oaBranches() {
	nodes := x.nodes
	x.oaState = x.oaState[:0]
	x.oaBelow = x.oaBelow[:0]
	x.oaLeaf = x.oaLeaf[:0]
	for range nodes {
		x.oaState = append(x.oaState, oaUnknown)
		x.oaBelow = append(x.oaBelow, false)
		x.oaLeaf = append(x.oaLeaf, true)
	}
	for i := range nodes {
		if !x.oaUsable(i) {
			continue
		}
		if p := nodes[i].parent; p >= 0 {
			x.oaLeaf[p] = false
		}
		if nodes[i].role != roleUser {
			continue
		}
		for p := nodes[i].parent; p >= 0 && !x.oaBelow[p]; p = nodes[p].parent {
			x.oaBelow[p] = true
		}
	}
}

// oaTakes tells whether the --turns mode makes a prompt end at usable
// node i: every leaf for all; else a prompter message that is the root
// (first), any (each), or the last question of its branch (all-but-last).
func (x *Extractor) oaTakes(i int) bool {
	n := &x.nodes[i]
	switch {
	case x.opts.Turns == TurnsAll:
		return x.oaLeaf[i]
	case n.role != roleUser:
		return false
	case x.opts.Turns == TurnsFirst:
		return n.parent < 0
	case x.opts.Turns == TurnsEach:
		return true
	case x.opts.Turns == TurnsAllButLast:
		return !x.oaBelow[i]
	}
	return false
}

// oaUnusable is the reject of a flat export's node that is not usable:
// its own problem, or a parent that was not held.
func oaUnusable(n *oaNode) Candidate {
	bad := n.bad
	if bad == nil {
		bad = reject(ReasonMissingParent, "parent_id %s is not among the messages of its tree that were held (the export must keep each tree together; see --max-held)", n.parentID)
	}
	return Candidate{Reason: bad.reason, Detail: bad.detail, From: n.held}
}

// oaPrompt adds the candidates of the prompt that ends at node i: the path
// from the root to it, with the node's message_id for its id (else a
// content hash). In a flat export the prompt's meta and filters come from
// the record of the message it ends with, which its candidates name.
func (x *Extractor) oaPrompt(i int, flat bool) {
	n := &x.nodes[i]
	if flat {
		x.resetRecord()
		if bad := x.parse(n.held.Data, n.held.Built); bad != nil {
			x.addCandidate(Candidate{Reason: bad.reason, Detail: bad.detail, From: n.held})
			return
		}
		x.format = FormatOAsst
	}
	x.oaPath(i)
	id := datasetID{kind: idContent}
	if n.id != nil {
		id = datasetID{kind: idString, tok: n.id}
	}
	first := len(x.cands)
	switch {
	case len(x.users) == 0:
		x.addCandidate(Candidate{Reason: ReasonNoUserTurn, Detail: "the conversation has no prompter message"})
	case x.opts.Turns == TurnsAll:
		x.conversation(id)
	default:
		x.candidate(id, len(x.users)-1, 0)
	}
	if flat {
		for k := first; k < len(x.cands); k++ {
			x.cands[k].From = n.held
		}
	}
}

// Node states while resolving parents.
const (
	oaUnknown = iota
	oaVisiting
	oaUsable
	oaBroken
)

// oaUsable reports whether node i and all its ancestors are present and
// good. A parent chain that loops is broken.
func (x *Extractor) oaUsable(i int) bool {
	switch x.oaState[i] {
	case oaUsable:
		return true
	case oaBroken, oaVisiting:
		return false
	}
	x.oaState[i] = oaVisiting
	n := &x.nodes[i]
	ok := n.bad == nil && (n.parent == -1 || (n.parent >= 0 && x.oaUsable(n.parent)))
	x.oaState[i] = oaBroken
	if ok {
		x.oaState[i] = oaUsable
	}
	return ok
}

// oaPath puts the conversation from the root to node i in x.msgs.
func (x *Extractor) oaPath(i int) {
	x.msgs = x.msgs[:0]
	x.users = x.users[:0]
	for p := i; p >= 0; p = x.nodes[p].parent {
		x.msgs = append(x.msgs, message{role: x.nodes[p].role, content: x.nodes[p].content})
	}
	for a, b := 0, len(x.msgs)-1; a < b; a, b = a+1, b-1 {
		x.msgs[a], x.msgs[b] = x.msgs[b], x.msgs[a]
	}
	for k, m := range x.msgs {
		if m.role == roleUser {
			x.users = append(x.users, k)
		}
	}
}

// heldTree is the flat export's tree being collected.
type heldTree struct {
	file  string // the input it is read from
	tree  []byte // its message_tree_id, nil when the messages carry none
	nodes []oaNode
	ids   map[string]int
}

// hold keeps a message of a flat export until its tree is complete, and
// returns the candidates of the tree before it if this message starts
// another one.
func (x *Extractor) hold(rec jsonl.RawLine) {
	tree := x.f.MessageTreeID
	if h := &x.held; len(h.nodes) > 0 && !bytes.Equal(tree, h.tree) {
		x.flushHeld()
		x.parse(rec.Data, rec.Built) // it parsed a moment ago
	}
	h := &x.held
	if len(h.nodes) >= x.opts.MaxHeld {
		x.addCandidate(Candidate{Reason: ReasonMaxHeld,
			Detail: "the message tree has more than --max-held " + strconv.Itoa(x.opts.MaxHeld) + " messages (messages without a message_tree_id count as one tree)"})
		return
	}
	kept := rec
	kept.Data = bytes.Clone(rec.Data)
	var m oaMessage
	if _, err := json.Parse(kept.Data, &m, parseFlags); err != nil {
		x.addCandidate(Candidate{Reason: ReasonMalformedJSON, Detail: jsonProblem(err)})
		return
	}
	// Tokens alias kept.Data, or own memory when re-encoded: the arena is
	// reused by the next record.
	var own []byte
	n, bad := x.oaNode(&m, &own)
	if bad == nil && n.id == nil {
		bad = reject(ReasonBadID, "a message of a flat export needs a message_id")
	}
	if bad == nil {
		if _, dup := h.ids[string(n.id)]; dup {
			bad = reject(ReasonUnknownLayout, "message_id %s appears twice in its tree", n.id)
		}
	}
	if bad != nil {
		// Rejected now; messages below it are rejected as missing_parent.
		x.addCandidate(Candidate{Reason: bad.reason, Detail: bad.detail})
		return
	}
	n.held = &kept
	if h.ids == nil {
		h.ids = map[string]int{}
	}
	if len(h.nodes) == 0 {
		h.file, h.tree = rec.File, nil
		if present(m.MessageTreeID) {
			h.tree = m.MessageTreeID
		}
	}
	h.ids[string(n.id)] = len(h.nodes)
	h.nodes = append(h.nodes, n)
}

// flushHeld turns the held tree into candidates and lets it go. The
// record being converted must be parsed again after it.
func (x *Extractor) flushHeld() {
	h := &x.held
	if len(h.nodes) == 0 {
		return
	}
	for i := range h.nodes {
		n := &h.nodes[i]
		n.parent = -1
		if n.parentID != nil {
			p, ok := h.ids[string(n.parentID)]
			if !ok {
				p = -2
			}
			n.parent = p
		}
	}
	x.nodes = h.nodes
	x.oaCandidates(true)
	x.nodes = nil
	*h = heldTree{}
	x.resetRecord() // the held records were parsed in turn
}

// Flush returns the candidates of the messages still held at the end of
// the input (flat OpenAssistant exports). Call it once after the last
// record.
func (x *Extractor) Flush() []Candidate {
	x.reset()
	x.flushHeld()
	return x.cands
}
