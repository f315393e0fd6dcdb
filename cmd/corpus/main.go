// Command corpus generates a deterministic synthetic Infinity-Instruct
// style dataset for tests and benchmarks.
package main

import (
	"tokenmill/lib/cli"
	"tokenmill/lib/corpus"
)

func main() { cli.Main("corpus", corpus.Description, &corpus.Command{}) }
