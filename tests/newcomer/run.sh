#!/usr/bin/env bash
# Newcomer test (issue 6): a fresh clone of this repository in a new temporary folder, then only the
# commands of README.md's quick-start block (the fenced block after `<!-- newcomer: demo -->`), run by
# bash in a clean environment (env -i: a new HOME, PATH=/usr/local/bin:/usr/bin:/bin, nothing else), must
# reach the demo's launch plan with a READY verdict.
#
# Usage: tests/newcomer/run.sh [--keep]   (--keep leaves the temporary folder for inspection)
# The clone is of the committed HEAD (uncommitted changes are not part of it, as for a newcomer).
# The README's "git clone <repository-url> vlgrpo" gets this repository's path as the URL.
# Cost: one fresh .venv (pip, from the machine's pip configuration) plus one demo: about 2-3 minutes here.
set -Eeuo pipefail

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)
keep=0
case ${1-} in
  --keep) keep=1 ;;
  "") ;;
  *) echo "usage: tests/newcomer/run.sh [--keep]" >&2; exit 2 ;;
esac

fail() { echo "newcomer: FAIL: $*" >&2; exit 1; }

git -C "$REPO" rev-parse --verify -q HEAD >/dev/null ||
  fail "$REPO is not a git checkout with a commit: the newcomer test clones it (run it in a git clone)"

# The quick-start block, exactly as the README shows it.
block=$(awk '
  /<!-- newcomer: demo -->/ { armed = 1; next }
  armed && /^```/ { if (inside) exit; inside = 1; next }
  inside { print }' "$REPO/README.md")
[[ -n $block ]] || fail "README.md has no fenced block after <!-- newcomer: demo -->"
grep -q 'git clone <repository-url>' <<<"$block" || fail "the README quick-start block does not start from 'git clone <repository-url>'"
grep -q '^make demo' <<<"$block" || fail "the README quick-start block does not run 'make demo'"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/vlgrpo-newcomer.XXXXXX")
if ((keep)); then echo "newcomer: keeping $tmp"; else trap 'rm -rf -- "$tmp"' EXIT; fi
mkdir -p "$tmp/home" "$tmp/work"
script=${block//<repository-url>/$REPO}
printf '%s\n' "set -e" "$script" >"$tmp/quickstart.sh"
echo "newcomer: README quick-start commands, run in $tmp/work with env -i:"
while IFS= read -r line; do printf '  | %s\n' "$line"; done <<<"$script"

start=$SECONDS
rc=0
(cd "$tmp/work" && env -i HOME="$tmp/home" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 TERM=dumb \
  bash "$tmp/quickstart.sh") >"$tmp/out.log" 2>&1 || rc=$?
took=$((SECONDS - start))
tail -n 40 "$tmp/out.log" | sed 's/^/  > /'
((rc == 0)) || fail "the README commands exited $rc after ${took}s (log: $tmp/out.log)"
grep -q '^verdict: READY' "$tmp/out.log" || fail "no 'verdict: READY' line in the output"
grep -qx 'trainer.nnodes=2' "$tmp/out.log" || fail "the plan's command lacks trainer.nnodes=2"
grep -qx 'rollout.n_gpus_per_node=16' "$tmp/out.log" || fail "the plan's command lacks rollout.n_gpus_per_node=16"
grep -q '^  data train: 20 rows, largest prompt' "$tmp/out.log" || fail "the plan lacks the token budget of the train split"
[[ -x $tmp/work/vlgrpo/.venv/bin/python ]] || fail "the README commands did not build the clone's own .venv"
echo "newcomer: passed: fresh clone -> README commands -> READY plan in ${took}s (clean environment, new HOME)"
