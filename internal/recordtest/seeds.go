// Package recordtest holds JSON for the tests of the walk of records
// (record.Walker) and of the stages that read records with it: the
// walker's differential fuzz test and theirs start from the same lines.
package recordtest

import "strings"

// Values are JSON texts, valid and not, at the edges of the grammar:
// every kind of value, white space, strings with escapes, control
// characters and invalid UTF-8, numbers and literals cut short, commas
// out of place, trailing data.
var Values = []string{
	`{}`, ` { } `, `[]`, `[1,2,3]`, `{"a":1,}`, `[1,]`, `{,}`, `{"a" 1}`, `{"a":}`, `"x"`, `"\u00e9"`, `"\u00g9"`, `"\x"`,
	`"a` + "\x01" + `b"`, "\"\xff\xfe\"", "\"a\x7fb\"", `"\"`, `"\\"`, `"ab\`, `"abcdefghijklmnop\"qrstuvwxyz"`,
	`0`, `-0`, `01`, `-`, `1.`, `1.5`, `1e`, `1e+`, `1E-7`, `.5`, `1.5e3x`, `true`, `tru`, `truex`, `nul`, `null `, `false`,
	"\t{\"a\":[true,false,null,{\"b\":\"c\"}]}\r\n", `{"a":1}{}`, `{"a":1} x`, `{"output":{"text":"a"}}`, `{"output":{"text":"a\nb"},"output":null}`,
	`{"a":"` + strings.Repeat("long text without escapes ", 10) + `"}`, `{"a":"` + strings.Repeat("é\\n", 20) + `"}`,
	strings.Repeat("[", 50) + strings.Repeat("]", 50), "\f{}", "{}\v", "{\"\u00a0\":1}",
}

// Records are records and lists as the stages read them, with the keys
// a field reader must match exactly, repeat, or leave to a decoder
// (escaped, in other case), and the faults a record may hold.
var Records = []string{
	`{"id":"a","conversations":[{"from":"human","value":"hi"}]}`,
	`{ "id" : 7 , "messages" : [ { "role" : "user" , "content" : "x\n\"y\"\\ \u00e9\ud83d\ude00" } ] } `,
	`{"id":"a","id":"b"}`,
	`{"ID":"a"}`, `{"Id":1,"id":2}`, `{"i\u0064":"a"}`, `{"\u0069d":"x"}`,
	`{"id":"a"} trailing`, `{"id":"a"}{"id":"b"}`, `{"id":01}`, `{"id":-0.5e+3}`, `{"id":1.}`, `{"id":-}`,
	`{"id":tru}`, `{"id":true,"x":false,"y":null,"z":[1,2,{"a":[]}],"w":{}}`, `{"id":"\x"}`, `{"id":"\u12"}`,
	"{\"id\":\"a\tb\"}", "{\"id\":\"caf\xe9\"}", "{\"id\":\"\xff\xfe\"}", `{"text":"函数 数据 模型"}`,
	`{"id":"a",}`, `{,"id":"a"}`, `{"id" "a"}`, `{"id":"a"`, `{"id":"a`, `{"id":["a",]}`, `{"id":[,]}`,
	`{"conversations":[null,{"from":"human","value":"x"}]}`, `{"conversations":[{"FROM":"human","value":"x"}]}`,
	`{"conversations":[{"from":"human","from":"gpt","value":"x"}]}`, `{"conversations":[1,2]}`, `{"conversations":[]}`,
	`{"conversations":[{"from":"human","value":"x","extra":{"deep":[[[["y"]]]]}}]}`,
	`{"label":{"ability_en":["text generation"],"cate_ability_en":["writing"]},"langdetect":"en","source":"s"}`,
	`{}`, `{"a":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`,
	"{\"id\":\"\u2028\"}", `{"id":"` + strings.Repeat("abcdefgh", 40) + `\n` + strings.Repeat("ü", 30) + `"}`,
}
