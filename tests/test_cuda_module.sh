#!/bin/bash
# test_cuda_module.sh (CUDA builds only; label cpu: needs no GPU):
# [Note: the CUDA module] (lib/device/cuda_module.h).  libfsdp and the
# programs link no CUDA library (only libfsdp-cuda.so does); a -device cpu
# run loads none of them, and still trains where they cannot be found (a
# private mount namespace hides every folder that holds them, where
# unshare is permitted); -device cuda without a loadable module is a usage
# error (status 2) naming the module's file and the loader's reason.
#   usage: test_cuda_module.sh BUILDDIR
set -u
B=$1
lib=$B/lib/.libs
train=$B/src/fsdp-train
tmp=$(mktemp -d /tmp/fsdp_test_cudamod.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
cuda_re='lib(cudart|cublas|cublasLt|nccl|cuda|fsdp-cuda)\.so'
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
for f in "$lib"/libfsdp.so.0 "$B"/src/.libs/fsdp-*; do
  [ -f "$f" ] || continue
  if needed "$f" | grep -Eq "^$cuda_re"; then
    echo "FAIL: $f needs a CUDA library: $(needed "$f" | grep -E "^$cuda_re" | tr '\n' ' ')"; fail=1
  fi
done
[ -f "$lib/libfsdp-cuda.so" ] || { echo "FAIL: no $lib/libfsdp-cuda.so"; exit 1; }
for want in libcudart libnccl libcublas; do
  needed "$lib/libfsdp-cuda.so" | grep -q "^$want" || { echo "FAIL: libfsdp-cuda.so does not need $want"; fail=1; }
done
common="-model tiny -steps 3 -seed 3 -log_every 0 -summary json"
# a -device cpu run loads no CUDA library (the loader's own account)
# shellcheck disable=SC2086
LD_DEBUG=files "$train" $common -device cpu >"$tmp/cpu" 2>"$tmp/cpu.ld" || { echo "FAIL: -device cpu run"; tail "$tmp/cpu.ld"; fail=1; }
if grep -E "file=[^ ]*$cuda_re" "$tmp/cpu.ld" | head -3 | grep .; then
  echo "FAIL: the -device cpu run loaded a CUDA library (above)"; fail=1
fi
# -device cuda, module missing: usage error naming the file
# shellcheck disable=SC2086
FSDP_CUDA_MODULE=$tmp/nowhere/libfsdp-cuda.so "$train" $common -device cuda >"$tmp/miss" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "cannot load the CUDA back-end $tmp/nowhere/libfsdp-cuda.so" "$tmp/miss"; then
  echo "FAIL: -device cuda without the module: status $rc"; cat "$tmp/miss"; fail=1
fi
# -device cuda with the module: it loads (no GPU here: "no usable GPU", 2)
# shellcheck disable=SC2086
"$train" $common -device cuda >"$tmp/real" 2>&1
rc=$?
if grep -q "cannot load the CUDA back-end" "$tmp/real" || { [ $rc -ne 0 ] && [ $rc -ne 2 ]; }; then
  echo "FAIL: -device cuda with the module: status $rc"; cat "$tmp/real"; fail=1
fi
# hide the folders of the CUDA libraries (tmpfs over each, private mounts)
dirs=$(ldd "$lib/libfsdp-cuda.so" | awk '$1 ~ /^lib(cudart|nccl|cublas)/ && $3 ~ /^\// {print $3}' |
  while read -r p; do dirname "$p"; dirname "$(readlink -f "$p")"; done | sort -u)
if [ -n "$dirs" ] && unshare -rm true 2>/dev/null; then
  # shellcheck disable=SC2086
  unshare -rm bash -c 'for d in $1; do mount -t tmpfs none "$d" || exit 3; done; shift
    "$@" -device cpu >"'"$tmp"'/hidden" 2>&1 || exit 4
    "$@" -device cuda >"'"$tmp"'/hidden_cuda" 2>&1; echo $? >"'"$tmp"'/hidden_cuda.rc"' \
    _ "$dirs" env -u LD_LIBRARY_PATH "$train" $common
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: -device cpu with the CUDA libraries hidden: status $rc"; cat "$tmp/hidden" 2>/dev/null; fail=1
  elif ! python3 - "$tmp/cpu" "$tmp/hidden" <<'PY'
import json, sys
a, b = (json.loads([l for l in open(p) if l.startswith("{")][-1])["losses"] for p in sys.argv[1:])
sys.exit(0 if a == b and a else 1)
PY
  then
    echo "FAIL: -device cpu with the CUDA libraries hidden: other losses"; fail=1
  elif [ "$(cat "$tmp/hidden_cuda.rc")" != 2 ] || ! grep -q "cannot load the CUDA back-end .*libfsdp-cuda.so: lib.*: cannot open shared object file" "$tmp/hidden_cuda"; then
    echo "FAIL: -device cuda with the CUDA libraries hidden: status $(cat "$tmp/hidden_cuda.rc")"; cat "$tmp/hidden_cuda"; fail=1
  else
    echo "hidden ($(echo $dirs)): -device cpu trains, -device cuda: $(grep -m1 -o 'cannot load.*' "$tmp/hidden_cuda" | cut -c1-160)"
  fi
else
  echo "note: unshare not permitted: the run with the CUDA libraries hidden is skipped"
fi
exit $fail
