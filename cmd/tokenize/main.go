// Command tokenize renders and tokenizes records with a model's own chat
// template and tokenizer.
package main

import (
	"tokenmill/lib/cli"
	"tokenmill/lib/tokenize"
)

func main() { cli.Main("tokenize", tokenize.Description, &tokenize.Command{}) }
