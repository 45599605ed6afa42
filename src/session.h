/*  session: one kennel session's protocol state. Queues shell requests and feeds the kernel one
 *  at a time, answers what kenneld answers itself (kernel_info, interrupt, shutdown), publishes
 *  busy/idle, checks every frame the kernel sends, aborts queued cells after an error
 *  (stop_on_error), and turns a dead kernel into error replies and a restart.
 *  It does no I/O: every effect goes through session_ops_t, so tests can record them. */
#ifndef KENNEL_SESSION_H
#define KENNEL_SESSION_H

#include <jansson.h>

#include "jmsg.h"
#include "kpipe.h"

typedef enum {
    SESSION_STARTING, /* kernel spawned, no hello yet */
    SESSION_IDLE,     /* kernel up, no request in flight */
    SESSION_BUSY,     /* a shell request is with the kernel */
    SESSION_DEAD,     /* no kernel (its start failed); the next request starts one */
    SESSION_ENDED,    /* shut down; the owner destroys it */
    SESSION_SAVING,   /* idle eviction: the kernel is pickling its namespace */
    SESSION_EVICTED,  /* no kernel, state in the snapshot; the next request revives it */
    SESSION_RESTORING,/* a revived kernel is loading the snapshot */
} session_state_t;

/*  The session's timers: a cell's deadline, the idle clock, and the flush of output held
 *  while the clients lag (outbox.h). */
typedef enum {
    SESSION_TIMER_CELL = 0,
    SESSION_TIMER_IDLE = 1,
    SESSION_TIMER_FLUSH = 2,
    SESSION_TIMER_CHECKPOINT = 3, /* a cluster node's checkpoint (session_limits_t) */
} session_timer_t;
#define SESSION_TIMERS 4

#define SESSION_TOO_LARGE -2 /* to_kernel: the parts do not fit in one frame */

typedef struct {
    /* Send msg to the clients on one ROUTE_* channel (iopub publishes; shell, control and
     * stdin route by the message's identities). Takes *msg_p. */
    void (*send)(void *ctx, unsigned channel, jmsg_t **msg_p);
    /* Write one kernel-pipe frame. 0; SESSION_TOO_LARGE when the parts cannot form a frame;
     * or -1 when the kernel cannot take it (its exit will be reported through
     * session_on_kernel_exit). */
    int (*to_kernel)(void *ctx, const kpipe_iov_t *parts, size_t n);
    /* Start a kernel process; 0, or -1 with errno. */
    int (*kernel_start)(void *ctx);
    /* Signal the running kernel (SIGINT to interrupt, SIGKILL to stop). */
    void (*kernel_signal)(void *ctx, int sig);
    /* The session has ended (shutdown_request without restart). Called once; the owner must
     * destroy the session later, not from inside this call. */
    void (*ended)(void *ctx);
    /* Arm one of the session's timers to call session_on_timer after delay_ms, replacing it
     * if armed; cancel it. */
    void (*timer_arm)(void *ctx, session_timer_t which, long long delay_ms);
    void (*timer_cancel)(void *ctx, session_timer_t which);
    /* Keep (data is copied), fetch (caller frees *data) and delete the session's snapshot.
     * store answers later, through session_on_snapshot_stored, unless it fails at once: -1
     * with the reason in *why. 0 or -1. */
    int (*snapshot_store)(void *ctx, const void *data, size_t len, const char **why);
    int (*snapshot_load)(void *ctx, void **data, size_t *len);
    void (*snapshot_drop)(void *ctx);
    /* Messages iopub holds now for subscribers that have not read them (NULL: never any).
     * Past a hundred, the session merges output it may (outbox.h) until they catch up. */
    size_t (*iopub_backlog)(void *ctx);
    /* An execute_request that reached the kernel has its reply (the kernel's, or kenneld's
     * own for a kernel that died or was killed meanwhile): the run record's moment.
     * metadata: the reply's (outcome, metrics, files, runtime_digest); ename: the error's
     * name or NULL; cell: the session's count of cells that reached a kernel, this one
     * included (those a kernel died in too; from `cells` after a restore);
     * output_bytes: what the cell published, as the output cap counts it. All borrowed for
     * the call. NULL: no records. */
    void (*cell_done)(void *ctx, const jmsg_t *request, const json_t *metadata,
                      const char *ename, long long cell, size_t output_bytes);
    /* The state session_fork_save asked for: data (borrowed for the call) and the names it
     * could not keep (array, borrowed), the kernel still running; or why NULL data could not
     * be had (the save failed, the kernel died, the session ended). NULL: no forks. */
    void (*forked)(void *ctx, const void *data, size_t len, const json_t *unsaved,
                   const char *why);
    /* The snapshot as an open file (O_RDONLY; the session closes it), for a revival to pass
     * to the kernel instead of its bytes; -1 when there is none to open (a fork's state in
     * memory: snapshot_load then). NULL: never. */
    int (*snapshot_fd)(void *ctx);
    /* Pass fd to the kernel (SCM_RIGHTS, with one byte), which asked for it; the caller
     * keeps and closes its own. fd -1: the byte alone, a refusal. 0 or -1. NULL: never. */
    int (*fd_to_kernel)(void *ctx, int fd);
    /* An eviction's or checkpoint's save the kernel writes to a file instead of sending
     * (never a fork's): snapshot_file opens a new, unnamed file where the
     * snapshot goes (O_RDWR; the session closes it), -1 when it cannot (the bytes come
     * through the pipe then); snapshot_fits says whether len bytes may be kept (0), or why
     * not (-1, *why); snapshot_store_fd keeps fd's len bytes as the snapshot, taking fd
     * (closed either way), and answers as snapshot_store does. NULL: never. */
    int (*snapshot_file)(void *ctx);
    int (*snapshot_fits)(void *ctx, size_t len, const char **why);
    int (*snapshot_store_fd)(void *ctx, int fd, size_t len, const char **why);
} session_ops_t;

/*  How a kernel ended, as far as kenneld can tell. */
typedef enum {
    SESSION_EXIT_CRASH,   /* exited or died of a signal on its own */
    SESSION_EXIT_MEMORY,  /* killed by the memory limit */
} session_exit_t;

typedef struct {
    size_t max_queued;     /* shell requests waiting behind the running one */
    int end_on_shutdown;   /* every shutdown_request ends the session (kernelspec launchers) */
    long long timeout_ms;  /* a cell's deadline unless its request says otherwise; 0: none */
    long long grace_ms;    /* after the deadline signal, how long before the kernel is killed */
    size_t max_output;     /* output bytes a cell may publish before it is cut off */
    size_t max_output_msgs; /* output messages a cell may publish, likewise; 0: no bound */
    size_t journal_bytes;  /* iopub messages of the last cells kept for replays (journal.h);
                            * 0: none */
    long long journal_age_ms; /* a cell ended longer ago is forgotten; 0: kept while room */
    long long idle_timeout_ms; /* evict after this long without a client message; 0: never */
    long long ttl_ms;      /* an evicted session unused this long (in all) ends; 0: never */
    long long checkpoint_ms; /* kenneld --cluster: once a cell has run and the session has been
                              * idle this long, its state is saved (the eviction's snapshot)
                              * and its kernel kept; 0: never */
    /* Budgets, summed over the session's cells that reached a kernel (also across restarts,
     * evictions and kenneld restarts, through session_history); once one is spent, an
     * execute_request is refused with BudgetExhausted, outcome "budget". 0: none. */
    long long budget_cpu_ms;          /* the kernel's CPU time (the replies' metrics.cpu_ms) */
    long long budget_wall_ms;         /* cells' wall time, as kenneld measured it (wall_ms) */
    long long budget_cells;           /* cells */
    unsigned long long budget_output; /* output bytes, as the output cap counts them */
} session_limits_t;

typedef struct session session_t;

/*  A session with id and name (copied). The kernel is started by session_start. NULL on
 *  allocation failure. */
session_t *session_new(const char *id, const char *name, const session_limits_t *limits,
                       const session_ops_t *ops, void *ops_ctx);
void session_destroy(session_t **self_p);
/*  Start the first kernel. 0, or -1 with errno (the session is then DEAD). */
int session_start(session_t *self);
/*  A verified client message arrived on channel (ROUTE_SHELL, ROUTE_CONTROL or ROUTE_STDIN).
 *  Takes *msg_p. */
void session_on_request(session_t *self, unsigned channel, jmsg_t **msg_p);
/*  A frame arrived from the kernel (decoded with session_kpipe_alloc; parts may be taken from
 *  it). 0, or -1 for a protocol violation (reason in *why): the caller must then kill the
 *  kernel. */
int session_on_kernel(session_t *self, kpipe_frame_t *frame, const char **why);
/*  The allocator the decoder of the frames given to session_on_kernel must use (kpipe_new_with):
 *  each part in a zframe of its own, which session_on_kernel may take from the frame to send
 *  on as it is. */
const kpipe_alloc_t *session_kpipe_alloc(void);
/*  The kernel process is gone; `how` describes it ("exited with status 1", "killed by signal
 *  9 (SIGKILL)"). In-flight work gets error replies; a kernel that had started is restarted. */
void session_on_kernel_exit(session_t *self, const char *how, session_exit_t kind);
/*  A timer armed through ops->timer_arm fired: the cell's deadline or grace period, or the
 *  idle timeout. */
void session_on_timer(session_t *self, session_timer_t which);
/*  The snapshot ops->snapshot_store took is kept (why NULL), or could not be (why says
 *  why). */
void session_on_snapshot_stored(session_t *self, const char *why);
/*  Start as a session of an earlier kenneld: evicted when its snapshot is stored
 *  (has_state), else with no kernel (DEAD: one starts on first use). Either ends when
 *  unused for its time to live. */
void session_start_restored(session_t *self, int has_state);
/*  Save the kernel's state now and evict it (kenneld is stopping): 1 when a save started,
 *  0 when there is nothing to save (no kernel), -1 when the kernel is busy. */
int session_save(session_t *self);
/*  Save the kernel's state for a fork without ending the kernel: ops->forked answers later,
 *  and the session is idle again then. Requests that come meanwhile wait, as they do during
 *  an eviction's save. 0, or -1 with errno EBUSY when the kernel is not idle with nothing
 *  queued. */
int session_fork_save(session_t *self);
/*  Start the first kernel of a fork of src (its state known, not necessarily live): the
 *  kernel restores ops->snapshot_load's snapshot before any request, as a revival does, and
 *  the first cell is told the names in unsaved (an array of strings, may be NULL; copied)
 *  and those that fail to load, saying the session was forked from src. 0, or -1 with errno
 *  (as session_start). */
int session_start_forked(session_t *self, const session_t *src, const json_t *unsaved);
/*  Add what (copied) to the names the next revival's notice lists as lost (a fork's file
 *  that could not be copied). */
void session_note_unsaved(session_t *self, const char *what);
/*  Why the kernel the session asked for (ops->kernel_start) cannot start, for the client's
 *  error reply; call before returning -1 from kernel_start. */
void session_start_failed(session_t *self, const char *why);
/*  Why the last kernel could not start ("" when it did). */
const char *session_start_error(const session_t *self);
/*  End the session now (manager end, kenneld shutdown): kills the kernel; the request with
 *  it and those waiting get a SessionEnded error reply saying why; no more replies after. */
void session_end(session_t *self, const char *why);

/*  Whether the output of the request with the kernel (or of the last one) passed its cap:
 *  what the kernel sends is dropped unread until the next request starts. */
int session_output_capped(const session_t *self);
/*  The kernel asked for input (input_request went out) and waits for the client's answer. */
int session_awaiting_input(const session_t *self);
session_state_t session_state(const session_t *self);
/*  A line the next cell is told on stderr before any other notice: a cluster node's revival
 *  says where the session's state is from. NULL: none. */
void session_set_origin(session_t *self, const char *text);
const char *session_state_name(session_state_t state);
const char *session_id(const session_t *self);
const char *session_name(const session_t *self);
/*  A new JSON object: id, name, state, created, idle_ms, cells, queued, restarts,
 *  last_outcome, budgets ({cpu, wall, cells, output}: each {limit, spent, left}; seconds for
 *  cpu and wall, bytes for output; limit 0 and left null for none). */
json_t *session_info(const session_t *self);
/*  What the session's record keeps for the next kenneld (meta.json's "history"), a new JSON
 *  object: created, cells, restarts, used_at (wall-clock ms of its last use, which its time
 *  to live counts from), spent (what its budgets counted: {cpu_ms, wall_ms, cells,
 *  output}), unsaved (names its last save could not keep, told to the cell after its
 *  revival) and notice (a line not yet told to a cell), or NULL. */
json_t *session_history(const session_t *self);
/*  Take back what session_history gave an earlier kenneld. Members missing or out of range
 *  leave the session's own values. Before session_start_restored, whose time to live counts
 *  from the last use. */
void session_history_restore(session_t *self, const json_t *history);

#endif
