package record

import "testing"

var scanLines = []string{
	`{}`, ` {"a":1} `, `{"a":[1,-0.5e+3,true,false,null,{"b":"c\"\\\/\b\f\n\r\t\u00e9"}],"d":{}}`,
	`{"a":1,}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":"x` + "\x01" + `"}`, `{"a":"\x"}`, `{"a":"\u12g4"}`,
	`{"a":1} {}`, `[1]`, `{"a\u0062":1}`, `{"a" 1}`, `{"a":tru}`, `{"a":[1 2]}`, `{"a":"unterminated}`,
	`{"long":"` + "0123456789abcdef0123456789abcdef\\n0123456789abcdef\\\"" + `"}`,
}

func TestObjectScan(t *testing.T) {
	valid := map[string]bool{`{}`: true, ` {"a":1} `: true, scanLines[2]: true, scanLines[len(scanLines)-1]: true}
	for _, l := range scanLines {
		checkWalk(t, []byte(l))
		var o Object
		o.Scan([]byte(l))
		for _, _, ok := o.Next(); ok; _, _, ok = o.Next() {
		}
		if o.Valid() != valid[l] {
			t.Errorf("%s: Valid %v, want %v", l, o.Valid(), valid[l])
		}
	}
}
