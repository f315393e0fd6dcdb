# tokenmill recipes. `just` is optional: every recipe is a plain command.
# Install it with: npm install -g rust-just

# List the recipes.
default:
    @just --list

# Build every binary into ./bin.
build:
    go build -o bin/ ./cmd/...

# Run the tests (the same command CI runs).
test:
    go test ./...

# Static checks.
lint:
    go vet ./...
    test -z "$(gofmt -l .)"

# Format the code.
fmt:
    gofmt -w .
