# testlib.sh: the plumbing the shell tests share (POSIX sh; sourced, not
# run): a test says what it checks, this file how a check is counted, how
# a program is run and where its files go.
#   . "$(dirname "$0")/testlib.sh"
#
#   testlib_python MODULES WHY  $py: the first of /usr/bin/python3, python3
#                               that imports MODULES ("h5py, numpy"); else
#                               print SKIP: WHY and exit 77
#   testlib_tmpdir NAME         $tmp: a new /tmp/NAME.XXXXXX, removed at exit
#                               after cleanup() (define it to stop what the
#                               test started: a job, a mount)
#   fail MESSAGE                a failed check: FAIL: MESSAGE, $fails + 1
#   run NP OUT OPTIONS...       fsdp-train ($TRAIN) on NP ranks under
#                               $MPIEXEC $PREFLAGS, stdout in OUT, stderr in
#                               OUT.err, killed after $RUN_TIMEOUT s
#                               (default 120); its exit status (124: hung)
#   expect STATUS PATTERN ARGS...  fsdp-ckpt ($CKPT) ARGS, one process: its
#                               exit status is STATUS and stdout+stderr
#                               ($tmp/out) match PATTERN (grep -E); $checks + 1
#   has PATTERN                 the last expect's output also matches it

fails=0
checks=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

testlib_python() {
  py=""
  for p in /usr/bin/python3 python3; do
    if "$p" -c "import $1" >/dev/null 2>&1; then py=$p; break; fi
  done
  if [ -z "$py" ]; then
    echo "SKIP: $2"
    exit 77
  fi
}

cleanup() { :; }
testlib_tmpdir() {
  tmp=$(mktemp -d "/tmp/$1.XXXXXX")
  trap 'cleanup; rm -rf "$tmp"' EXIT
}

run() {
  np=$1 out=$2
  shift 2
  # shellcheck disable=SC2086
  timeout "${RUN_TIMEOUT:-120}" "$MPIEXEC" $PREFLAGS -n "$np" "$TRAIN" "$@" >"$out" 2>"$out.err"
}

expect() {
  want=$1 pattern=$2
  shift 2
  checks=$((checks + 1))
  timeout 120 "$CKPT" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  got=$?
  cat "$tmp/stdout" "$tmp/stderr" >"$tmp/out"
  if [ "$got" -ne "$want" ]; then
    fail "fsdp-ckpt $*: exit status $got, expected $want"
    sed 's/^/    /' "$tmp/out" | tail -8
  elif ! grep -E -q -- "$pattern" "$tmp/out"; then
    fail "fsdp-ckpt $*: output lacks /$pattern/"
    sed 's/^/    /' "$tmp/out" | tail -8
  else
    echo "ok: fsdp-ckpt $* -> $got: $(grep -E -m1 -- "$pattern" "$tmp/out")"
  fi
}

has() {
  checks=$((checks + 1))
  if grep -E -q -- "$1" "$tmp/out"; then echo "ok:   ... $(grep -E -m1 -- "$1" "$tmp/out")"
  else fail "output lacks /$1/"; sed 's/^/    /' "$tmp/out" | tail -40; fi
}
