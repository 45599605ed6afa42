/*  orphans: killed kernels waiting to be reaped, each with what must wait for it to be gone:
 *  its cgroup, its workspace's mount, its directory (already in the trash). A kernel is
 *  killed as soon as its pid is known (a zygote may still owe it) and reaped only through its
 *  pidfd, on the loop, so nothing is left running or unreaped and nothing of it is removed
 *  under it. Also takes kenneld's children that nothing holds (strays: kernels a zygote
 *  cloned but never named). Decides nothing about which kernels go: the broker does. */
#ifndef KENNEL_ORPHANS_H
#define KENNEL_ORPHANS_H

#include <limits.h>
#include <sys/types.h>

#include "cgroup.h"
#include "loop.h"
#include "spawner.h"
#include "sweeper.h"
#include "worker.h"
#include "zygote.h"

/*  A kernel given up, and what waits for it. */
typedef struct {
    spawner_proc_t proc;     /* its process, pidfd and pipe (taken); pidfd -1 when none */
    unsigned long ticket;    /* or: the zygote has still to say its pid (killed then) */
    cgroup_t *cg;            /* taken: removed once it is gone; or NULL */
    char dir[PATH_MAX];      /* a directory to remove (in the trash) once it is gone, or "" */
    char mount[PATH_MAX];    /* a workspace image to unmount once it is gone, or "" */
    worker_t *remover;       /* removes dir behind its own jobs (a snapshot being written
                              * there: sweeper_remove's `behind`), or NULL: the sweeper */
} orphan_t;

typedef struct orphans orphans_t;

/*  Orphans watched on loop; tickets are the zygote's; directories go to the sweeper. NULL
 *  with errno. */
orphans_t *orphans_new(loop_t *loop, zygote_t *zygote, sweeper_t *sweeper);
/*  Wait (bounded) for every orphan, then release what waited for it, and free. Only at
 *  shutdown, once the loop no longer runs. No-op on NULL. */
void orphans_destroy(orphans_t **self_p);
/*  Take o (copied: its process, cgroup and paths are the orphans' from now on): killed now if
 *  it has a pidfd, when the zygote says its pid if it has a ticket, else released at once.
 *  0, or -1 with errno when its pidfd cannot be watched (it is kept all the same). */
int orphans_add(orphans_t *self, const orphan_t *o);
/*  The zygote answered: orphans whose pid it said are killed and watched; those it never will
 *  (it failed, or is gone) have nothing to kill. */
void orphans_collect(orphans_t *self);
/*  1 when pid is an orphan's, else 0. */
int orphans_has(const orphans_t *self, pid_t pid);
/*  Kill and keep as orphans kenneld's children that neither the orphans nor known(ctx, pid)
 *  hold. Call once the zygote is reaped, so that no clone of it can follow; every other child
 *  of kenneld is a kernel it knows. */
typedef int(orphans_known_fn)(void *ctx, pid_t pid);
void orphans_strays(orphans_t *self, orphans_known_fn *known, void *ctx);

#endif
