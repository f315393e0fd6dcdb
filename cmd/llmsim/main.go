// Command llmsim serves a simulated SGLang fleet for tests, demos and
// benchmarks; see lib/llmsim.
package main

import (
	"tokenmill/lib/cli"
	"tokenmill/lib/llmsim"
)

func main() { cli.Main("llmsim", llmsim.Description, &llmsim.Command{}) }
