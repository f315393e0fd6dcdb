package cli

import (
	"regexp"
	"strconv"
	"strings"
)

// Plain rewrites what a JSON decoder says about a bad record in the
// record's terms, so that no message a person reads names a Go type or a
// decoder's inner workings:
//
//	json: cannot unmarshal "\"x\"}" into Go struct field dedup.rawPrompt.messages of type []dedup.rawMessage
//	  -> "messages" should be a list, not a string
//	json: invalid character 'i' looking for beginning of value
//	  -> not valid JSON (unexpected 'i')
//
// Any other text is returned as it is.
func Plain(msg string) string {
	if !strings.Contains(msg, "json: ") && !strings.Contains(msg, "Go value") && !strings.Contains(msg, "Go struct") &&
		!strings.Contains(msg, "looking for beginning") && !strings.Contains(msg, "invalid token") && !strings.Contains(msg, "end of JSON input") {
		return msg
	}
	msg = jsonPrefixRE.ReplaceAllString(msg, "$1")
	msg = unmarshalRE.ReplaceAllStringFunc(msg, func(m string) string {
		g := unmarshalRE.FindStringSubmatch(m)
		value, field, typ := valueKind(g[1]), jsonPath(g[2]), typeKind(g[3])
		switch {
		case field != "" && typ != "":
			return strconv.Quote(field) + " should be " + typ + ", not " + value
		case field != "":
			return strconv.Quote(field) + " cannot be " + value
		case typ != "":
			return value + " where " + typ + " is expected"
		}
		return value + " of the wrong kind"
	})
	msg = badCharRE.ReplaceAllString(msg, "not valid JSON (unexpected $1)")
	msg = badTokenRE.ReplaceAllStringFunc(msg, func(m string) string {
		near := badTokenRE.FindStringSubmatch(m)[1]
		if len(near) > 20 {
			near = near[:20]
		}
		return "not valid JSON (near " + strconv.Quote(near) + ")"
	})
	msg = strings.ReplaceAll(msg, "unexpected end of JSON input", "not valid JSON (it ends too early)")
	return msg
}

var (
	// jsonPrefixRE is the decoder's "json: " prefix, never a file name's
	// ending such as "data.json: no such file".
	jsonPrefixRE = regexp.MustCompile(`(^|\s)json: `)
	// segmentio/encoding quotes the input text; encoding/json names its kind.
	unmarshalRE = regexp.MustCompile(`cannot unmarshal ("(?:[^"\\]|\\.)*"|\S+) into Go (?:struct field (\S+)|value) of type (\S+)`)
	badCharRE   = regexp.MustCompile(`invalid character ('[^']*'|\S+) (?:looking for beginning of (?:object key string|value)|after [a-z ]+|in [a-z ]+)`)
	badTokenRE  = regexp.MustCompile(`expected '[^']*' but found invalid token: (.*)$`)
)

// valueKind names what the input held: encoding/json says "string",
// segmentio/encoding quotes the text itself.
func valueKind(s string) string {
	if t, err := strconv.Unquote(s); err == nil {
		s = strings.TrimSpace(t)
		if s == "" {
			return "nothing"
		}
		switch c := s[0]; {
		case c == '"':
			return "a string"
		case c == '{':
			return "an object"
		case c == '[':
			return "a list"
		case c == 't' || c == 'f':
			return "true or false"
		case c == 'n':
			return "null"
		case c == '-' || c >= '0' && c <= '9':
			return "a number"
		}
		return "something else"
	}
	switch s {
	case "array":
		return "a list"
	case "object":
		return "an object"
	case "bool":
		return "true or false"
	}
	return "a " + s
}

// typeKind is what a Go type takes, in JSON's words; "" for a type of
// its own whose shape the name does not tell.
func typeKind(t string) string {
	t = strings.TrimPrefix(t, "*")
	switch {
	case strings.HasPrefix(t, "[]") || strings.HasPrefix(t, "["):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "an object"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case strings.HasPrefix(t, "struct") || strings.Contains(t, "."):
		return ""
	}
	return ""
}

// jsonPath is the record's field within a decoder's "Type.field.0.name":
// the trailing segments that are JSON field names or indexes (lower case,
// digits, '_'), not Go names.
func jsonPath(s string) string {
	segs := strings.Split(s, ".")
	i := len(segs)
	for i > 0 && fieldNameRE.MatchString(segs[i-1]) {
		i--
	}
	return strings.Join(segs[i:], ".")
}

var fieldNameRE = regexp.MustCompile(`^[a-z0-9_]+$`)
