/*  sweeper: removes ended sessions' directories off the loop. A directory ended for good
 *  leaves the sessions at once (a rename into STATE/trash, where no kenneld looks for
 *  sessions) and is removed on a thread of the sweeper's own, at the lowest CPU and I/O
 *  priority, out of the worker's way: a workspace without a cap can hold any number of files
 *  at any depth. What an earlier kenneld left in the trash is removed once the sweeper starts;
 *  what is left when kenneld stops waits for the next one. Decides nothing about which
 *  directories go, or when. */
#ifndef KENNEL_SWEEPER_H
#define KENNEL_SWEEPER_H

#include <stddef.h>

#include "loop.h"
#include "worker.h"

typedef struct sweeper sweeper_t;

/*  A sweeper of state_dir's trash (state_dir must outlive it), its thread's done callbacks
 *  run on loop; it starts on what the trash holds. NULL with errno. */
sweeper_t *sweeper_new(loop_t *loop, const char *state_dir);
/*  Make the removals under way or queued give up (ECANCELED, not logged), here and on other
 *  workers (sweeper_remove's `behind`): kenneld is stopping. */
void sweeper_stop(sweeper_t *self);
/*  Stop, end the thread and free. Destroy every worker given a removal first: its jobs read
 *  the sweeper's stop flag. No-op on NULL. */
void sweeper_destroy(sweeper_t **self_p);
/*  Move dir, a session's directory ended for good, into the trash at once; its new path goes
 *  into out (dir itself when it cannot move: it is then removed where it is). */
void sweeper_trash(sweeper_t *self, const char *dir, char *out, size_t out_len);
/*  Remove dir off the loop: on the sweeper's thread, or when behind is not NULL on that
 *  worker, after the jobs queued there (a snapshot still being written into dir), at normal
 *  priority. Removed here, blocking, if it cannot be queued. */
void sweeper_remove(sweeper_t *self, worker_t *behind, const char *dir);
/*  Trash dir now and remove it off the loop. */
void sweeper_discard(sweeper_t *self, const char *dir);

#endif
