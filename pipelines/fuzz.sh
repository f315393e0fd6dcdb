#!/usr/bin/env bash
# fuzz.sh: run every fuzz target in the repository for a bounded time each
# (what `just fuzz` runs). Targets are found in the test files, so a new
# one is run without editing this script.
#
#   pipelines/fuzz.sh            # 30s per target
#   pipelines/fuzz.sh 5m         # or FUZZTIME=5m pipelines/fuzz.sh
#   pipelines/fuzz.sh 10s dedup  # only packages whose path matches "dedup"
#
# An input that breaks a target is saved by go test under the package's
# testdata/fuzz/<Target>/; rerun it with go test -run <Target>/<file>.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${1:-${FUZZTIME:-30s}}
only=${2:-}
targets=$(grep -rE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' lib cmd internal |
  sed -E 's#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#./\1 \2#' | sort -u | grep -e "$only" || true)
if [ -z "$targets" ]; then
  echo "fuzz.sh: no fuzz targets found${only:+ matching $only}" >&2
  exit 1
fi
echo "fuzz.sh: $(echo "$targets" | wc -l) targets, $fuzztime each" >&2

failed=()
while read -r pkg name; do
  echo "fuzz.sh: $pkg $name" >&2
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"; then
    failed+=("$pkg $name")
  fi
done <<<"$targets"

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: ${#failed[@]} target(s) failed (inputs saved under their package's testdata/fuzz):" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "fuzz.sh: every target ran $fuzztime without a failure" >&2
