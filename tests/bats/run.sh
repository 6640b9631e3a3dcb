#!/usr/bin/env bash
# Runs every bats suite of the entrypoints and closes with "N passed, N failed" (bats prints TAP; the
# counts are taken from it). Exit status non-zero when a test failed or bats itself failed.
# Usage: tests/bats/run.sh [--fast] [FILE.bats...]   (default: all of tests/bats/*.bats)
#   --fast  only the files of FAST below (make check): each takes seconds, not minutes, on the 2-core CI machine
#           (per-file times in bench/RESULTS.md, "Test tiers"); make test-bats runs every file
# Files run BATS_JOBS at a time (default 2, one per core of the CI machine: most cases wait on one bash or Python
# child at a time), each file's cases one after another (bats --jobs with --no-parallelize-within-files, which needs
# GNU parallel: scripts/install-test-tools.sh installs it); BATS_JOBS=1 runs one file at a time.
set -Eeuo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")"
FAST=(env-corpus.bats)
files=()
for f; do
  if [[ $f == --fast ]]; then
    for g in "${FAST[@]}"; do [[ -f $g ]] && files+=("./$g"); done
    ((${#files[@]})) || { echo "bats: --fast: none of ${FAST[*]} exists here" >&2; exit 2; }
  else
    files+=("$f")
  fi
done
if ((${#files[@]} == 0)); then files=(./*.bats); fi
tap=$(mktemp)
trap 'rm -f -- "$tap"' EXIT
rc=0
start=$SECONDS
jobs=${BATS_JOBS:-2}
[[ $jobs =~ ^[1-9][0-9]?$ ]] || { echo "bats: BATS_JOBS=$jobs: give a number of parallel files from 1 to 99" >&2; exit 2; }
parallel=()
if ((jobs > 1 && ${#files[@]} > 1)); then
  command -v parallel >/dev/null 2>&1 ||
    { echo "bats: BATS_JOBS=$jobs needs GNU parallel (scripts/install-test-tools.sh, or BATS_JOBS=1)" >&2; exit 2; }
  parallel=(--jobs "$jobs" --no-parallelize-within-files)
fi
bats --tap "${parallel[@]}" "${files[@]}" | tee "$tap" || rc=$?
passed=$(grep -c '^ok ' "$tap" || true)
failed=$(grep -c '^not ok ' "$tap" || true)
skipped=$(grep -c '^ok .* # skip' "$tap" || true)
planned=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$tap" | head -n 1)
if [[ -n $planned ]] && ((passed + failed != planned)); then
  echo "bats: planned $planned tests but $((passed + failed)) reported" >&2
  rc=1
fi
echo "bats: ${#files[@]} file(s) in $((SECONDS - start)) s${skipped:+, $skipped skipped}"
echo "$passed passed, $failed failed"
if ((failed > 0 || rc != 0)); then exit 1; fi
