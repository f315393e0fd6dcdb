package stats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// ReasonBadCluster is the reject reason of a --clusters line that is JSON
// but not a dedup --near clusters line.
const ReasonBadCluster = "bad_cluster"

// ClusterReport summarises a dedup --near clusters file: one line per
// near-duplicate dropped, naming the kept prompt it is a copy of.
type ClusterReport struct {
	Schema string `json:"schema"`
	// Dropped is the number of near-duplicates; Kept the number of kept
	// prompts that have at least one.
	Dropped int64 `json:"dropped"`
	Kept    int64 `json:"kept_with_copies"`
	// Histogram counts the similarities in bins of 0.05 (the last, 0.95
	// to 1, includes 1); empty bins are left out.
	Histogram []SimilarityBin `json:"histogram"`
	// Largest are the kept prompts with the most copies, most first (ties
	// in the order the file first names them).
	Largest []Cluster `json:"largest"`
}

// SimilarityBin is one bin of the similarity histogram: From <= s < To.
type SimilarityBin struct {
	From  float64 `json:"from"`
	To    float64 `json:"to"`
	Count int64   `json:"count"`
}

// Cluster is a kept prompt and its dropped copies.
type Cluster struct {
	KeptID         json.RawMessage `json:"kept_id"`
	Copies         int64           `json:"copies"`
	MeanSimilarity float64         `json:"mean_similarity"`
	MinSimilarity  float64         `json:"min_similarity"`
}

const clusterBins = 20

// clusterLine is what dedup --near writes to --clusters.
type clusterLine struct {
	ID         json.RawMessage `json:"id"`
	DupOf      json.RawMessage `json:"dup_of"`
	Similarity *float64        `json:"similarity"`
}

// runClusters reads the --clusters file and writes its summary; a line
// that is not a clusters line is rejected (exit 3) and the rest counted.
func runClusters(ctx context.Context, env *cli.Env, cfg Config) error {
	outs, err := jsonl.CheckOutputs(env.Stdout, jsonl.InputsFrom([]string{cfg.Clusters}, env.Stdin),
		[]jsonl.Output{{Flag: "report", Path: "-", Kept: true}, {Flag: "--rejects", Path: cfg.Rejects}}, cfg.Force)
	if err != nil {
		return err
	}
	if err := outs.Open(); err != nil {
		return err
	}
	defer outs.Abort()
	rejects := outs.Rejects(env)
	r, err := readClusters(jsonl.NewReader(ctx, env, []string{cfg.Clusters}, env.Stdin, jsonl.Options{}), rejects, cfg.Top)
	if err == nil && cli.Interrupted(ctx) {
		err = context.Cause(ctx)
	}
	if err != nil {
		return err
	}
	if cfg.JSON {
		out, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		if _, err := env.Stdout.Write(append(out, '\n')); err != nil {
			return err
		}
	} else if err := r.WriteText(env.Stdout); err != nil {
		return err
	}
	if err := outs.Close(); err != nil {
		return err
	}
	return rejects.Err()
}

// readClusters summarises the clusters lines of in, listing the top
// largest clusters.
func readClusters(in *jsonl.Reader, rejects *jsonl.Rejects, top int) (*ClusterReport, error) {
	defer in.Close()
	r := &ClusterReport{Schema: "tokenmill.stats.clusters/v1", Histogram: []SimilarityBin{}, Largest: []Cluster{}}
	var bins [clusterBins]int64
	type acc struct {
		first       int
		copies      int64
		sum, minSim float64
	}
	byKept := map[string]*acc{}
	for {
		rec, err := in.Next()
		if err == io.EOF {
			break
		}
		var ie *jsonl.InputError
		if errors.As(err, &ie) {
			if err := rejects.Input(err); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		var l clusterLine
		if err := json.Unmarshal(rec.Data, &l); err != nil {
			if err := rejects.Add(rec, jsonl.ReasonMalformedJSON, err.Error()); err != nil {
				return nil, err
			}
			continue
		}
		if l.Similarity == nil || !(*l.Similarity >= 0 && *l.Similarity <= 1) || len(l.DupOf) == 0 {
			if err := rejects.Add(rec, ReasonBadCluster, "want id, dup_of and a similarity between 0 and 1"); err != nil {
				return nil, err
			}
			continue
		}
		s := *l.Similarity
		r.Dropped++
		bins[min(int(s*clusterBins+1e-9), clusterBins-1)]++
		key := string(l.DupOf)
		a := byKept[key]
		if a == nil {
			a = &acc{first: len(byKept), minSim: 1}
			byKept[key] = a
		}
		a.copies++
		a.sum += s
		a.minSim = math.Min(a.minSim, s)
	}
	for i, n := range bins {
		if n > 0 {
			r.Histogram = append(r.Histogram, SimilarityBin{From: float64(i) / clusterBins, To: float64(i+1) / clusterBins, Count: n})
		}
	}
	r.Kept = int64(len(byKept))
	keys := make([]string, 0, len(byKept))
	for k := range byKept {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int {
		a, b := byKept[x], byKept[y]
		if a.copies != b.copies {
			return int(b.copies - a.copies)
		}
		return a.first - b.first
	})
	for _, k := range keys[:min(top, len(keys))] {
		a := byKept[k]
		r.Largest = append(r.Largest, Cluster{KeptID: json.RawMessage(k), Copies: a.copies, MeanSimilarity: a.sum / float64(a.copies), MinSimilarity: a.minSim})
	}
	return r, nil
}

// WriteText writes the summary as a short table.
func (r *ClusterReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "near-duplicates dropped  %s\nkept prompts with copies %s\n", num(r.Dropped), num(r.Kept))
	if len(r.Histogram) > 0 {
		b.WriteString("\nsimilarity   dropped  share\n")
		for _, h := range r.Histogram {
			closing := ")"
			if h.To == 1 {
				closing = "]"
			}
			fmt.Fprintf(&b, "[%.2f,%.2f%s %8s  %5.1f%%\n", h.From, h.To, closing, num(h.Count), 100*float64(h.Count)/float64(r.Dropped))
		}
	}
	if len(r.Largest) > 0 {
		b.WriteString("\nlargest clusters (kept id: copies, mean and least similarity)\n")
		for _, c := range r.Largest {
			fmt.Fprintf(&b, "  %s: %s, %.3f, %.3f\n", cli.Plain(string(c.KeptID)), num(c.Copies), c.MeanSimilarity, c.MinSimilarity)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
