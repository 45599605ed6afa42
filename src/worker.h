/*  worker: one background thread for the blocking work kenneld's loop must not wait on
 *  (making and mounting a workspace image, writing a snapshot: tens of milliseconds of I/O,
 *  fsync and kernel locks, which on the loop stalled every session's traffic). Jobs run one at a time, in the order given;
 *  each one's done callback then runs on the loop's thread, in the same order. A job's run
 *  function must touch nothing but its argument: everything else of kenneld is the loop's. */
#ifndef KENNEL_WORKER_H
#define KENNEL_WORKER_H

#include <stddef.h>

#include "loop.h"

typedef struct worker worker_t;

/*  On the worker thread. */
typedef void(worker_run_fn)(void *arg);
/*  On the loop's thread, once run(arg) has returned. */
typedef void(worker_done_fn)(void *arg);

/*  A worker whose done callbacks run on loop. Its thread blocks every signal. NULL with errno. */
worker_t *worker_new(loop_t *loop);
/*  Queue run(arg), then done(arg). 0, or -1 with errno (ENOMEM; ECANCELED once
 *  worker_destroy has begun). */
int worker_submit(worker_t *self, worker_run_fn *run, worker_done_fn *done, void *arg);
/*  Let every queued job run, call their done callbacks here, stop the thread and free the
 *  worker. No-op on NULL. Not from inside a done callback. */
void worker_destroy(worker_t **self_p);

#endif
