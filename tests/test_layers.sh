#!/bin/sh
# test_layers.sh: the layer order of the source tree, checked on every
# quoted #include (docs/design.md §1, "Layers"):
#
#   base -> kernels -> device -> comm -> model -> runtime -> io -> plan -> driver -> src
#
# A file may include headers of its own layer and of the layers before it,
# with two tighter rules: the model layer (lib/model/) knows nothing of MPI,
# NCCL, the runtime or device memory, so it may include only "model/...",
# "base/...", "kernels/..." and system headers -- and not the system
# headers of MPI, NCCL, CUDA or HDF5 either; the kernels (lib/kernels/)
# compute on buffers they are given, so they include no MPI, NCCL or HDF5
# header (CUDA's are theirs).  Every violation is printed as
#   FILE:LINE: #include "HEADER" (why it may not)
# and the test fails; a later leak therefore fails the suite.  examples/
# is outside the layers: it uses the installed library as a user's program
# does, so it includes <libfsdp.h> and its own headers ("mixer.h"), never a
# header of the tree by its layer path, nor config.h (not installed).
#
# Within a layer the files depend on each other in one direction only: a
# cycle -- file A uses a function or variable that file B defines and B,
# directly or through other files of the layer, uses one of A's -- is
# printed as "A (uses NAME) -> B (uses NAME) -> A: ..." and fails too
# (a back-end calling back into the file that dispatches to it, as comm's
# collective back-ends once called coll.c: [Note: no calls back into
# coll.c] in comm/coll_common.h).
#
# Model families stay behind the family table ([Note: adding a family] in
# lib/model/family.h): the runtime and io layers include no model header
# but "model/model.h" (the description and the table), and no file under
# src/ names a family: not its folder's headers ("model/gpt/..."), its
# config type (GptConfig), its family-name macro (GPT_FAMILY) or its
# Hugging Face architecture string ("GPT2LMHeadModel").  Those names are
# read from the family folders (lib/model/<name>/), so a family added
# later is covered without editing this test.
#
# Usage: test_layers.sh SRCDIR
# (FSDP_LAYERS_EXTRA_FILE=PATH adds file PATH, checked as if its name were
# FSDP_LAYERS_EXTRA_NAME: the self-check at the end plants violations that
# way and must see them reported.)

# Known exceptions, each "FILE HEADER" with the reason above it; anything
# else that breaks the order fails.  Each is a debt to pay, not a rule.
# (None left: device.h's include of comm/topo.h went when FsdpDeviceSetUp
# took the world communicator instead of the topology.)
exceptions='
'

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
srcdir=${1:-${FSDP_SRCDIR:-.}}
cd "$srcdir" || { echo "test_layers: cannot enter source directory $srcdir"; exit 1; }

# check FILE...: print every violation.  One awk over all files (a process
# per include line would take minutes on a loaded machine).  NAME_AS, when
# set, is the layer-relative name the first file is checked as.
check() {
  awk -v exceptions="$exceptions" -v name_as="$NAME_AS" '
    function rank(l) {
      return (l in R) ? R[l] : -1
    }
    function file_layer(f,   parts) {
      if (f == "lib/libfsdp.h") return "driver" # the umbrella header: everything public
      if (f ~ /^lib\/[^\/]+\//) { split(f, parts, "/"); return parts[2] }
      if (f ~ /^src\//) return "src"
      if (f ~ /^examples\//) return "examples"
      return ""
    }
    function include_layer(h,   parts) {
      if (h == "config.h") return "any"        # configure results
      if (h == "common.cuh") return "kernels"  # lib/kernels/cuda, included beside it
      if (h == "libfsdp.h") return "driver"
      if (h ~ /\//) { split(h, parts, "/"); return parts[1] }
      return "unknown"
    }
    BEGIN {
      n = split("base kernels device comm model runtime io plan driver src", order, " ")
      for (i = 1; i <= n; i++) R[order[i]] = i
      n = split(exceptions, ex, "\n")
      for (i = 1; i <= n; i++) if (ex[i] != "") EX[ex[i]] = 1
    }
    FNR == 1 {
      name = (FILENAME == ARGV[1] && name_as != "") ? name_as : FILENAME
      layer = file_layer(name)
    }
    layer == "" || !/^[ \t]*#[ \t]*include/ { next }
    {
      where = name ":" FNR ": "
      if (match($0, /<[^>]*>/)) {
        sys = substr($0, RSTART + 1, RLENGTH - 2)
        if (layer == "model" && sys ~ /^(mpi\.h|nccl\.h|cuda.*\.h|cublas.*\.h|hdf5\.h|H5.*\.h)$/)
          print where "#include <" sys "> (the model layer may not use MPI, NCCL, CUDA or HDF5)"
        if (layer == "kernels" && sys ~ /^(mpi\.h|nccl\.h|hdf5\.h|H5.*\.h)$/)
          print where "#include <" sys "> (the kernels may not use MPI, NCCL or HDF5)"
        next
      }
      if (!match($0, /"[^"]*"/)) next
      inc = substr($0, RSTART + 1, RLENGTH - 2)
      if (layer == "examples") {
        if (inc ~ /\// || inc == "config.h")
          print where "#include \"" inc "\" (an example uses the installed library: <libfsdp.h> and its own headers)"
        next
      }
      il = include_layer(inc)
      if (il == "any") next
      if (rank(il) < 0) {
        print where "#include \"" inc "\" (names no layer: include headers as \"layer/file.h\")"
        next
      }
      if (layer == "model") {
        if (il != "model" && il != "base" && il != "kernels")
          print where "#include \"" inc "\" (the model layer may include only model/, base/ and kernels/ headers, not " il "/)"
        next
      }
      if ((layer == "runtime" || layer == "io") && il == "model" && inc != "model/model.h") {
        print where "#include \"" inc "\" (the " layer " layer knows a model only by model/model.h: its description and table)"
        next
      }
      if (rank(il) > rank(layer) && !((name " " inc) in EX))
        print where "#include \"" inc "\" (layer " layer " may not include layer " il ", which comes after it)"
    }
  ' "$@"
}

# cycles FILE...: print every dependency cycle among the .c/.cu files of
# one layer.  A file defines the names it declares at file scope without
# static (functions; variables with = or ;); it uses every identifier it
# names outside comments and strings, less its own definitions.  NAME_AS as
# for check.
cycles() {
  awk -v name_as="$NAME_AS" '
    function file_layer(f,   parts) {
      if (f ~ /^lib\/[^\/]+\//) { split(f, parts, "/"); return parts[2] }
      if (f ~ /^src\//) return "src"
      return ""
    }
    FNR == 1 {
      name = (FILENAME == ARGV[1] && name_as != "") ? name_as : FILENAME
      layer = file_layer(name)
      incomment = 0; depth = 0; ec = 0; pending = ""
      if (layer != "") { nf++; F[nf] = name; L[name] = layer }
    }
    layer == "" { next }
    {
      line = $0
      # strip comments (also across lines), strings and character literals
      out = ""
      while (line != "") {
        if (incomment) {
          i = index(line, "*/")
          if (!i) { line = ""; break }
          line = substr(line, i + 2); incomment = 0; continue
        }
        if (match(line, /\/\*|\/\/|"|'\''/)) {
          out = out substr(line, 1, RSTART - 1)
          tok = substr(line, RSTART, RLENGTH)
          line = substr(line, RSTART + RLENGTH)
          if (tok == "/*") { incomment = 1; out = out " "; continue }
          if (tok == "//") { line = ""; break }
          # a literal: skip to its unescaped end
          while (line != "" && substr(line, 1, 1) != tok) {
            if (substr(line, 1, 1) == "\\") line = substr(line, 2)
            line = substr(line, 2)
          }
          line = substr(line, 2)
          out = out tok tok
          continue
        }
        out = out line; line = ""
      }
      s = out
      if (s ~ /^[ \t]*#/) { uses(s); next }
      # definitions at file scope (depth 0, or inside extern "C" { })
      base = ec
      d = s # a C++ file'\''s extern "C" definition is a definition
      if (d !~ /^extern[ \t]*""[ \t]*\{/) sub(/^extern[ \t]*""[ \t]*/, "", d)
      if (depth == base && d ~ /^[A-Za-z_]/ && d !~ /^(typedef|extern|struct|union|enum)[ \t]/ ) {
        st = (d ~ /^static[ \t]/ || d ~ /^(__global__|__device__|__host__)?[ \t]*static[ \t]/)
        if (match(d, /^[^(=;{]*[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
          h = substr(d, 1, RLENGTH - 1); sub(/[ \t]+$/, "", h)
          match(h, /[A-Za-z_][A-Za-z0-9_]*$/)
          pending = substr(h, RSTART); pstatic = st
        } else if (match(d, /^[^(;{]*[A-Za-z_][A-Za-z0-9_]*[ \t]*(\[[^]]*\])?[ \t]*(=|;)/)) {
          h = substr(d, 1, RLENGTH - 1); sub(/[ \t]*(\[[^]]*\])?[ \t]*$/, "", h)
          match(h, /[A-Za-z_][A-Za-z0-9_]*$/)
          def(substr(h, RSTART), st)
        }
      }
      if (s ~ /^extern[ \t]*""[ \t]*\{/) { ec = 1; depth = 1; next }
      if (pending == "") {
        t = s
        depth += gsub(/\{/, "", t) - gsub(/\}/, "", t)
        if (ec && depth == 0) ec = 0
      } else {
        n = length(s)
        for (i = 1; i <= n; i++) {
          c = substr(s, i, 1)
          if (c == "{") {
            if (pending != "" && depth == base) { def(pending, pstatic); pending = "" }
            depth++
          } else if (c == "}") {
            depth--
            if (ec && depth == 0) ec = 0
          } else if (c == ";" && depth == base) pending = ""
        }
      }
      uses(s)
    }
    function def(id, st) {
      D[name, id] = 1
      if (!st) { if (!((layer, id) in X)) X[layer, id] = name; else X[layer, id] = X[layer, id] SUBSEP name }
    }
    function uses(s,   n, i, w) {
      n = split(s, w, /[^A-Za-z0-9_]+/)
      for (i = 1; i <= n; i++) if (w[i] ~ /^[A-Za-z_]/) U[name, w[i]] = 1
    }
    END {
      # edges: a uses an external name that b (another file of a'\''s layer) defines
      for (k in U) {
        split(k, p, SUBSEP); a = p[1]; id = p[2]
        if ((a, id) in D) continue
        if (!((L[a], id) in X)) continue
        m = split(X[L[a], id], defs, SUBSEP)
        for (j = 1; j <= m; j++) {
          b = defs[j]
          if (b == a) continue
          if (!((a, b) in E)) { E[a, b] = id; deg[a]++; adj[a, deg[a]] = b }
        }
      }
      for (i = 1; i <= nf; i++) color[F[i]] = 0
      for (i = 1; i <= nf; i++) if (color[F[i]] == 0) dfs(F[i], 0)
    }
    function dfs(v, sp,   j, w, q, msg) {
      color[v] = 1; stack[sp] = v
      for (j = 1; j <= deg[v]; j++) {
        w = adj[v, j]
        if (color[w] == 1) {
          msg = ""
          for (q = sp; q >= 0 && stack[q] != w; q--) ;
          for (; q <= sp; q++) msg = msg stack[q] " (uses " E[stack[q], (q < sp ? stack[q + 1] : w)] ") -> "
          print msg w ": a cycle among the files of layer " L[v] " (each file uses one after it; one of them must not)"
        } else if (color[w] == 0) dfs(w, sp + 1)
      }
      color[v] = 2
    }
  ' "$@"
}

sources() {
  find lib src examples -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort
}

code() {
  sources | grep -E '\.(c|cu)$'
}

# The words that name a family, one a line, from lib/model/<name>/.
family_words() {
  for d in lib/model/*/; do
    [ -d "$d" ] || continue
    f=${d%/}
    echo "model/${f#lib/model/}/"
  done
  cat lib/model/*/*.h /dev/null | sed -n 's/^} *\([A-Za-z0-9_]*Config\);.*/\1/p'
  cat lib/model/*/*.h /dev/null | sed -n 's/^#define \([A-Z0-9_]*_FAMILY\) .*/\1/p'
  cat lib/model/*/*.c /dev/null | sed -n 's/.*hf_architecture = \("[^"]*"\).*/\1/p'
}

# check_src FILE...: every line of a src/ file that names a family.
# NAME_AS as for check.
check_src() {
  words=$(family_words)
  [ -n "$words" ] || { echo "test_layers: no family folder under lib/model: wrong directory?"; return; }
  for f in "$@"; do
    name=$f
    if [ "$f" = "$1" ] && [ -n "$NAME_AS" ]; then name=$NAME_AS; fi
    case $name in src/*) ;; *) continue ;; esac
    printf '%s\n' "$words" | grep -nFo -f - "$f" /dev/null | sed -n "s|^[^:]*:\([0-9]*\):\(.*\)|$name:\1: names \2 (a program reaches a model family only through model/family.h)|p" | sort -u
  done
}

if [ -n "$FSDP_LAYERS_EXTRA_FILE" ]; then
  out=$(NAME_AS=$FSDP_LAYERS_EXTRA_NAME check "$FSDP_LAYERS_EXTRA_FILE" $(sources)
        NAME_AS=$FSDP_LAYERS_EXTRA_NAME check_src "$FSDP_LAYERS_EXTRA_FILE" $(sources))
  case $FSDP_LAYERS_EXTRA_NAME in
    *.c | *.cu) cyc=$(NAME_AS=$FSDP_LAYERS_EXTRA_NAME cycles "$FSDP_LAYERS_EXTRA_FILE" $(code)) ;;
    *) cyc=$(cycles $(code)) ;;
  esac
else
  out=$(check $(sources); check_src $(sources))
  cyc=$(cycles $(code))
fi

checked=$(sources | wc -l)
if [ "$checked" -lt 20 ]; then
  echo "test_layers: only $checked source files under $srcdir/lib, src: wrong directory?"
  exit 1
fi
if [ -n "$out" ] || [ -n "$cyc" ]; then
  [ -n "$out" ] && printf '%s\n' "$out" &&
    echo "test_layers: FAIL: $(printf '%s\n' "$out" | wc -l) include(s) break the layer order"
  [ -n "$cyc" ] && printf '%s\n' "$cyc" &&
    echo "test_layers: FAIL: $(printf '%s\n' "$cyc" | wc -l) cycle(s) among the files of a layer"
  exit 1
fi

# Self-check, so that a checker that silently passes everything fails:
# planted violations in a model file, a comm file, the device header (its
# old exception), a kernel file, and a collective back-end calling back
# into coll.c, and an example including a header of the tree by its layer
# path must be reported.
if [ -z "$FSDP_LAYERS_EXTRA_FILE" ]; then
  tmp=${TMPDIR:-/tmp}/test_layers.$$
  printf '#include "model/model.h"\n#include "runtime/fsdp.h"\n#include <mpi.h>\n' > "$tmp.c"
  planted=$(FSDP_LAYERS_EXTRA_FILE=$tmp.c FSDP_LAYERS_EXTRA_NAME=lib/model/planted.c sh "$self" .)
  printf '#include "comm/coll.h"\n#include "io/ckpt.h"\n' > "$tmp.c"
  planted2=$(FSDP_LAYERS_EXTRA_FILE=$tmp.c FSDP_LAYERS_EXTRA_NAME=lib/comm/planted.c sh "$self" .)
  printf '#include "base/error.h"\n#include "comm/topo.h"\n' > "$tmp.c"
  planted3=$(FSDP_LAYERS_EXTRA_FILE=$tmp.c FSDP_LAYERS_EXTRA_NAME=lib/device/device.h sh "$self" .)
  printf '#include "kernels/kernels.h"\n#include <mpi.h>\n#include <hdf5.h>\n#include <cuda_runtime.h>\n' > "$tmp.c"
  planted4=$(FSDP_LAYERS_EXTRA_FILE=$tmp.c FSDP_LAYERS_EXTRA_NAME=lib/kernels/cpu/planted.c sh "$self" .)
  # a second NCCL-less staged back-end that creates an FsdpColl: coll.c uses
  # its FsdpCollStagedOps, it uses coll.c's FsdpCollCreate
  printf '%s\n' '#include "comm/coll_backend.h"' \
    'const CollBackendOps *FsdpCollStagedOps(void)' '{' '  FsdpColl c = NULL;' \
    '  return FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &c) ? NULL : NULL;' '}' > "$tmp.c"
  planted5=$(FSDP_LAYERS_EXTRA_FILE=$tmp.c FSDP_LAYERS_EXTRA_NAME=lib/comm/coll_planted.c sh "$self" .)
  printf '#include <libfsdp.h>\n#include "mixer.h"\n#include "model/gpt.h"\n' > "$tmp.c"
  planted6=$(FSDP_LAYERS_EXTRA_FILE=$tmp.c FSDP_LAYERS_EXTRA_NAME=examples/planted.c sh "$self" .)
  printf '#include "model/model.h"\n#include "model/family.h"\n' > "$tmp.c"
  planted7=$(FSDP_LAYERS_EXTRA_FILE=$tmp.c FSDP_LAYERS_EXTRA_NAME=lib/runtime/planted.c sh "$self" .)
  printf '#include "libfsdp.h"\n#include "model/llama/llama.h"\nstatic GptConfig c;\nint f = GPT_FAMILY[0];\nconst char *a = "LlamaForCausalLM";\n' > "$tmp.c"
  planted8=$(FSDP_LAYERS_EXTRA_FILE=$tmp.c FSDP_LAYERS_EXTRA_NAME=src/planted.c sh "$self" .)
  # the planner's layer (lib/plan/) sits above io: io may not include it
  printf '#include "io/ckpt.h"\n#include "plan/profile.h"\n' > "$tmp.c"
  planted9=$(FSDP_LAYERS_EXTRA_FILE=$tmp.c FSDP_LAYERS_EXTRA_NAME=lib/io/planted.c sh "$self" .)
  rm -f "$tmp.c"
  case $planted3 in
    *'lib/device/device.h:2: #include "comm/topo.h"'*) ;;
    *) echo "test_layers: self-check: device.h including comm/topo.h was not reported:"
       printf '%s\n' "$planted3"; exit 1 ;;
  esac
  case $planted4 in
    *'lib/kernels/cpu/planted.c:2: #include <mpi.h>'*'lib/kernels/cpu/planted.c:3: #include <hdf5.h>'*) ;;
    *) echo "test_layers: self-check: a kernel file including <mpi.h> and <hdf5.h> was not reported:"
       printf '%s\n' "$planted4"; exit 1 ;;
  esac
  case $planted4 in
    *'planted.c:1:'* | *'planted.c:4:'*)
      echo "test_layers: self-check: kernels.h or a CUDA header in a kernel file was reported"; exit 1 ;;
  esac
  case $planted5 in
    *'lib/comm/coll.c (uses FsdpCollStagedOps) -> lib/comm/coll_planted.c (uses FsdpCollCreate) -> lib/comm/coll.c'*) ;;
    *'lib/comm/coll_planted.c (uses FsdpCollCreate) -> lib/comm/coll.c (uses FsdpCollStagedOps) -> lib/comm/coll_planted.c'*) ;;
    *) echo "test_layers: self-check: a back-end calling back into coll.c was not reported as a cycle:"
       printf '%s\n' "$planted5"; exit 1 ;;
  esac
  case $planted in
    *'lib/model/planted.c:2: #include "runtime/fsdp.h"'*'lib/model/planted.c:3: #include <mpi.h>'*) ;;
    *) echo "test_layers: self-check: a model file including runtime/fsdp.h and <mpi.h> was not reported:"
       printf '%s\n' "$planted"; exit 1 ;;
  esac
  case $planted2 in
    *'lib/comm/planted.c:2: #include "io/ckpt.h"'*) ;;
    *) echo "test_layers: self-check: a comm file including io/ckpt.h was not reported:"
       printf '%s\n' "$planted2"; exit 1 ;;
  esac
  case $planted2 in
    *'planted.c:1:'*) echo "test_layers: self-check: comm/coll.h in a comm file was reported"; exit 1 ;;
  esac
  case $planted6 in
    *'planted.c:1:'*|*'planted.c:2:'*)
       echo "test_layers: self-check: <libfsdp.h> or its own header in an example was reported"; exit 1 ;;
    *'examples/planted.c:3: #include "model/gpt.h"'*) ;;
    *) echo "test_layers: self-check: an example including model/gpt.h was not reported:"
       printf '%s\n' "$planted6"; exit 1 ;;
  esac
  case $planted7 in
    *'lib/runtime/planted.c:1:'*) echo "test_layers: self-check: model/model.h in a runtime file was reported"; exit 1 ;;
    *'lib/runtime/planted.c:2: #include "model/family.h"'*) ;;
    *) echo "test_layers: self-check: a runtime file including model/family.h was not reported:"
       printf '%s\n' "$planted7"; exit 1 ;;
  esac
  for want in 'src/planted.c:2: names model/llama/' 'src/planted.c:3: names GptConfig' \
              'src/planted.c:4: names GPT_FAMILY' 'src/planted.c:5: names "LlamaForCausalLM"'; do
    case $planted8 in
      *"$want"*) ;;
      *) echo "test_layers: self-check: a program naming a model family was not reported ($want):"
         printf '%s\n' "$planted8"; exit 1 ;;
    esac
  done
  case $planted8 in
    *'src/planted.c:1:'*) echo "test_layers: self-check: libfsdp.h in a program was reported"; exit 1 ;;
  esac
  case $planted9 in
    *'lib/io/planted.c:2: #include "plan/profile.h" (layer io may not include layer plan'*) ;;
    *) echo "test_layers: self-check: an io file including plan/profile.h was not reported:"
       printf '%s\n' "$planted9"; exit 1 ;;
  esac
  case $planted9 in
    *'planted.c:1:'*) echo "test_layers: self-check: io/ckpt.h in an io file was reported"; exit 1 ;;
  esac
fi
echo "test_layers: $checked files follow the layer order, with no cycle inside a layer"
exit 0
