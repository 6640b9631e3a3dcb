#!/usr/bin/env bash
# Newcomer test: a fresh clone of this repository in a new temporary folder, then the two
# commands README.md gives, exactly as it shows them: the quick-start block (the fenced block after
# `<!-- newcomer: demo -->`: git clone, make demo) and the test block (after `<!-- newcomer: test -->`:
# make test), run one after the other by bash in a clean environment, as on the README's platform (a Debian 12
# machine with its Python 3.11): env -i, a new HOME, PATH=/usr/local/bin:/usr/bin:/bin (no /usr/sbin), and
# Debian's /usr/bin/python3 as the interpreter `make` builds .venv from (PYTHON=/usr/bin/python3; on such a
# machine that is what `python3` is). The demo must reach its launch plan with a READY verdict and every suite
# of `make test` must pass.
#
# Usage: tests/newcomer/run.sh [--keep] [--demo-only]
#   --keep       leave the temporary folder (clone, log) for inspection
#   --demo-only  run only the quick-start block (a few minutes instead of the whole test suite)
# The clone is of the committed HEAD (uncommitted changes are not part of it, as for a newcomer).
# The README's "git clone <repository-url> vlgrpo" gets this repository's path as the URL.
# Cost: one fresh .venv (pip, from the machine's pip configuration), one demo, one `make test`.
set -Eeuo pipefail

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)
PYTHON3=/usr/bin/python3
keep=0 demo_only=0
for arg; do
  case $arg in
    --keep) keep=1 ;;
    --demo-only) demo_only=1 ;;
    *) echo "usage: tests/newcomer/run.sh [--keep] [--demo-only]" >&2; exit 2 ;;
  esac
done

fail() { echo "newcomer: FAIL: $*" >&2; exit 1; }

git -C "$REPO" rev-parse --verify -q HEAD >/dev/null ||
  fail "$REPO is not a git checkout with a commit: the newcomer test clones it (run it in a git clone)"
[[ -x $PYTHON3 ]] || fail "$PYTHON3 is missing: the README's platform is a Debian 12 machine with its python3 (apt-get install python3 python3-venv)"

block() { # block MARKER: the fenced block after <!-- newcomer: MARKER --> in README.md, as it is shown
  awk -v marker="<!-- newcomer: $1 -->" '
    index($0, marker) { armed = 1; next }
    armed && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }' "$REPO/README.md"
}
demo=$(block demo)
[[ -n $demo ]] || fail "README.md has no fenced block after <!-- newcomer: demo -->"
grep -q 'git clone <repository-url>' <<<"$demo" || fail "the README quick-start block does not start from 'git clone <repository-url>'"
grep -q '^make demo' <<<"$demo" || fail "the README quick-start block does not run 'make demo'"
tests=$(block test)
[[ -n $tests ]] || fail "README.md has no fenced block after <!-- newcomer: test -->"
grep -q '^make test$' <<<"$tests" || fail "the README test block does not run 'make test'"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/vlgrpo-newcomer.XXXXXX")
if ((keep)); then echo "newcomer: keeping $tmp"; else trap 'rm -rf -- "$tmp"' EXIT; fi
mkdir -p "$tmp/home" "$tmp/work"
# shellcheck disable=SC2016  # ${SECONDS} is expanded by the script's own bash, when each block ends
{
  echo "set -e"
  echo "${demo//<repository-url>/$REPO}"
  echo 'echo "=== newcomer: quick-start block done after ${SECONDS}s"'
  if ((!demo_only)); then
    echo "$tests"
    echo 'echo "=== newcomer: test block done after ${SECONDS}s"'
  fi
} >"$tmp/readme.sh"
echo "newcomer: README commands, run in $tmp/work with env -i (PYTHON=$PYTHON3, $("$PYTHON3" -V)):"
while IFS= read -r line; do printf '  | %s\n' "$line"; done <"$tmp/readme.sh"

start=$SECONDS
rc=0
(cd "$tmp/work" && env -i HOME="$tmp/home" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 TERM=dumb PYTHON="$PYTHON3" \
  bash "$tmp/readme.sh") >"$tmp/out.log" 2>&1 || rc=$?
took=$((SECONDS - start))
tail -n 60 "$tmp/out.log" | sed 's/^/  > /'
((rc == 0)) || fail "the README commands exited $rc after ${took}s (log: $tmp/out.log; --keep keeps it)"
grep -q '^verdict: READY' "$tmp/out.log" || fail "no 'verdict: READY' line in the output"
grep -qx 'trainer.nnodes=2' "$tmp/out.log" || fail "the plan's command lacks trainer.nnodes=2"
grep -qx 'rollout.n_gpus_per_node=16' "$tmp/out.log" || fail "the plan's command lacks rollout.n_gpus_per_node=16"
grep -q '^  data train: 20 rows, largest prompt' "$tmp/out.log" || fail "the plan lacks the token budget of the train split"
venv=$tmp/work/vlgrpo/.venv
[[ -x $venv/bin/python ]] || fail "the README commands did not build the clone's own .venv"
base=$("$venv/bin/python" -c 'import sys; print(sys._base_executable)')
[[ $(readlink -f "$base") == $(readlink -f "$PYTHON3") ]] || fail "the clone's .venv was built from $base, not $PYTHON3"
if ((demo_only)); then
  echo "newcomer: passed: fresh clone -> quick-start block -> READY plan in ${took}s (clean environment, $PYTHON3)"
else
  grep -q '^=== newcomer: test block done' "$tmp/out.log" || fail "the test block did not run to its end"
  echo "newcomer: passed: fresh clone -> make demo READY -> make test passed in ${took}s (clean environment, $PYTHON3)"
fi
