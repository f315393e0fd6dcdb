// Command corpus generates a deterministic synthetic Infinity-Instruct
// style dataset for tests and benchmarks.
package main

import (
	"tokenmill/internal/corpus"
	"tokenmill/lib/cli"
)

func main() { cli.Main("corpus", corpus.Description, &corpus.Command{}) }
