#!/bin/sh
# test_probe_join.sh MPIEXEC "PREFLAGS" BINDIR: fsdp-probe's join fraction
# charges the ranks' drift, not a core slower than the other
# ([Note: joining a collective], JoinFraction in lib/plan/probe.c).
# Two ranks, each pinned to a core of its own; two busy loops share rank
# 1's core for the whole of a second probe, so rank 1 runs every stage at
# about a third of its speed.  The profile keeps the slowest rank's stage
# times, so the replay already runs at rank 1's pace, and what the ranks
# lose to meeting after every stage beyond that is small: the join
# fraction must stay under 0.4 (0.015 on the Intel machine; 0.12-0.25 on
# the AMD EPYC, where the loops' time slices leave rank 1's stages more
# uneven: real drift, and 0.3 was too near).  The first measure (each rank's waits over
# its own stages) gave rank 0's waits, two stages each, half weight: about
# 1 here, and the replay charged the slow core twice.  The probe without
# the loops is the baseline the loops must slow rank 1's stages from (1.5x
# at least, or the check proves nothing); its own fraction is printed,
# not checked (a noisy machine moves it).
# A third probe runs the ranks alike under a CPU quota of one core for
# the two of them (a cgroup, v1 or v2; root): the kernel stops the ranks
# for tens of milliseconds at a time, as a hypervisor does to a guest
# whose vCPUs run half the time.  The stage medians leave those stretches
# out and the lockstep cannot, so a fraction held against medians read
# 1.0-1.3 here (0.98 on the AMD EPYC guest of issue 29); held against the
# stages' means ([Note: lockstep against mean stage times]) it must stay
# under 0.5.  What the medians leave out is the profile's sustained factor
# ([Note: sustained speed]: the stages' mean over their median), which
# must show it: 1.1 at least (1.19-2.02 measured on a quiet machine: lower
# where the stretches fell on most passes and the medians show them
# themselves; 0.96-1.08 unthrottled).
# Without a writable cgroup that part is skipped, said so.
#   usage: test_probe_join.sh MPIEXEC "PREFLAGS" BINDIR
set -u
MPIEXEC=$1
PREFLAGS=$2
BIN=$3
# (nproc alone reports OMP_NUM_THREADS when it is set)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
[ "$cores" -ge 2 ] || { echo "SKIP: needs 2 cores ($cores)"; exit 77; }
command -v taskset >/dev/null || { echo "SKIP: needs taskset (util-linux)"; exit 77; }
tmp=$(mktemp -d /tmp/fsdp_test_probe_join.XXXXXX)
hogs=""
quota_dir=""
trap '[ -n "$hogs" ] && kill $hogs 2>/dev/null; [ -n "$quota_dir" ] && rmdir "$quota_dir" 2>/dev/null; rm -rf "$tmp"' EXIT
# each rank on the core of its rank number (Open MPI or MPICH names it)
cat >"$tmp/pin.sh" <<'SH'
#!/bin/sh
r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
exec taskset -c "$r" "$@"
SH
chmod +x "$tmp/pin.sh"
MODEL="-model custom -n_layer 2 -n_embd 256 -n_head 4 -vocab_size 4096 -seq_len 64 -batch_size 4"
# the join fraction of one probe (stdout), its output in $tmp/$1.out;
# [REPS [CGROUP_PROCS]]: its passes, and a cgroup to start it in
probe() {
  # shellcheck disable=SC2086
  timeout 240 sh -c '[ -z "$1" ] || echo $$ >"$1" || exit 1; shift; exec "$@"' sh "${3:-}" \
    "$MPIEXEC" $PREFLAGS -n 2 "$tmp/pin.sh" "$BIN/fsdp-probe" $MODEL -probe_reps "${2:-5}" \
    -probe_min_bytes 1024 -probe_max_bytes 65536 -profile_out "$tmp/$1.h5" >"$tmp/$1.out" 2>&1 ||
    { echo "FAIL: fsdp-probe ($1) failed:" >&2; tail -n 5 "$tmp/$1.out" >&2; return 1; }
  h5dump -a /compute/join_fraction "$tmp/$1.h5" 2>/dev/null | sed -n 's/.*(0): *//p'
}
quiet=$(probe quiet) || exit 1
for _ in 1 2; do
  taskset -c 1 sh -c 'while :; do :; done' &
  hogs="$hogs $!"
done
slow=$(probe slow) || exit 1
kill $hogs 2>/dev/null
hogs=""
for f in quiet slow; do grep -E 'stages at 4 |join it' "$tmp/$f.out" | sed "s/^/  $f: /"; done
echo "join fraction: ranks alike $quiet; rank 1 sharing its core with two busy loops $slow"
fails=0
awk -v s="$slow" 'BEGIN { exit !(s != "" && s + 0 >= 0 && s + 0 < 0.4) }' ||
  { echo "FAIL: with rank 1's core shared the join fraction is '$slow', expected under 0.4: a slow core charged as drift"; fails=1; }
# the slow core shows in the stage times the profile keeps (the slowest rank's)
fq=$(sed -n 's/.*stages at 4 x 64 tokens: forward \([0-9.]*\) ms.*/\1/p' "$tmp/quiet.out")
fs=$(sed -n 's/.*stages at 4 x 64 tokens: forward \([0-9.]*\) ms.*/\1/p' "$tmp/slow.out")
awk -v q="$fq" -v s="$fs" 'BEGIN { exit !(q + 0 > 0 && s + 0 > 1.5 * q) }' ||
  { echo "FAIL: the busy loops did not slow rank 1's stages (forward $fq ms alone, $fs ms shared): the check above proves nothing"; fails=1; }

sustained() { h5dump -a /compute/sustained_factor "$tmp/$1.h5" 2>/dev/null | sed -n 's/.*(0): *//p'; }
# A cgroup whose CPU quota is one core (100 ms per 100 ms period) for
# the two ranks: sets quota_dir and quota_procs, or returns 1.
quota_cgroup() {
  if [ -w /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
    quota_dir=$(mktemp -d /sys/fs/cgroup/fsdp_test_quota.XXXXXX 2>/dev/null) || { quota_dir=""; return 1; }
    echo "100000 100000" >"$quota_dir/cpu.max" 2>/dev/null || return 1
  elif [ -w /sys/fs/cgroup/cpu/cgroup.procs ]; then
    quota_dir=$(mktemp -d /sys/fs/cgroup/cpu/fsdp_test_quota.XXXXXX 2>/dev/null) || { quota_dir=""; return 1; }
    echo 100000 >"$quota_dir/cpu.cfs_period_us" && echo 100000 >"$quota_dir/cpu.cfs_quota_us" || return 1
  else
    return 1
  fi
  quota_procs=$quota_dir/cgroup.procs
}
if quota_cgroup; then
  throttled=$(probe throttled 10 "$quota_procs") || exit 1
  throttled_periods=$(sed -n 's/^nr_throttled //p' "$quota_dir/cpu.stat")
  periods=$(sed -n 's/^nr_periods //p' "$quota_dir/cpu.stat")
  grep -E 'stages at 4 |join it' "$tmp/throttled.out" | sed "s/^/  throttled: /"
  echo "join fraction under a CPU quota of one core for both ranks: $throttled ($throttled_periods of $periods periods throttled)"
  if [ "${periods:-0}" -eq 0 ] || [ $((4 * ${throttled_periods:-0})) -lt "${periods:-0}" ]; then
    # other load kept the ranks from using their core's worth: the quota
    # did not bind, and the checks below would prove nothing
    echo "SKIP (part): the quota throttled $throttled_periods of $periods periods (the machine is busy): the throttled checks prove nothing"
  else
    awk -v s="$throttled" 'BEGIN { exit !(s != "" && s + 0 >= 0 && s + 0 < 0.5) }' ||
      { echo "FAIL: under a CPU quota the join fraction is '$throttled', expected under 0.5: stretches in which the kernel stopped both ranks charged as joins"; fails=1; }
    sq=$(sustained quiet) st=$(sustained throttled)
    echo "sustained factor (the stages' mean over their median): ranks alike $sq, under the quota $st"
    awk -v s="$st" 'BEGIN { exit !(s + 0 >= 1.1) }' ||
      { echo "FAIL: under a CPU quota of one core for two ranks the sustained factor is '$st', expected 1.1 at least: the profile hides the throttled stretches"; fails=1; }
  fi
else
  echo "SKIP (part): no writable cgroup with a CPU quota here (not root, or no cpu controller): the throttled probe did not run"
fi
exit $fails
