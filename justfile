# tokenmill recipes. `just` is a convenience: every recipe is one plain
# command you can run without it. Install: npm install -g rust-just

# List the recipes.
default:
    @just --list

# Build every binary into ./bin.
build:
    go build -buildvcs=auto -o bin/ ./cmd/...

# Run the tests, default tier (the README's test command).
test:
    go test ./...

# Run the tests, long tier: real servers, Slurm, chaos at CI's size, long runs (what CI runs; .ci/run also runs lint and the race detector).
test-long:
    TOKENMILL_TEST_LONG=1 go test ./...

# Regenerate the reference pages, cmd/<tool>/README.md, from each tool's --help (review the diff).
refdoc:
    go test -count=1 ./internal/refdoc -update

# Build Ollama v0.6.5 for internal/ollamaserver's tests against a real server (about 2 minutes, once).
install-ollama:
    .ci/install-ollama

# Only the pipeline scripts' end-to-end tests (GNU parallel and Slurm included where installed).
test-pipelines:
    TOKENMILL_TEST_LONG=1 go test -count=1 ./pipelines/

# The whole job on a simulated 8-server fleet (about 40 s).
demo:
    bash pipelines/demo.sh

# Write an N-record synthetic Infinity-Instruct corpus to corpus-N.jsonl.zst.
corpus N="660000":
    go run ./internal/cmd/corpus --force -n {{N}} -o corpus-{{N}}.jsonl.zst

# Regenerate BENCHMARKS.md beside the peers .ci/install-peers installs; `just bench --section dedup` measures one section into .bench/BENCHMARKS.md, `just bench --render` writes the report again from the kept rows.
bench *ARGS:
    go run ./internal/cmd/benchsuite run {{ARGS}}

# The long chaos suite (kills, crashes, faults); writes RELIABILITY.md.
chaos:
    bash pipelines/chaos.sh

# Run every fuzz target for a bounded time each (default 30s).
fuzz time="30s":
    bash pipelines/fuzz.sh {{time}}

# Static checks, as CI runs them (staticcheck pinned in .ci/run).
lint:
    test -z "$(gofmt -l .)"
    go vet ./...
    go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
    bash .ci/deadcode
    go mod tidy -diff
    GOOS=darwin GOARCH=amd64 go build ./...
    GOOS=darwin GOARCH=arm64 go build ./...

# Format the code.
fmt:
    gofmt -w .

# Start / stop the private single-node Slurm cluster the tests use (root).
slurm-up dir="/tmp/tokenmill-slurm":
    bash testdata/slurm/cluster.sh start {{dir}}

slurm-down dir="/tmp/tokenmill-slurm":
    bash testdata/slurm/cluster.sh stop {{dir}}
