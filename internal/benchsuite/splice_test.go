package benchsuite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/testbin"
)

// golden compares got with testdata/<name>, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	testbin.CheckGolden(t, filepath.Join("testdata", name), got)
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSplice(t *testing.T) {
	doc := readTestdata(t, "splice/doc.md")
	for _, tc := range []struct {
		name, section string
		doc           []byte
	}{
		{"replace", "dedup", doc},          // in place of the old dedup part
		{"between", "filter", doc},         // after shard, before the fleet: the next heading the order names that is there
		{"fence", "inflight", doc},         // the heading inside the fleet's code block is no heading
		{"before-last", "growth", doc},     // before How to reproduce, its trailing blank lines dropped
		{"unknown", "unknown", doc},        // a heading no order names goes at the end
		{"empty", "dedup", nil},            // a report written from nothing
		{"blank", "dedup", []byte("\n\n")}, // as empty
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec := readTestdata(t, "splice/"+tc.section+".section.md")
			got, err := Splice(tc.doc, sec, docOrder())
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "splice/"+tc.name+".golden.md", got)
			// Splicing the same section again changes nothing.
			again, err := Splice(got, sec, docOrder())
			if err != nil || string(again) != string(got) {
				t.Errorf("a second splice changed the report (%v):\n%s", err, again)
			}
		})
	}
}

func TestSpliceRefuses(t *testing.T) {
	doc := readTestdata(t, "splice/doc.md")
	twice := append(append([]byte{}, doc...), []byte("\n## dedup\n\nagain\n")...)
	for _, tc := range []struct {
		name          string
		doc, section  []byte
		wantInMessage string
	}{
		{"a heading twice", twice, readTestdata(t, "splice/dedup.section.md"), "twice"},
		{"no heading", doc, []byte("| a table |\n"), "heading"},
		{"a title, not a section", doc, []byte("# Benchmarks\n"), "heading"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Splice(tc.doc, tc.section, docOrder())
			if err == nil || !strings.Contains(err.Error(), tc.wantInMessage) || got != nil {
				t.Fatalf("got %v and %d bytes, want a refusal naming %q", err, len(got), tc.wantInMessage)
			}
		})
	}
}

// TestSpliceRoundTrip splices every part of the committed BENCHMARKS.md
// back into it: the report comes out byte for byte as it was, so a section
// measured alone disturbs nothing around it.
func TestSpliceRoundTrip(t *testing.T) {
	doc, err := os.ReadFile("../../BENCHMARKS.md")
	if err != nil {
		t.Skipf("no BENCHMARKS.md: %v", err)
	}
	parts := splitParts(string(doc))
	if len(parts) < 10 {
		t.Fatalf("BENCHMARKS.md cut into %d parts", len(parts))
	}
	got := doc
	for _, p := range parts {
		if !strings.HasPrefix(headingOf(p), "## ") {
			continue
		}
		if got, err = Splice(got, []byte(p), docOrder()); err != nil {
			t.Fatalf("%s: %v", headingOf(p), err)
		}
	}
	if normalise(string(got)) != normalise(string(doc)) {
		t.Fatalf("splicing BENCHMARKS.md's own parts changed it:\n%s", got)
	}
	// Every heading of the report is one the harness knows.
	order := docOrder()
	for _, p := range parts {
		if hd := headingOf(p); strings.HasPrefix(hd, "## ") && !contains(order, hd) {
			t.Errorf("BENCHMARKS.md has %q, which no section of the harness writes", hd)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
