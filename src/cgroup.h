/*  cgroup: one control group per session for memory, pids and cpu: cgroup v2 where its
 *  controllers are available, v1 controllers where they are (some machines have both, each
 *  controller bound to one). Groups are made under kenneld's own group. The kernel is placed
 *  in the group by the spawner writing its pid to the paths cgroup_procs_paths gives. */
#ifndef KENNEL_CGROUP_H
#define KENNEL_CGROUP_H

#include <stddef.h>

typedef struct {
    unsigned long long memory_bytes;  /* 0: no limit */
    unsigned long pids;               /* 0: no limit */
    double cpus;                      /* CPU time per wall second; 0: no limit */
} cgroup_limits_t;

/*  Find where memory, pids and cpu are: writes a description like "v1 memory,pids,cpu" into
 *  desc. Returns the number of the three controllers found (3 means all). Call once at start. */
int cgroup_probe(char *desc, size_t desc_len);

typedef struct cgroup cgroup_t;

/*  Name this kenneld's groups after its state directory (its real path): kennel-TAG-NAME,
 *  TAG 12 hex digits of a hash of the path. Call before the first cgroup_create; one kenneld
 *  serves a state directory at a time, so the groups with its tag are its own. */
void cgroup_set_owner(const char *state_dir);
/*  "kennel-TAG-" (or "kennel-" before cgroup_set_owner): what each group's name starts with. */
const char *cgroup_prefix(void);
/*  Remove the groups with this state directory's tag that an earlier kenneld left (it was
 *  killed, or lost power: a pooled kernel's group had no session to come back for it),
 *  killing what still runs in them. Call at start, before any group is made. Returns how
 *  many were removed or are left to cgroup_retry (still busy). */
int cgroup_sweep(void);

/*  Create the group kennel-TAG-`name` under kenneld's group in each controller and set limits. NULL with
 *  errno on failure (nothing is left behind). */
cgroup_t *cgroup_create(const char *name, const cgroup_limits_t *limits);
/*  Kill what is left in the group, remove it, free *self_p. No-op on NULL. A group a killed
 *  process has not left within ~10 ms is removed later, by cgroup_retry. */
void cgroup_destroy(cgroup_t **self_p);
/*  arm(arg) is called whenever a group is left for cgroup_retry (and at once if some
 *  already wait: cgroup_sweep's); the caller then calls cgroup_retry from a timer until it
 *  returns 0. */
void cgroup_on_pending(void (*arm)(void *), void *arg);
/*  Try again to remove the groups that were still busy (killing what is in them), each for
 *  up to ~300 tries. Returns how many still wait. */
size_t cgroup_retry(void);
/*  The NULL-terminated list of cgroup.procs files a new process writes "0" to, to join.
 *  Borrowed; valid until destroy. */
char *const *cgroup_procs_paths(const cgroup_t *self);
/*  Give the group the smallest CPU share (on: cpu.shares 2 in v1, cpu.weight 1 in v2) or the
 *  default one back (off: 1024, 100): a group in the background runs only on CPU time that
 *  no default group wants. 0, or -1 with errno; 0 without a cpu controller. */
int cgroup_set_background(cgroup_t *self, int on);
/*  Current and peak memory in bytes and the OOM kills counted so far (-1 when unknown). */
void cgroup_stats(const cgroup_t *self, long long *memory_bytes, long long *peak_bytes,
                  long long *oom_kills);

#endif
