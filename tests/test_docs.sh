#!/bin/bash
# docs: every shell example of the user docs runs (a doctest of README.md
# and docs/*.md), so a stale example -- an option renamed or removed, a file
# that no longer exists, a changed exit status -- fails the suite.
#
#   test_docs.sh SRCDIR BUILDDIR MPIEXEC "MPIEXEC_PREFLAGS" [PAGE...]
#
# Which fenced blocks run (write the docs this way):
#   ```sh                a shell example: it runs, and must exit 0.
#   ```sh needs=KIND     a shell example that needs something this test does
#                        not have; it is shown, not run, and counted by KIND:
#                          slurm    a Slurm cluster (sbatch, srun, scancel)
#                          gpu      a CUDA build and GPUs
#                          network  downloads: llm.c or Hugging Face weights
#                                   and tokens, pip packages
#                          setup    installs packages, builds the tree or
#                                   runs the suite (quickstart, configure)
#                          root     root and network namespaces (emulated
#                                   nodes, the private Slurm)
#                          python   h5py, numpy and matplotlib: runs when
#                                   python3 imports them, else skipped
#   ```text, ```console  output or a transcript: never run.
#   ```c and others      other languages: never run.
# A fence without a language, or a sh block with another needs=, fails the
# test (an example must say whether it runs).
#
# How a block runs: with bash -e -o pipefail in a scratch folder of its page
# (blocks of one page run in order and share the folder, so a later block
# may use the checkpoint an earlier one wrote), PATH starting with the
# build's programs (BUILDDIR/src, tools/fsdp-report) and an `mpiexec` (and
# `mpirun`) that is the suite's launcher with its flags.  The folder has
# links `build` (BUILDDIR), `tests`, `inputs`, `jobscripts` and `tools` (the
# source tree), so `build/src/fsdp-train` and `inputs/...` work as in a
# checkout built in `build/`.  Keep examples small (the tiny models, a few
# steps): the whole test runs in about a minute on 2 cores.
set -u
[ $# -ge 4 ] || { echo "usage: $0 SRCDIR BUILDDIR MPIEXEC \"PREFLAGS\" [PAGE...]" >&2; exit 2; }
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd) mpiexec=$3 preflags=$4
shift 4
if [ $# -gt 0 ]; then pages=("$@"); else pages=("$src/README.md" "$src"/docs/*.md); fi
[ -x "$build/src/fsdp-train" ] || { echo "docs: $build/src/fsdp-train is not built"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# The launcher as the examples call it.
mkdir -p "$tmp/bin"
for name in mpiexec mpirun; do
  printf '#!/bin/sh\nexec %s %s "$@"\n' "$mpiexec" "$preflags" >"$tmp/bin/$name"
  chmod +x "$tmp/bin/$name"
done
# tools/fsdp-report is a script in the source tree; the programs are built.
export PATH="$tmp/bin:$build/src:$src/tools:$PATH"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
unset FSDP_OPTIONS

have_python=0
python3 -c 'import h5py, numpy, matplotlib' 2>/dev/null && have_python=1

ran=0 fails=0
declare -A skipped=()
for page in "${pages[@]}"; do
  rel=${page#"$src"/}
  work="$tmp/run/$(echo "$rel" | tr '/.' '__')"
  mkdir -p "$work"
  for l in tests inputs jobscripts tools; do ln -s "$src/$l" "$work/$l"; done
  ln -s "$build" "$work/build"
  # Split the page into blocks: blockN.sh holds the text, blockN.info
  # "LINE LANG NEEDS".
  rm -f "$tmp"/block*
  awk -v dir="$tmp" '
    /^[ \t]*```/ {
      if (!inside) {
        inside = 1; n++; line = NR
        info = $0; sub(/^[ \t]*```/, "", info)
        split(info, w, /[ \t]+/); lang = w[1]; needs = "-"
        for (i = 2; i in w; i++) if (w[i] ~ /^needs=/) { needs = substr(w[i], 7) }
        else if (w[i] != "") { needs = "?" w[i] }
        printf "%d %s %s\n", line, (lang == "" ? "-" : lang), needs > (dir "/block" n ".info")
        printf "" > (dir "/block" n ".sh")
        next
      } else { inside = 0; next }
    }
    inside { print >> (dir "/block" n ".sh") }
    END { if (inside) printf "%d unclosed -\n", line > (dir "/block" n ".info") }
  ' "$page"
  for info in $(ls "$tmp"/block*.info 2>/dev/null | sort -V); do
    read -r line lang needs <"$info"
    block=${info%.info}.sh
    where="$rel:$line"
    case $lang in
      sh) ;;
      unclosed) echo "FAIL: $where: a fence is not closed"; fails=$((fails + 1)); continue ;;
      -) echo "FAIL: $where: a fence without a language (sh runs; text or console does not)"
         fails=$((fails + 1)); continue ;;
      *) continue ;;
    esac
    case $needs in
      -) ;;
      python)
        if [ $have_python = 0 ]; then skipped[python]=$((${skipped[python]:-0} + 1)); continue; fi ;;
      slurm|gpu|network|setup|root)
        skipped[$needs]=$((${skipped[$needs]:-0} + 1)); continue ;;
      *) echo "FAIL: $where: unknown fence word '${needs#\?}' (needs=slurm|gpu|network|setup|root|python)"
         fails=$((fails + 1)); continue ;;
    esac
    start=$(date +%s%N)
    (cd "$work" && bash -e -o pipefail "$block") >"$tmp/out" 2>&1 </dev/null
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    ran=$((ran + 1))
    if [ $rc -ne 0 ]; then
      echo "FAIL: $where: the example exited with status $rc:"
      sed 's/^/    | /' "$block"
      echo "  its output (last 30 lines):"
      tail -30 "$tmp/out" | sed 's/^/    > /'
      fails=$((fails + 1))
    else
      printf 'ok: %s (%d.%d s)\n' "$where" $((ms / 1000)) $((ms % 1000 / 100))
    fi
  done
done

skips=""
total_skipped=0
for kind in slurm gpu network setup root python; do
  n=${skipped[$kind]:-0}
  [ "$n" -gt 0 ] && skips="$skips, $kind $n" && total_skipped=$((total_skipped + n))
done
echo "docs: ran $ran examples; skipped $total_skipped by what they need (${skips#, })"
[ $ran -gt 0 ] || { echo "FAIL: no example ran"; exit 1; }
if [ $fails -gt 0 ]; then echo "docs: $fails failure(s)"; exit 1; fi
exit 0
