// Command benchsuite is the benchmark harness behind `just bench`; see internal/benchsuite.
package main

import (
	"tokenmill/internal/benchsuite"
	"tokenmill/lib/cli"
)

func main() { cli.Main("benchsuite", benchsuite.Description, &benchsuite.Command{}) }
