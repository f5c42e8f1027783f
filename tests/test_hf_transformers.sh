#!/bin/sh
# test_hf_transformers.sh: what fsdp-ckpt export-hf writes, loaded by
# transformers itself (from_pretrained) and run on the golden tokens of
# tests/oracle/hf/<folder>/oracle.json: logits within 1e-5 of the golden
# float64 logits (tests/oracle/hf_oracle.py --check-export), for GPT-2
# (F32 and BF16 sources) and Llama (tied, untied).  Needs a Python with
# torch and transformers: $FSDP_HF_PYTHON, /opt/oracle-venv/bin/python or
# python3; skips (77) without one (CI has no torch).
#   usage: test_hf_transformers.sh BUILD_DIR SRC_DIR
set -u
BUILD=$1
SRCDIR=$2
py=""
for p in ${FSDP_HF_PYTHON:-} /opt/oracle-venv/bin/python python3; do
  if "$p" -c 'import torch, transformers' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no Python with torch and transformers (set FSDP_HF_PYTHON); the export is checked against transformers only where they are installed"
  exit 77
fi
tmp=$(mktemp -d /tmp/fsdp_test_hft.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
folders="" goldens=""
for d in gpt2 gpt2-bf16 llama-tied llama-untied; do
  "$BUILD/src/fsdp-ckpt" import-hf "$SRCDIR/tests/oracle/hf/$d" "$tmp/$d.h5" >/dev/null &&
    "$BUILD/src/fsdp-ckpt" export-hf "$tmp/$d.h5" "$tmp/ex-$d" >/dev/null ||
    { echo "FAIL: fsdp-ckpt import-hf/export-hf $d"; exit 1; }
  folders="$folders $tmp/ex-$d" goldens="$goldens $SRCDIR/tests/oracle/hf/$d/oracle.json"
done
# one Python process (importing torch is the slow part)
# shellcheck disable=SC2086
"$py" "$SRCDIR/tests/oracle/hf_oracle.py" --check-export $folders --golden $goldens --tol 1e-5 2>/dev/null
