/*  zygote: kenneld's side of the zygote, the warm Python that forks sealed kernels
 *  (spawner_zygote_*). Starts it on demand, with its environment, its cache and the lifeline
 *  its kernels hold; asks it for kernels, sending only descriptors (the workspace as a
 *  detached mount, the cgroup's procs files) and numbers; watches it on the loop, and stops
 *  one that died or hung (the watchdog) so that another starts. The kernels asked for are
 *  their askers' (the broker's sessions, the pool, the orphans): each holds its tickets and
 *  takes the answers when ops say so. Decides nothing about which kernels to ask for. */
#ifndef KENNEL_ZYGOTE_H
#define KENNEL_ZYGOTE_H

#include <stddef.h>
#include <sys/types.h>

#include "cgroup.h"
#include "launch.h"
#include "loop.h"
#include "reslimits.h"
#include "spawner.h"

typedef struct {
    const char *state_dir;        /* its cache goes into STATE/zygote */
    const char *python;
    const char *kernel_dir;       /* the kernel runtime (kennel_zygote.py) */
    const char *zygote_dir;       /* the zygote's C part */
    const char *preload;          /* what it imports, comma-separated */
    const char *init_path;        /* kennel-init, which each session's init execs */
    int merge_pages;              /* its kernels offer their pages to KSM */
    const sandbox_bind_t *binds;  /* --site and --data, bound read-only into every kernel */
    size_t nbinds;
} zygote_cfg_t;

/*  What the zygote's owner is told, on the loop. */
typedef struct {
    /* It said something: answers to tickets may have come (zygote_take). */
    void (*answered)(void *ctx);
    /* It is stopped and reaped: every ticket is answered SPAWNER_ZYGOTE_GONE (the kernels it
     * did not name never will be), and no clone of it can follow (kenneld's children that no
     * one holds are its strays). */
    void (*stopped)(void *ctx);
    /* It became ready, or is lost (lost 1: it died or hung, and was stopped): time to ask for
     * kernels again. */
    void (*changed)(void *ctx, int lost);
} zygote_ops_t;

typedef struct zygote zygote_t;

/*  A zygote client; no zygote runs until zygote_start. cfg's strings and launch must outlive
 *  it. NULL with errno. */
zygote_t *zygote_new(loop_t *loop, const zygote_cfg_t *cfg, const launch_t *launch,
                     const zygote_ops_t *ops, void *ctx);
/*  Stop the zygote (zygote_stop, ops called) and free. No-op on NULL. */
void zygote_destroy(zygote_t **self_p);
/*  Start the zygote if none runs; it imports in the background and says when it is ready.
 *  0, or -1 with errno. */
int zygote_start(zygote_t *self);
/*  Stop the zygote, if one runs (ops->stopped). */
void zygote_stop(zygote_t *self);
/*  After a failed request: stop the zygote if it is gone; the next request starts another. */
void zygote_check(zygote_t *self);
/*  Ask for a sealed kernel with limits' walls, slot's ids, workspace mounted and cg's
 *  procs files (cg may be NULL), starting the zygote if none runs, and once more with a new
 *  one if it is found dead. Does not wait: out gets the kernel's pipe now, and *ticket names
 *  the answer (zygote_take). 0, or -1 with why (*ticket untouched). */
int zygote_request(zygote_t *self, const char *workspace, size_t slot, const reslimits_t *limits,
                   const cgroup_t *cg, spawner_proc_t *out, unsigned long *ticket, char *why,
                   size_t why_len);
/*  The answer to ticket, as spawner_zygote_take: 1 (out's pid and pidfd filled), 0 (not
 *  yet), -1 with why, or SPAWNER_ZYGOTE_GONE with why when no zygote runs. */
int zygote_take(zygote_t *self, unsigned long ticket, spawner_proc_t *out, char *why,
                size_t why_len);
/*  1 while a zygote runs (started, not stopped), else 0. */
int zygote_running(const zygote_t *self);
/*  1 when one runs and has finished importing, else 0. */
int zygote_ready(const zygote_t *self);
/*  Its pid, or 0 when none runs. */
pid_t zygote_pid(const zygote_t *self);
/*  The pages its page hint asks each kernel for (0 when none runs, or none reported yet). */
long zygote_hint_pages(const zygote_t *self);

#endif
