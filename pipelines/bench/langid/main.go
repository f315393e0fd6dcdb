// Command langid compares the two Go language identifiers considered for
// filter's lang check, lingua-go (low-accuracy mode) and whatlanggo, on a
// labelled sample: the English answers of the real datasets, the Chinese
// ones of v1_sft, and paragraphs written in 12 other languages. It prints
// each one's accuracy per language and speed, on whole texts and on their
// first 256 and 512 bytes. Binary sizes: go build ./size/... and compare.
//
//	cd pipelines/bench/langid
//	go run . -real ../../../../shared/data/real -samples ../../../testdata/quality/lang-samples.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/abadojack/whatlanggo"
	"github.com/pemistahl/lingua-go"
)

type sample struct{ lang, text, src string }

var (
	real    = flag.String("real", "../../../../shared/data/real", "the real datasets")
	written = flag.String("samples", "../../../testdata/quality/lang-samples.jsonl", "the written samples")
)

func asciiLetters(s string) float64 {
	var a, l int
	for _, r := range s {
		if unicode.IsLetter(r) {
			l++
			if r < 128 {
				a++
			}
		}
	}
	if l == 0 {
		return 0
	}
	return float64(a) / float64(l)
}

var cjk = regexp.MustCompile(`\p{Han}`)

func load() []sample {
	var out []sample
	var alp []struct{ Instruction, Input, Output string }
	b, err := os.ReadFile(filepath.Join(*real, "alpaca_en_demo.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "langid:", err, "(set -real)")
		os.Exit(1)
	}
	json.Unmarshal(b, &alp)
	trans := regexp.MustCompile(`(?i)translat|spanish|french|german|chinese|japanese|italian|language`)
	for _, a := range alp {
		if len(a.Output) >= 100 && !trans.MatchString(a.Instruction+a.Input) && asciiLetters(a.Output) > 0.99 {
			out = append(out, sample{"en", a.Output, "alpaca"})
		}
	}
	var fc []struct {
		Conversations []struct{ From, Value string }
	}
	b, _ = os.ReadFile(filepath.Join(*real, "fastchat_dummy_conversation.json"))
	json.Unmarshal(b, &fc)
	seen := map[string]bool{}
	for _, c := range fc {
		for _, t := range c.Conversations {
			if t.From == "gpt" && len(t.Value) >= 100 && !seen[t.Value] && asciiLetters(t.Value) > 0.99 {
				seen[t.Value] = true
				out = append(out, sample{"en", t.Value, "fastchat"})
			}
		}
	}
	f := mustOpen(filepath.Join(*real, "v1_sft_demo.jsonl"))
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var v struct {
			Messages []struct {
				Role    string
				Content []struct{ Value string }
			}
		}
		json.Unmarshal(sc.Bytes(), &v)
		for _, m := range v.Messages {
			var t string
			for _, p := range m.Content {
				t += p.Value
			}
			if m.Role == "assistant" && len([]rune(t)) >= 30 && len(cjk.FindAllString(t, -1)) > len([]rune(t))/3 && !seen[t] {
				seen[t] = true
				out = append(out, sample{"zh", t, "v1_sft"})
			}
		}
	}
	f = mustOpen(*written)
	sc = bufio.NewScanner(f)
	for sc.Scan() {
		var v struct{ Lang, Text string }
		json.Unmarshal(sc.Bytes(), &v)
		out = append(out, sample{v.Lang, v.Text, "written"})
	}
	return out
}

// mustOpen opens path, or ends the run saying why.
func mustOpen(path string) *os.File {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "langid:", err)
		os.Exit(1)
	}
	return f
}

var codes = []string{"en", "zh", "ja", "ko", "fr", "de", "es", "pt", "it", "ru", "ar", "nl", "tr", "vi"}

func main() {
	flag.Parse()
	samples := load()
	if len(samples) == 0 {
		fmt.Fprintln(os.Stderr, "langid: no samples: check -real and -samples")
		os.Exit(1)
	}
	counts := map[string]int{}
	var bytes int
	for _, s := range samples {
		counts[s.lang+"/"+s.src]++
		bytes += len(s.text)
	}
	fmt.Println("samples", len(samples), "bytes", bytes, counts)

	det := loadLingua()
	opts := whatlangOptions(samples[0].text)
	lingua14 := func(s string) string {
		l, ok := det.DetectLanguageOf(s)
		if !ok {
			return "?"
		}
		return strings.ToLower(l.IsoCode639_1().String())
	}
	whatlang14 := func(s string) string { return whatlanggo.DetectWithOptions(s, opts).Lang.Iso6391() }
	eval(samples, bytes, "lingua low-accuracy 14 langs", lingua14)
	eval(samples, bytes, "whatlanggo 14 langs", whatlang14)
	eval(samples, bytes, "whatlanggo all", func(s string) string { return whatlanggo.Detect(s).Lang.Iso6391() })
	for _, n := range []int{256, 512} {
		eval(samples, bytes, fmt.Sprintf("lingua low-accuracy 14 langs, first %d bytes", n), func(s string) string { return lingua14(cut(s, n)) })
		eval(samples, bytes, fmt.Sprintf("whatlanggo 14 langs, first %d bytes", n), func(s string) string { return whatlang14(cut(s, n)) })
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("sys %.1f MB\n", float64(ms.Sys)/1e6)
}

// heap is the live heap after a collection.
func heap() float64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc)
}

// loadLingua builds lingua's detector for the 14 languages, saying how
// long it took and the heap its models take.
func loadLingua() lingua.LanguageDetector {
	before := heap()
	var langs []lingua.Language
	for _, c := range codes {
		langs = append(langs, lingua.GetLanguageFromIsoCode639_1(lingua.GetIsoCode639_1FromValue(c)))
	}
	t0 := time.Now()
	det := lingua.NewLanguageDetectorBuilder().FromLanguages(langs...).WithLowAccuracyMode().WithPreloadedLanguageModels().Build()
	load := time.Since(t0)
	fmt.Printf("lingua load %v heap %.1f MB\n", load, (heap()-before)/1e6)
	return det
}

// whatlangOptions is whatlanggo limited to the 14 languages, after
// saying what its first use (of text) takes of the heap.
func whatlangOptions(text string) whatlanggo.Options {
	before := heap()
	whatlanggo.Detect(text)
	fmt.Printf("whatlanggo heap after its first use: %+.1f MB (its profiles are package variables, in the binary)\n", (heap()-before)/1e6)
	wl := map[whatlanggo.Lang]bool{}
	for l := range whatlanggo.Langs {
		for _, c := range codes {
			if l.Iso6391() == c {
				wl[l] = true
			}
		}
	}
	fmt.Println("whitelist", len(wl))
	return whatlanggo.Options{Whitelist: wl}
}

// eval runs f over the samples five times and prints its accuracy per
// language (from the first pass) and its speed (over all five).
func eval(samples []sample, bytes int, name string, f func(string) string) {
	type res struct {
		ok, n int
		wrong map[string]int
	}
	per := map[string]*res{}
	start := time.Now()
	const reps = 5
	for r := 0; r < reps; r++ {
		for _, s := range samples {
			got := f(s.text)
			if r > 0 {
				continue
			}
			p := per[s.lang]
			if p == nil {
				p = &res{wrong: map[string]int{}}
				per[s.lang] = p
			}
			p.n++
			if got == s.lang {
				p.ok++
			} else {
				p.wrong[got]++
			}
		}
	}
	el := time.Since(start)
	var keys []string
	tot, ok := 0, 0
	for k, p := range per {
		keys = append(keys, k)
		tot += p.n
		ok += p.ok
	}
	sort.Strings(keys)
	fmt.Printf("%s: accuracy %d/%d = %.1f%%, %.2f MB/s, %.1f µs/sample\n", name, ok, tot, 100*float64(ok)/float64(tot),
		float64(bytes*reps)/el.Seconds()/1e6, el.Seconds()*1e6/float64(len(samples)*reps))
	var parts []string
	for _, k := range keys {
		p := per[k]
		parts = append(parts, fmt.Sprintf("%s %d/%d %v", k, p.ok, p.n, p.wrong))
	}
	fmt.Println("  ", strings.Join(parts, "; "))
}

// cut is s's first n bytes, cut back to a whole character.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}
