#!/bin/sh
# `make check`'s test part (the Makefile builds first and passes PYTEST, WORKERS, SUITES,
# BUILD and MAKE in the environment):
#
# 1. side by side: the C units then valgrind over them (build/unit.log, build/memcheck.log),
#    the suites on $WORKERS pytest-xdist workers (on this terminal), and the tests marked
#    `spawner` again with KENNEL_SPAWNER=exec (build/check-exec.log);
# 2. then, alone, the tests marked `quiet` (tests/conftest.py): they compare wall times (a
#    bystander's round trip against a stall, a deadline's margin), which the others' load
#    would make them measure instead. (Run beside the rest in a cpu group of low weight,
#    they took 30 s longer, the rest 85 s longer, and the kernel tests' deadlines failed:
#    they use as much CPU as they leave. See docs/layout.md.)
#
# Everything runs in a cpu control group of its own, where one can be made (root, and a
# cgroup-v1 cpu hierarchy: this script does not drive v2): kenneld makes its sessions'
# groups below its own, so a group left below this one at the end is one a kenneld did not
# remove, and check fails, naming it.
set -u
: "${PYTEST:?}" "${WORKERS:?}" "${SUITES:?}" "${BUILD:?}" "${MAKE:=make}"

cpu_root=
for d in /sys/fs/cgroup/cpu /sys/fs/cgroup/cpu,cpuacct; do
    [ -f "$d/cpu.shares" ] && { cpu_root=$d; break; }
done
# This shell's own cpu group (cgroup v1: "N:cpu[,cpuacct]:/path"), where it goes back to.
home=$(sed -n 's/^[0-9]*:[a-z,]*\bcpu\b[a-z,]*://p' /proc/self/cgroup | head -n 1)
group=
if [ -n "$cpu_root" ] && [ -n "$home" ]; then
    group="$cpu_root${home%/}/kennel-check-$$"
    if mkdir "$group" 2>/dev/null && echo $$ > "$group/cgroup.procs"; then
        :  # what this shell starts from here on is in it
    else
        rmdir "$group" 2>/dev/null
        group=
    fi
fi

left_groups() {
    find "$group" -mindepth 1 -type d 2>/dev/null
}

cleanup() {
    [ -n "$group" ] || return 0
    echo $$ > "$cpu_root$home/cgroup.procs" 2>/dev/null
    # Empty groups only: rmdir fails on one a process is still in.
    left_groups | sort -r | while read -r g; do rmdir "$g" 2>/dev/null; done
    rmdir "$group" 2>/dev/null || echo "== $group still holds processes"
}
trap 'cleanup; exit 130' INT TERM

echo "== open files: soft $(ulimit -Sn), hard $(ulimit -Hn); cores: $(nproc)"
[ -n "$group" ] && echo "== in cpu control group $group (every group a kenneld leaves below it fails check)"
echo "== side by side: the unit tests, then memcheck (build/unit.log, build/memcheck.log); pytest on $WORKERS workers; pytest of the tests marked spawner with KENNEL_SPAWNER=exec (build/check-exec.log)"
{ $MAKE -s --no-print-directory unit > "$BUILD/unit.log" 2>&1; echo $? > "$BUILD/unit.rc"
  $MAKE -s --no-print-directory memcheck > "$BUILD/memcheck.log" 2>&1; } & mem=$!
KENNEL_SPAWNER=exec $PYTEST -m "spawner and not quiet" $SUITES > "$BUILD/check-exec.log" 2>&1 & exe=$!
$PYTEST -n "$WORKERS" --dist loadgroup -m "not quiet" $SUITES; par=$?
wait $exe; ex=$?
wait $mem; mc=$?
un=$(cat "$BUILD/unit.rc")
echo "== unit tests (build/unit.log)"
if [ "$un" = 0 ]; then
    grep -h "passed, 0 failed$\|iterations" "$BUILD/unit.log" | tr '\n' ' '; echo
else
    cat "$BUILD/unit.log"
fi
echo "== pytest with KENNEL_SPAWNER=exec (build/check-exec.log)"; cat "$BUILD/check-exec.log"
echo "== memcheck (build/memcheck.log)"; tail -n 40 "$BUILD/memcheck.log"
echo "== alone: the tests marked quiet; then those also marked spawner, with KENNEL_SPAWNER=exec"
$PYTEST -m quiet $SUITES; q=$?
KENNEL_SPAWNER=exec $PYTEST -m "spawner and quiet" $SUITES; qx=$?
leaks=0
if [ -n "$group" ]; then
    left=$(left_groups)
    if [ -n "$left" ]; then
        echo "== control groups a kenneld left (it removes each session's and pooled kernel's):"
        echo "$left"
        leaks=1
    fi
    cleanup
fi
[ "$un" = 0 ] && [ $par = 0 ] && [ $ex = 0 ] && [ $mc = 0 ] && [ $q = 0 ] && [ $qx = 0 ] && [ $leaks = 0 ]
