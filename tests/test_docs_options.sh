#!/bin/sh
# docs_options: the option text of the docs is the programs' own -help.
#
#   test_docs_options.sh SRCDIR BUILDDIR
#
# 1. docs/options/<program>.txt equal what the built programs print for
#    -help (tools/gen-option-docs): a changed option, default or meaning
#    fails here until the files are regenerated in the same commit.
# 2. Every option the user pages name (`-name` in README.md and docs/*.md,
#    prose and examples alike) is an option of some program, so a renamed
#    or removed option cannot live on in the prose; the few flags of other
#    tools the pages name (mpiexec, ctest, the compiler) are listed below.
set -u
[ $# -eq 2 ] || { echo "usage: $0 SRCDIR BUILDDIR" >&2; exit 2; }
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0

# ---- 1. the committed -help files are the programs' -help ----------------------
if ! sh "$src/tools/gen-option-docs" "$build" "$tmp/options"; then
  echo "FAIL: tools/gen-option-docs could not run the programs"; exit 1
fi
for f in "$tmp"/options/*.txt; do
  name=$(basename "$f")
  if [ ! -f "$src/docs/options/$name" ]; then
    echo "FAIL: docs/options/$name is missing"; fails=$((fails + 1)); continue
  fi
  if ! diff -u "$src/docs/options/$name" "$f" >"$tmp/diff"; then
    echo "FAIL: docs/options/$name differs from the built program's -help:"
    cat "$tmp/diff"
    fails=$((fails + 1))
  fi
done
for f in "$src"/docs/options/*.txt; do
  [ -f "$tmp/options/$(basename "$f")" ] || {
    echo "FAIL: docs/options/$(basename "$f") is no program's -help"; fails=$((fails + 1)); }
done
if [ $fails -gt 0 ]; then
  echo "Regenerate with: tools/gen-option-docs $build   (or: make -C $build option-docs)"
fi

# ---- 2. every option the pages name exists --------------------------------------
# Options of the programs: the first word of each "  -name <...>" line.
sed -n 's/^  -\([a-z][a-z0-9_]*\)[ <].*/\1/p; s/^  -\([a-z][a-z0-9_]*\)$/\1/p' \
  "$tmp"/options/*.txt | sort -u >"$tmp/known"
[ -s "$tmp/known" ] || { echo "FAIL: no option found in the -help files"; exit 1; }
# Flags of other tools that the pages show, each with the tool it belongs to.
cat >>"$tmp/known" <<'EOF'
np
ppn
fsanitize
fno
eq
stpes
EOF
# (-np: mpiexec; -ppn: MPICH's mpirun; -fsanitize, -fno-sanitize-recover:
# the compiler flags of configure --enable-sanitizers; -eq: the shell's
# test; -stpes: the typo docs/training.md shows being refused, with exit
# status 2, which the docs test checks.)  Single-letter flags (mpiexec -n,
# -x; ctest -L, -R, -V) are not fsdp's style and are not checked.
pages="$src/README.md"
for p in "$src"/docs/*.md; do pages="$pages $p"; done
# A name is `-word` at the start of a line, after a blank, a backquote, a
# parenthesis or a slash, followed by a blank, a backquote, punctuation or
# the end of the line; -describe_* stands for the family it names.
for page in $pages; do
  grep -n -o -E '(^|[ `(/])-[a-z][a-z0-9_]+(\*|[ `),.;:=]|$)' "$page" |
    sed -E 's/^([0-9]+):[ `(/]?-([a-z0-9_]+).*/\1 \2/' |
    while read -r line name; do
      case $name in
        *_) grep -q "^$name" "$tmp/known" && continue ;;  # -describe_* etc.
      esac
      grep -qx "$name" "$tmp/known" && continue
      echo "FAIL: ${page#"$src"/}:$line names -$name, which no program's -help has"
    done
done >"$tmp/unknown"
if [ -s "$tmp/unknown" ]; then
  cat "$tmp/unknown"
  fails=$((fails + $(wc -l <"$tmp/unknown")))
fi

n=$(wc -l <"$tmp/known")
if [ $fails -gt 0 ]; then echo "docs_options: $fails failure(s)"; exit 1; fi
echo "docs_options: docs/options equal the programs' -help; every option the pages name is one of $n"
