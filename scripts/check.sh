#!/bin/sh
# `make check`'s test part (the Makefile builds first and passes PY, PYTEST, WORKERS, SUITES,
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
# Everything runs in a control group of its own in the cgroup-v1 cpu, pids and memory
# hierarchies, where one can be made (root; this script does not drive v2): kenneld makes
# its sessions' groups below its own, so a group left below one of these at the end is one a
# kenneld did not remove, and check fails, naming it.
set -u
: "${PYTEST:?}" "${WORKERS:?}" "${SUITES:?}" "${BUILD:?}" "${MAKE:=make}" "${PY:=/usr/bin/python3}"
started=$(date +%s)
since() { echo "$(( $(date +%s) - started )) s"; }

groups=   # "group home" pairs, one a line: each group made, and where this shell was
for ctrl in cpu pids memory; do
    # This shell's group in that hierarchy ("N:cpu,cpuacct:/path"), and the hierarchy's mount.
    home=$(sed -n "s/^[0-9]*:[a-z,]*\b$ctrl\b[a-z,]*://p" /proc/self/cgroup | head -n 1)
    mount=
    for d in "/sys/fs/cgroup/$ctrl" $([ $ctrl = cpu ] && echo /sys/fs/cgroup/cpu,cpuacct); do
        [ -f "$d${home%/}/cgroup.procs" ] && { mount=$d; break; }
    done
    [ -n "$home" ] && [ -n "$mount" ] || continue
    group="$mount${home%/}/kennel-check-$$"
    if mkdir "$group" 2>/dev/null && echo $$ > "$group/cgroup.procs" 2>/dev/null; then
        groups="$groups$group $mount${home%/}
"
    else
        rmdir "$group" 2>/dev/null
    fi
done

left_groups() {
    while read -r g _; do
        [ -n "$g" ] && find "$g" -mindepth 1 -type d 2>/dev/null
    done <<EOF
$groups
EOF
}

cleanup() {
    # Out of each group first (this shell; what it starts from here on is born outside),
    # then empty groups only: rmdir fails on one a process is still in.
    while read -r g home; do
        [ -n "$g" ] && echo $$ > "$home/cgroup.procs" 2>/dev/null
    done <<EOF
$groups
EOF
    while read -r g _; do
        [ -n "$g" ] || continue
        find "$g" -mindepth 1 -type d 2>/dev/null | sort -r | while read -r d; do rmdir "$d" 2>/dev/null; done
        rmdir "$g" 2>/dev/null || echo "== $g still holds processes"
    done <<EOF
$groups
EOF
    groups=
}
trap 'cleanup; exit 130' INT TERM

echo "== open files: soft $(ulimit -Sn), hard $(ulimit -Hn); cores: $(nproc)"
$PY scripts/fault_cost.py
while read -r g _; do
    [ -n "$g" ] && echo "== in control group $g (a group a kenneld leaves below it fails check)"
done <<EOF
$groups
EOF
echo "== side by side: the unit tests, then memcheck (build/unit.log, build/memcheck.log); pytest on $WORKERS workers; pytest of the tests marked spawner with KENNEL_SPAWNER=exec (build/check-exec.log)"
{ $MAKE -s --no-print-directory unit > "$BUILD/unit.log" 2>&1; echo $? > "$BUILD/unit.rc"
  $MAKE -s --no-print-directory memcheck > "$BUILD/memcheck.log" 2>&1; } & mem=$!
KENNEL_SPAWNER=exec $PYTEST -m "spawner and not quiet" $SUITES > "$BUILD/check-exec.log" 2>&1 & exe=$!
$PYTEST -n "$WORKERS" --dist loadgroup -m "not quiet" $SUITES; par=$?
wait $exe; ex=$?
wait $mem; mc=$?
echo "== side by side: done at $(since)"
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
echo "== alone: done at $(since)"
leaks=0
if [ -n "$groups" ]; then
    left=$(left_groups)
    if [ -n "$left" ]; then
        echo "== control groups a kenneld left (it removes each session's and pooled kernel's):"
        echo "$left"
        leaks=1
    fi
    cleanup
fi
[ "$un" = 0 ] && [ $par = 0 ] && [ $ex = 0 ] && [ $mc = 0 ] && [ $q = 0 ] && [ $qx = 0 ] && [ $leaks = 0 ]
