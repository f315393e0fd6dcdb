// Command benchsuite is the measuring half of `just bench`; see internal/benchsuite.
package main

import (
	"tokenmill/internal/benchsuite"
	"tokenmill/lib/cli"
)

func main() { cli.Main("benchsuite", benchsuite.Description, &benchsuite.Command{}) }
