// Command infer generates answers to prompt records on a fleet of
// OpenAI-compatible or SGLang servers.
package main

import (
	"tokenmill/lib/cli"
	"tokenmill/lib/infer"
)

func main() { cli.Main("infer", infer.Description, &infer.Command{}) }
