#!/bin/sh
# test_citations.sh: comments cite the design page that is in the tree.
#
#   - every "docs/design.md §N" (also "§N, §M" and "§N-M") in the code,
#     tests, bench scripts and tools names a section "## N." that
#     docs/design.md has, so renumbering the page fails here until the
#     citations follow;
#   - no file cites "DESIGN §N": that was the workspace's DESIGN.md, which
#     is not in this repository (a reader cannot follow it).
# Every violation is printed as FILE:LINE: TEXT (why) and the test fails;
# a self-check at the end plants both kinds and must see them reported.
#
# Usage: test_citations.sh SRCDIR
# (FSDP_CITATIONS_EXTRA_FILE=PATH adds file PATH: the self-check's way in.)


self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
srcdir=${1:-${FSDP_SRCDIR:-.}}
cd "$srcdir" || { echo "test_citations: cannot enter source directory $srcdir"; exit 1; }
[ -f docs/design.md ] || { echo "test_citations: no docs/design.md under $srcdir"; exit 1; }

sections=$(sed -n 's/^## \([0-9][0-9]*\)\..*/\1/p' docs/design.md | tr '\n' ' ')

sources() {
  find lib kernels src tests bench tools examples jobscripts inputs -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.sh' \
       -o -name '*.py' -o -name '*.in' -o -name '*.sbatch' -o -name 'fsdp-report' \) \
    2>/dev/null | grep -v '^tests/test_citations\.sh$' | sort
}

check() {
  awk -v sections="$sections" '
    BEGIN {
      n = split(sections, s, " ")
      for (i = 1; i <= n; i++) S[s[i]] = 1
    }
    /DESIGN §/ {
      print FILENAME ":" FNR ": " $0 " (DESIGN.md is not in this repository: cite docs/design.md §N)"
    }
    /design\.md §/ {
      line = $0
      while (match(line, /design\.md §[0-9]+(-[0-9]+)?(, §[0-9]+(-[0-9]+)?)*/)) {
        cite = substr(line, RSTART, RLENGTH)
        line = substr(line, RSTART + RLENGTH)
        gsub(/[^0-9-]+/, " ", cite)
        m = split(cite, nums, " ")
        for (i = 1; i <= m; i++) {
          if (nums[i] == "") continue
          lo = nums[i]; hi = nums[i]
          if (index(nums[i], "-")) { split(nums[i], r, "-"); lo = r[1]; hi = r[2] }
          for (k = lo + 0; k <= hi + 0; k++)
            if (!(k in S))
              print FILENAME ":" FNR ": " $0 " (docs/design.md has no section " k ")"
        }
      }
    }
  ' "$@"
}

if [ -n "$FSDP_CITATIONS_EXTRA_FILE" ]; then
  out=$(check "$FSDP_CITATIONS_EXTRA_FILE")
else
  out=$(check $(sources))
fi
checked=$(sources | wc -l)
if [ "$checked" -lt 50 ]; then
  echo "test_citations: only $checked files under $srcdir: wrong directory?"
  exit 1
fi
if [ -n "$out" ]; then
  printf '%s\n' "$out"
  echo "test_citations: FAIL: $(printf '%s\n' "$out" | wc -l) stale citation(s)"
  exit 1
fi

# Self-check: a checker that passes everything fails here.
if [ -z "$FSDP_CITATIONS_EXTRA_FILE" ]; then
  tmp=${TMPDIR:-/tmp}/test_citations.$$.c
  printf '%s\n' '/* x.h: a thing (DESIGN §3). */' '/* see docs/design.md §4, §42 */' \
    '/* docs/design.md §4-5 and §8 */' > "$tmp"
  planted=$(FSDP_CITATIONS_EXTRA_FILE=$tmp sh "$self" .)
  rm -f "$tmp"
  case $planted in
    *'.c:1: '*'DESIGN.md is not in this repository'*) ;;
    *) echo "test_citations: self-check: a DESIGN §3 citation was not reported:"
       printf '%s\n' "$planted"; exit 1 ;;
  esac
  case $planted in
    *'.c:2: '*'has no section 42)'*) ;;
    *) echo "test_citations: self-check: docs/design.md §42 was not reported:"
       printf '%s\n' "$planted"; exit 1 ;;
  esac
  case $planted in
    *'.c:3: '*|*'no section 4)'*) echo "test_citations: self-check: a valid citation was reported:"
       printf '%s\n' "$planted"; exit 1 ;;
  esac
fi
echo "test_citations: $checked files cite only docs/design.md's sections ($sections)"
exit 0
