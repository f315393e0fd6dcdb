package record

// Object and Array are the Walker's members and elements one at a time,
// for the stages that read a few fields of a record and pass the line on
// byte for byte (dedup, shard, merge, stats, extract, quality). With Scan
// an Object checks the whole line against JSON's grammar in one pass,
// without building anything, and hands the caller the raw spans of the
// top-level members. Whatever it does not settle itself (an escaped key,
// deep nesting, anything malformed) it reports as not valid, and the
// caller takes its full decoder, which gives the exact reason: so the fast
// path never accepts a line the decoder would refuse, and never has to
// word an error.

// scanDepth is how deep Scan nests before it leaves a line to the full
// decoder (which checks MaxDepth).
const scanDepth = 64

// container is what Object and Array share: where the walk is in b, and
// its state.
type container struct {
	w     *Walker
	b     []byte
	i     int
	depth int // how deep a member's value may nest
	state int8
	whole bool // b is the container alone, white space around it allowed
}

// The states of a container's walk.
const (
	atOpen    = iota // the first member is next
	afterItem        // a member has been walked
	done             // the close has been walked: valid
	waiting          // a member's value is the caller's to walk; Resume goes on
	failed    = -1
)

// advance walks from the open bracket or the end of the last member to
// the start of the next member, returning its index; ok is false at the
// close or a fault (then Valid tells which). Encoders write a comma right
// after a value: Member and Element take that case without a call.
func (c *container) advance(open, close byte) (i int, ok bool) {
	b, i := c.b, c.i
	switch c.state {
	case atOpen:
		if c.whole {
			i = SkipSpace(b, i)
		}
		if i >= len(b) || b[i] != open || c.depth < 0 {
			return c.fail()
		}
		if i = SkipSpace(b, i+1); i < len(b) && b[i] == close {
			return c.end(i + 1)
		}
	case afterItem:
		var more bool
		if i, more = next(b, i, close); !more {
			if i < 0 {
				return c.fail()
			}
			return c.end(i)
		}
	case waiting: // Resume was not called: the walk cannot go on
		return c.fail()
	default:
		return 0, false
	}
	c.state = waiting
	return i, true
}

func (c *container) fail() (int, bool) {
	c.state = failed
	return 0, false
}

func (c *container) end(i int) (int, bool) {
	c.i, c.state = i, done
	if c.whole && SkipSpace(c.b, i) != len(c.b) {
		c.state = failed
	}
	return 0, false
}

// ValueEnd returns the index just past the member's value at b[at] (that
// the walk goes on to check, or trusts), or below 0 if there is none.
func (c *container) ValueEnd(at int) int { return c.w.ValueEnd(c.b, at, c.depth) }

// Depth is how deep a member's value may nest, for a caller walking it
// itself (Walker.Object, Walker.Array, Walker.ValueEnd).
func (c *container) Depth() int { return c.depth }

// Resume goes on after the member the caller walked itself, which ends
// at end (below 0: it was not a value, and the walk stops, not valid).
func (c *container) Resume(end int) {
	if c.state != waiting {
		return
	}
	if end < 0 {
		c.state = failed
		return
	}
	c.i, c.state = end, afterItem
}

// Valid reports, once the walk has stopped, whether it reached the close
// (and, for a whole container, nothing but white space followed).
func (c *container) Valid() bool { return c.state == done }

// End is the index just past the close, once Valid.
func (c *container) End() int { return c.i }

// Object walks the members of one JSON object: with Scan checking a whole
// line as it goes, or from Walker.Object within a larger text.
//
//	var o record.Object
//	o.Scan(line)
//	for key, value, ok := o.Next(); ok; key, value, ok = o.Next() { ... }
//	if !o.Valid() { ... the full decoder's path ... }
type Object struct{ container }

// Scan starts walking b, one object with white space around it allowed,
// checking it whole.
func (o *Object) Scan(b []byte) {
	*o = Object{container{w: &checking, b: b, depth: scanDepth - 1, whole: true}}
}

// Object walks the object at b[i], which may nest depth arrays and
// objects, itself included.
func (w *Walker) Object(b []byte, i, depth int) Object {
	return Object{container{w: w, b: b, i: i, depth: depth - 1}}
}

// Member returns the next member's key (with its quotes), what the key
// holds, and where its value starts, which the caller walks (ValueEnd or
// its own reader) and passes the index past to Resume. ok is false at the
// end or at the first fault: then Valid tells which.
func (o *Object) Member() (quoted []byte, kind StringKind, at int, ok bool) {
	i := o.i
	if o.state == afterItem && i < len(o.b) && o.b[i] == ',' {
		i, o.state = SkipSpace(o.b, i+1), waiting
	} else if i, ok = o.advance('{', '}'); !ok {
		return nil, 0, 0, false
	}
	if quoted, kind, at = o.w.key(o.b, i); quoted == nil {
		o.state = failed
		return nil, 0, 0, false
	}
	return quoted, kind, at, true
}

// NextKey is Member for a caller that matches keys as they are written:
// it returns the key without its quotes, and an escaped key stops the
// walk, not valid.
func (o *Object) NextKey() (key []byte, at int, ok bool) {
	quoted, kind, at, ok := o.Member()
	if !ok {
		return nil, 0, false
	}
	if kind&Escaped != 0 {
		o.state = failed
		return nil, 0, false
	}
	return quoted[1 : len(quoted)-1], at, true
}

// Next returns the next member: its key (the bytes between its quotes)
// and its raw value. ok is false at the end or at the first fault (an
// escaped key among them): then Valid tells which.
func (o *Object) Next() (key, value []byte, ok bool) {
	quoted, kind, at, ok := o.Member()
	if !ok || kind&Escaped != 0 {
		o.Resume(-1)
		return nil, nil, false
	}
	key = quoted[1 : len(quoted)-1]
	end := o.ValueEnd(at)
	o.Resume(end)
	if end < 0 {
		return nil, nil, false
	}
	return key, o.b[at:end], true
}

// ScanValue returns the index just past the JSON value at b[i], checked
// as Scan checks a member's value at the given depth (1 for a top-level
// member's value), or below 0.
func ScanValue(b []byte, i, depth int) int { return checking.ValueEnd(b, i, scanDepth-depth) }

// ScanString returns the index past the string at b[i] == '"' and
// whether it holds no escape, or -1, checked as Scan checks it.
func ScanString(b []byte, i int) (int, bool) {
	end, kind := checking.StringEnd(b, i)
	return end, end >= 0 && kind&Escaped == 0
}

// Array walks the elements of one JSON array, as Object its members.
type Array struct{ container }

// Walk starts walking arr, an array Scan already checked.
func (a *Array) Walk(arr []byte) {
	*a = Array{container{w: &trusting, b: arr, depth: MaxDepth - 1, whole: true}}
}

// Array walks the array at b[i], which may nest depth arrays and
// objects, itself included.
func (w *Walker) Array(b []byte, i, depth int) Array {
	return Array{container{w: w, b: b, i: i, depth: depth - 1}}
}

// Element returns where the next element starts, which the caller walks
// and passes the index past to Resume; ok is false at the end or at the
// first fault (then Valid tells which).
func (a *Array) Element() (at int, ok bool) {
	if at = a.i; a.state == afterItem && at < len(a.b) && a.b[at] == ',' {
		a.state = waiting
		return SkipSpace(a.b, at+1), true
	}
	return a.advance('[', ']')
}

// Next returns the next raw element; ok is false at the end or at the
// first fault.
func (a *Array) Next() (value []byte, ok bool) {
	at, ok := a.Element()
	if !ok {
		return nil, false
	}
	end := a.ValueEnd(at)
	a.Resume(end)
	if end < 0 {
		return nil, false
	}
	return a.b[at:end], true
}
