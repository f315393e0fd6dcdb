// Command extract pulls chat prompts out of instruction datasets; see
// lib/extract.
package main

import (
	"tokenmill/lib/cli"
	"tokenmill/lib/extract"
)

func main() { cli.Main("extract", extract.Description, &extract.Command{}) }
