/*  reslimits: what one session may use: the walls its kernel is built with (memory, pids,
 *  cpu, /tmp, open files), its workspace's size cap, its cells' default deadline and its idle
 *  clock. Values and their JSON only: the cgroup, the sandbox, the workspace image and the
 *  session apply them, and the manager checks what a client asks for. */
#ifndef KENNEL_RESLIMITS_H
#define KENNEL_RESLIMITS_H

#include <jansson.h>

#include "cgroup.h"

typedef struct {
    cgroup_limits_t cg;              /* memory (also RLIMIT_AS), pids, cpu */
    unsigned long long tmp_bytes;    /* /tmp and /dev/shm tmpfs size */
    unsigned long nofile;            /* RLIMIT_NOFILE */
    long long timeout_ms;            /* a cell's default deadline; 0: none */
    long long idle_ms;               /* evict after this long without a client message; 0: never */
    unsigned long long disk_bytes;   /* workspace size cap (an ext4 image); 0: none */
    /* Budgets over all of the session's cells (session_limits_t.budget_*); 0: none. */
    long long budget_cpu_ms;          /* the kernel's CPU time */
    long long budget_wall_ms;         /* cells' wall time */
    long long budget_cells;           /* cells run */
    unsigned long long budget_output; /* output bytes */
} reslimits_t;

/*  The limits as the manager API shows them (create_request's units: bytes, cpus, seconds;
 *  budget_cpu and budget_wall in seconds, budget_cells a count, budget_output bytes): a new
 *  reference. */
json_t *reslimits_json(const reslimits_t *l);
/*  1 when a and b build the same kernel and workspace (all but the deadline, the idle clock
 *  and the budgets, which are kenneld's business, not the kernel's), else 0. */
int reslimits_same_walls(const reslimits_t *a, const reslimits_t *b);

#endif
