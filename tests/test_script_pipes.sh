#!/bin/sh
# test_script_pipes.sh SRCDIR: no script that runs under `set -o pipefail`
# pipes a command into `grep -q`.  grep -q leaves at its first match; the
# command still writing gets SIGPIPE, and pipefail turns the pipeline's
# status into that failure, so the test reads "no match" on a good match,
# now and then.  It failed the `bundle` test once in CI (ldd | grep -q in
# tools/make-bundle.sh) and could drop -metrics from a job script
# (fsdp-train -help is 10 KB, -metrics near its end).  Write
# `... | grep PATTERN >/dev/null` instead: grep reads everything.
src=${1:?usage: test_script_pipes.sh SRCDIR}
cd "$src" || exit 1
files=$(git ls-files 2>/dev/null | grep -E '\.(sh|sbatch)$|^\.ci/run$|^quickstart\.sh$')
[ -n "$files" ] || files=$(find . -name '*.sh' -o -name '*.sbatch' -o -path './.ci/run' | sed 's|^\./||')
checked=0 bad=0
for f in $files; do
  [ -f "$f" ] || continue
  grep -Eq '^[^#]*set -[a-z]*o pipefail|^[^#]*set -o pipefail' "$f" || continue
  checked=$((checked + 1))
  # a pipe into grep whose options include q (or --quiet/--silent), outside a comment
  hits=$(grep -nE '^[^#]*\|[[:space:]]*grep[[:space:]]+(-[A-Za-z]*q[A-Za-z]*|--quiet|--silent)([[:space:]]|$)' "$f")
  if [ -n "$hits" ]; then
    echo "FAIL: $f runs under pipefail and pipes into grep -q (use grep ... >/dev/null):"
    echo "$hits" | sed 's/^/  /'
    bad=1
  fi
done
# the job scripts and the bundle tool set pipefail: if none was found the
# scan itself is broken
[ "$checked" -ge 5 ] || { echo "FAIL: only $checked scripts with pipefail found under $src"; exit 1; }
[ "$bad" = 0 ] || exit 1
echo "ok: $checked scripts under pipefail, none pipes into grep -q"
