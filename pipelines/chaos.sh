#!/usr/bin/env bash
# chaos.sh: the long chaos suite (what `just chaos` runs), then the figures
# it measured written into RELIABILITY.md:
#
#   - infer over 20,000 prompts on an llmsim fleet whose endpoints crash and
#     restart, answer 500, hang, drop connections and abort, while infer
#     itself is killed with SIGKILL at 10 seeded moments and resumed each
#     time: every prompt must end with exactly one good answer;
#   - dedup and merge killed with SIGKILL mid-write: their outputs must be
#     absent or complete, never short, and a rerun must give them whole;
#   - shard reading a pipe, killed with SIGKILL: its parts must be all in
#     place or none, and a rerun from the pipe must give them whole.
#
# The same tests run at a smaller size in every `go test ./...`, and at
# CI's size in the long test tier (TOKENMILL_TEST_LONG=1).
#
#   pipelines/chaos.sh              # long run; rewrites RELIABILITY.md
#   CHAOS=short pipelines/chaos.sh  # the long tier's (CI's) size; prints the figures only
set -euo pipefail
cd "$(dirname "$0")/.."

size=${CHAOS:-long}
report=$(mktemp -d)
trap 'rm -rf "$report"' EXIT

echo "chaos.sh: $size run of the chaos tests in lib/infer, lib/dedup, lib/merge, lib/shard" >&2
tier=0
[ "$size" = long ] || tier=1
TOKENMILL_CHAOS=$size TOKENMILL_TEST_LONG=$tier TOKENMILL_CHAOS_REPORT=$report \
  go test -count=1 -timeout 60m -run '^TestChaos' -v ./lib/infer/ ./lib/dedup/ ./lib/merge/ ./lib/shard/

section=$report/section.md
{
  echo "<!-- chaos:begin: written by pipelines/chaos.sh from the tests' own figures; do not edit by hand -->"
  echo
  echo "Measured $(date -u +%Y-%m-%d) at $(git describe --always --dirty 2>/dev/null || echo 'an unknown commit'), $(go version | awk '{print $3}'), $(nproc) cores."
  for t in infer dedup merge shard; do
    if [ ! -s "$report/$t.md" ]; then
      echo "chaos.sh: the $t chaos test left no figures" >&2
      exit 1
    fi
    echo
    cat "$report/$t.md"
  done
  echo
  echo "<!-- chaos:end -->"
} >"$section"

if [ "$size" != long ]; then
  cat "$section"
  exit 0
fi
if ! grep -q '<!-- chaos:begin' RELIABILITY.md || ! grep -q '<!-- chaos:end -->' RELIABILITY.md; then
  echo "chaos.sh: RELIABILITY.md lacks the <!-- chaos:begin --> ... <!-- chaos:end --> markers" >&2
  exit 1
fi
awk -v section="$section" '
  /<!-- chaos:begin/ { while ((getline line < section) > 0) print line; skip = 1; next }
  /<!-- chaos:end -->/ { skip = 0; next }
  !skip { print }
' RELIABILITY.md >"$report/RELIABILITY.md"
cp "$report/RELIABILITY.md" RELIABILITY.md
echo "chaos.sh: RELIABILITY.md updated" >&2
