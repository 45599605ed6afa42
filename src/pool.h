/*  pool: sealed kernels waiting for new sessions, so that creating a session is a hand-over
 *  (~11 ms) rather than a fork of the zygote (~50 ms). A pooled kernel is made with kenneld's
 *  default limits, under an id, directory, workspace (its image made on the worker), uid slot
 *  and cgroup chosen for it at fill time, which the session that takes it keeps. The pool is
 *  topped up in the background, one kernel per turn of the loop and at the smallest CPU share,
 *  later and later while kernels (or the zygote) keep failing; it waits 150 ms after a
 *  hand-over, so that its work does not compete with the new session's first cell.
 *  It grows with demand: as many kernels as sessions were asked for within a second (up to
 *  its max), so that the next burst like the last is a hand-over each; after `linger` without
 *  such a burst it halves back toward its size, dropping waiting kernels. */
#ifndef KENNEL_POOL_H
#define KENNEL_POOL_H

#include <stddef.h>
#include <sys/types.h>

#include "cgroup.h"
#include "launch.h"
#include "log.h"
#include "loop.h"
#include "reslimits.h"
#include "spawner.h"
#include "worker.h"
#include "zygote.h"

typedef struct {
    size_t size;                  /* kernels kept waiting; 0: no pool */
    size_t max;                   /* what a burst grows it to at most (>= size) */
    long long linger_ms;          /* a grown pool halves back after this long without a burst */
    const char *state_dir;        /* their directories are made in STATE/sessions */
    reslimits_t limits;           /* every pooled kernel's: kenneld's defaults */
    int disk_ok;                  /* workspace caps (ext4 images) can be made here */
    const char *disk_desc;        /* what the disk probe found */
    zygote_t *zygote;             /* asked for the kernels */
    launch_t *launch;             /* their uid slots and ids */
    worker_t *worker;             /* makes their workspace images */
    log_limit_t *warn_limit;      /* shared with the owner: the warnings of failed kernels */
} pool_cfg_t;

typedef struct pool pool_t;
/*  A kernel taken from the pool; the taker owns it. */
typedef struct pool_kernel pool_kernel_t;

/*  An empty pool; it fills when pool_refill says the zygote is ready. cfg's strings and
 *  objects must outlive it. NULL with errno. */
pool_t *pool_new(loop_t *loop, const pool_cfg_t *cfg);
/*  Kill, reap and remove every pooled kernel, and free. No-op on NULL. */
void pool_destroy(pool_t **self_p);
/*  The zygote became ready, or was lost (lost 1: the refill backs off): top the pool up. */
void pool_refill(pool_t *self, int lost);
/*  The zygote answered: take its answers for pooled kernels. */
void pool_collect(pool_t *self);
/*  The zygote was stopped: drop the kernels it did not name. */
void pool_forget_pending(pool_t *self);
/*  A pooled kernel for a new session with these limits (NULL: the defaults), one that has said
 *  hello if any, else one still starting; NULL when none fits or there is none. Its refill
 *  follows. */
pool_kernel_t *pool_take(pool_t *self, const reslimits_t *limits);
/*  A taken kernel's id (its directory's name) and uid slot, which the session keeps; valid
 *  until it is adopted or dropped. The slot is still taken in launch. */
const char *pool_kernel_id(const pool_kernel_t *k);
size_t pool_kernel_slot(const pool_kernel_t *k);
/*  The session took it: its process (pidfd and pipe) goes into *proc and its cgroup into *cg;
 *  the rest is freed, and *k_p set to NULL. */
void pool_kernel_adopt(pool_kernel_t **k_p, spawner_proc_t *proc, cgroup_t **cg);
/*  No session took it: killed, reaped, its directory removed, its slot given back. */
void pool_kernel_drop(pool_t *self, pool_kernel_t **k_p);
/*  How many kernels the pool keeps now: its size, or more after a burst. 0 on NULL. */
size_t pool_target(const pool_t *self);
/*  How many pooled kernels have finished starting (their hello waits). */
size_t pool_ready(const pool_t *self);
/*  1 when pid is a pooled kernel's, else 0. */
int pool_has(const pool_t *self, pid_t pid);

#endif
