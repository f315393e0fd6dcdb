// Command llmsim serves a simulated SGLang fleet for tests, demos and
// benchmarks; see internal/llmsim.
package main

import (
	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
)

func main() { cli.Main("llmsim", llmsim.Description, &llmsim.Command{}) }
