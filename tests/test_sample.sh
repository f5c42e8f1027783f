#!/bin/sh
# test_sample.sh: fsdp-sample on the GPT-2 oracle's tiny model
# (tests/oracle/tiny_gpt2.bin, written as an llm.c file by
# tests/oracle/greedy_oracle.py and imported with fsdp-ckpt import-llmc):
#   - greedy decoding (-temperature 0) of the golden prompt gives exactly the
#     oracle's float64 greedy continuation (tests/oracle/tiny_greedy.txt,
#     24 tokens, the context window sliding past seq_len 16) on 1 rank, on
#     2 ranks fully sharded and on 4 ranks hybrid with NRAF and forward
#     prefetch;
#   - seeded sampling (-temperature 0.9 -top_k 8) gives the same tokens for
#     a seed at W = 1 and W = 2, other tokens for another seed, and only
#     ids among the 8 most likely (-top_k 1 equals greedy);
#   - -tokenizer FILE (llm.c layout) decodes prompt + continuation to the
#     tokens' text; -tokenizer builtin uses the built-in task's alphabet;
#     the model comes from the checkpoint, or from matching model options;
#   - bad input (no -resume, a missing checkpoint, prompt ids out of range
#     or not numbers, a token file as tokenizer, a truncated tokenizer,
#     model options the checkpoint does not match): a message naming the
#     option or file, exit status 2 (also under mpiexec on 2 ranks).
#   usage: test_sample.sh MPIEXEC "PREFLAGS" BUILD_SRC_DIR
# Needs python3 (no numpy) to write the llm.c files; skips (77) without it.
set -u
MPIEXEC=$1
PREFLAGS=$2
SRC=$3
SAMPLE="$SRC/fsdp-sample"
CKPT="$SRC/fsdp-ckpt"
ORACLE_DIR="${FSDP_SRCDIR:-$(dirname "$0")/..}/tests/oracle"
GOLDEN="$ORACLE_DIR/tiny_greedy.txt"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # fail (run is redefined below)
testlib_python "struct, array" "needs python3 to write the llm.c files"
testlib_tmpdir fsdp_test_sample

# run NP ARGS...: fsdp-sample on NP ranks (NP 0: no launcher); stdout in
# $tmp/out, stderr in $tmp/err, exit status in $rc
run() {
  np=$1
  shift
  if [ "$np" -eq 0 ]; then
    timeout 120 "$SAMPLE" "$@" >"$tmp/out" 2>"$tmp/err"
  else
    # shellcheck disable=SC2086
    timeout 120 "$MPIEXEC" $PREFLAGS -n "$np" "$SAMPLE" "$@" >"$tmp/out" 2>"$tmp/err"
  fi
  rc=$?
}
# same WHAT EXPECTED: the last run succeeded and printed exactly EXPECTED
same() {
  checks=$((checks + 1))
  got=$(cat "$tmp/out")
  if [ "$rc" -ne 0 ]; then fail "$1: exit status $rc"; sed 's/^/    /' "$tmp/err" | tail -5
  elif [ "$got" != "$2" ]; then fail "$1: got '$got', expected '$2'"
  else echo "ok: $1"; fi
}
# bad STATUS PATTERN NP ARGS...: the run fails with STATUS and a message
bad() {
  want=$1 pattern=$2
  shift 2
  checks=$((checks + 1))
  run "$@"
  if [ "$rc" -ne "$want" ]; then fail "fsdp-sample $*: exit status $rc, expected $want"; sed 's/^/    /' "$tmp/err" | tail -5
  elif ! grep -E -q -- "$pattern" "$tmp/err"; then fail "fsdp-sample $*: stderr lacks /$pattern/"; sed 's/^/    /' "$tmp/err" | tail -5
  elif [ "$(grep -E -c -- "$pattern" "$tmp/err")" -ne 1 ]; then fail "fsdp-sample $*: the message is printed more than once"
  else echo "ok: fsdp-sample $* -> $rc: $(grep -E -m1 -- "$pattern" "$tmp/err")"; fi
}

# ---- the oracle's model as an fsdp checkpoint -------------------------------
"$py" "$ORACLE_DIR/greedy_oracle.py" --llmc "$tmp/tiny.bin" --tokenizer "$tmp/tok.bin" >/dev/null || {
  echo "FAIL: greedy_oracle.py could not write the llm.c files"; exit 1; }
timeout 120 "$CKPT" import-llmc "$tmp/tiny.bin" "$tmp/tiny.h5" >/dev/null || {
  echo "FAIL: fsdp-ckpt import-llmc"; exit 1; }
prompt=$(sed -n 's/^prompt //p' "$GOLDEN" | tr ' ' ',')
greedy=$(sed -n 's/^greedy //p' "$GOLDEN")
n=$(echo "$greedy" | wc -w)
C="$tmp/tiny.h5"

# ---- greedy = the oracle's greedy continuation --------------------------------
run 0 -resume "$C" -prompt_tokens "$prompt" -max_new_tokens "$n" -temperature 0
same "greedy, 1 rank: $n tokens equal the oracle's" "$greedy"
run 2 -resume "$C" -prompt_tokens "$prompt" -max_new_tokens "$n" -temperature 0
same "greedy, 2 ranks (F 2)" "$greedy"
run 4 -resume "$C" -prompt_tokens "$prompt" -max_new_tokens "$n" -temperature 0 -sharding_factor 2 \
  -reshard_after_forward 0 -prefetch both -wrap 2
same "greedy, 4 ranks (F 2, NRAF, prefetch both, wrap 2)" "$greedy"
run 0 -resume "$C" -prompt_tokens "$prompt" -max_new_tokens "$n" -top_k 1
same "-top_k 1 is greedy" "$greedy"

# ---- seeded sampling ------------------------------------------------------------
run 0 -resume "$C" -prompt_tokens "$prompt" -max_new_tokens 24 -temperature 0.9 -top_k 8 -seed 5
s1=$(cat "$tmp/out")
run 2 -resume "$C" -prompt_tokens "$prompt" -max_new_tokens 24 -temperature 0.9 -top_k 8 -seed 5
same "seed 5: the same tokens on 2 ranks" "$s1"
run 0 -resume "$C" -prompt_tokens "$prompt" -max_new_tokens 24 -temperature 0.9 -top_k 8 -seed 6
checks=$((checks + 1))
if [ "$rc" -eq 0 ] && [ "$(cat "$tmp/out")" != "$s1" ] && [ "$s1" != "$greedy" ]; then
  echo "ok: seed 6 samples other tokens than seed 5, and neither is greedy"
else fail "seeded sampling: seed 5 '$s1', seed 6 '$(cat "$tmp/out")', greedy '$greedy'"; fi
# every sampled token is among the 8 most likely: the oracle ranks them
checks=$((checks + 1))
if "$py" - "$ORACLE_DIR" "$prompt" "$s1" <<'PY' >"$tmp/py.out" 2>&1; then
import sys
sys.path.insert(0, sys.argv[1])
try:
    import numpy as np
except ImportError:
    print("numpy missing: not checked"); sys.exit(0)
import greedy_oracle as g
hdr, _, _, params, _ = g.read_weights()
P = {n: np.array(a, dtype=np.float64).reshape(s) for n, s, a in params}
ids = [int(t) for t in sys.argv[2].split(",")]
for t in sys.argv[3].split():
    z = g.forward_logits(P, ids[-hdr["seq_len"]:], hdr["n_layer"], hdr["n_head"])[-1]
    rank = int((z > z[int(t)]).sum())
    if rank >= 8:
        sys.exit("token %s is number %d by likelihood, not in the top 8" % (t, rank + 1))
    ids.append(int(t))
print("every sampled token is in the top 8")
PY
  echo "ok: $(tail -1 "$tmp/py.out")"
else fail "top-k: $(tail -1 "$tmp/py.out")"; fi

# ---- decoding ---------------------------------------------------------------------
run 0 -resume "$C" -prompt_tokens "$prompt" -max_new_tokens 4 -temperature 0 -tokenizer "$tmp/tok.bin"
want=$(for t in $(echo "$prompt" | tr ',' ' ') $(echo "$greedy" | cut -d' ' -f1-4); do printf 'w%s ' "$t"; done)
same "-tokenizer FILE decodes prompt + continuation" "$want"
run 0 -resume "$C" -prompt_tokens 2,17,1,18,50 -max_new_tokens 0 -tokenizer builtin
same "-tokenizer builtin: the built-in alphabet" "$(printf 'ba za \n> be bo ')"
run 0 -resume "$C" -model custom -n_layer 2 -n_embd 32 -n_head 4 -vocab_size 64 -seq_len 16 \
  -prompt_tokens "$prompt" -max_new_tokens "$n" -temperature 0
same "model options that match the checkpoint" "$greedy"

# ---- bad input ---------------------------------------------------------------------
bad 2 "-resume" 2
bad 2 "nothere.h5" 0 -resume "$tmp/nothere.h5"
bad 2 "-prompt_tokens: token 64 is outside" 2 -resume "$C" -prompt_tokens 1,64
bad 2 "-prompt_tokens: 'a,b' is not a list" 0 -resume "$C" -prompt_tokens a,b
cp "$tmp/tiny.bin" "$tmp/tok_as_data.bin"
bad 2 "tok_as_data.bin' has magic 20240326" 2 -resume "$C" -tokenizer "$tmp/tok_as_data.bin"
head -c 1100 "$tmp/tok.bin" >"$tmp/tok_short.bin"
bad 2 "tok_short.bin' ends .*truncated" 0 -resume "$C" -tokenizer "$tmp/tok_short.bin"
bad 2 "n_layer" 2 -resume "$C" -model custom -n_layer 3 -n_embd 32 -n_head 4 -vocab_size 64 -seq_len 16
bad 2 "-temperature" 0 -resume "$C" -temperature -1

echo "$checks checks, $fails failures"
[ "$fails" -eq 0 ]
