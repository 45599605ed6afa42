/*  meter: sessions' memory, measured off the loop on a thread of its own: the proportional
 *  and unique set sizes of each kernel's process tree (spawner_tree_memory). Reading
 *  smaps_rollup walks a process's page tables, about a millisecond for a kernel with the
 *  scientific stack mapped, and a session's code decides how many processes it runs and how
 *  much they map (200 forks sharing 1 GiB took ~0.5 s): on the loop, that stalled every
 *  session's traffic. One measure at a time, within a time budget if given. The owner decides
 *  which kernels to measure, and when, and keeps the numbers. */
#ifndef KENNEL_METER_H
#define KENNEL_METER_H

#include <stddef.h>
#include <sys/types.h>

#include "loop.h"

typedef struct {
    /* Session id's kernel pid was measured: 1 when the session took the numbers (it still
     * runs that kernel), else 0. */
    int (*measured)(void *ctx, const char *id, pid_t pid, long long pss, long long uss);
    /* The measure is over: a request that waited for it can be answered now. */
    void (*done)(void *ctx);
} meter_ops_t;

/*  A kernel to measure: its session's id (copied) and its pid. */
typedef struct {
    const char *id;
    pid_t pid;
} meter_kernel_t;

typedef struct meter meter_t;

/*  A meter whose ops run on loop. NULL with errno. */
meter_t *meter_new(loop_t *loop, const meter_ops_t *ops, void *ctx);
/*  Let the measure under way end (its ops are called), stop the thread and free. No-op on
 *  NULL. */
void meter_destroy(meter_t **self_p);
/*  Measure the n kernels, in that order, stopping after the one that passes budget_ms (0:
 *  measure them all); for_list: it is a listing's. 0: under way (ops->done when over); -1:
 *  not (out of memory). */
int meter_start(meter_t *self, const meter_kernel_t *kernels, size_t n, int for_list,
                long long budget_ms);
/*  1 while a measure is under way, else 0. */
int meter_busy(const meter_t *self);
/*  1, once, when the last measure was a listing's and is over; else 0. */
int meter_take_list(meter_t *self);
/*  1, once, when the last measure was of session id's kernel alone and the session took the
 *  numbers, however long ago it ended; else 0. */
int meter_take_info(meter_t *self, const char *id);

#endif
