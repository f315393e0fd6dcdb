// Package refdoc holds the reference pages, cmd/<tool>/README.md, to the
// tools' --help, the one reference of their flags: its test builds every
// tool, renders each page from the help the tool prints (and its
// commands' help), and fails on a page that differs. `go test
// ./internal/refdoc -update` (just refdoc) writes the pages again.
package refdoc
