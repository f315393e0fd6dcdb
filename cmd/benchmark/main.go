// Command benchmark is the measuring half of `just bench`; see lib/benchmark.
package main

import (
	"tokenmill/lib/benchmark"
	"tokenmill/lib/cli"
)

func main() { cli.Main("benchmark", benchmark.Description, &benchmark.Command{}) }
