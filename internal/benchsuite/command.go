// Package benchsuite is the benchmark harness behind `just bench`: it
// builds the tools, makes the data, times each tokenmill command next to
// the commands users would run instead (jq, awk, sort, split, curl, the
// OpenAI Node SDK, Python, DuckDB), takes their peak memory, drives infer
// against simulated fleets and a real Ollama server, keeps the rows, and
// writes BENCHMARKS.md from them, whole or one section at a time. It
// installs nothing: .ci/install-peers installs the peers, and a peer that
// is missing gets a row saying so.
package benchsuite
