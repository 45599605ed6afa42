/*  session: the protocol core of one session. The invariants that matter:
 *  - at most one shell request is with the kernel (`current`); the rest wait in `queue`;
 *  - every request that expects a reply gets exactly one, even when the kernel dies;
 *  - busy is published before a request reaches the kernel and idle after its reply (after
 *    the kernel's `done` for a comm message, which has no reply), with that request as
 *    parent, so clients see ipykernel's order;
 *  - the kernel never chooses headers, parents or destinations: replies go to the identities
 *    of the request being served, and anything out of protocol is a violation. */
#include "session.h"

#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include <czmq.h>

#include "journal.h"
#include "jvalid.h"
#include "log.h"
#include "outbox.h"
#include "route.h"
#include "util.h"

#define KERNEL_LOG_PER_MINUTE 20 /* kernel log lines kenneld logs, per session */
#define KERNEL_LOG_CHARS 400     /* and the characters of each it keeps */
#define SAVE_DEADLINE_MS 60000 /* to save or restore state, where cells have no deadline */
/* Writing a snapshot of N bytes once it is made: at least SAVE_WRITE_MIN_MS, and 1 ms per
 * SAVE_WRITE_BYTES_PER_MS bytes (20 MB/s, a slow disk's speed; this VM writes ~250). */
#define SAVE_WRITE_MIN_MS 2000
#define SAVE_WRITE_BYTES_PER_MS 20000
#define INFO_WAITING 64 /* kernel_info requests kept until the first hello */
#define CELL_RESULT 1
#define CELL_ERROR 2
/* A cell's output is charged this much per message against --max-output, beyond its bytes:
 * what a message costs kenneld (a parse, a header, a signature) hardly depends on its size,
 * and a flood of tiny messages (clear_output has ~17 bytes of content) was nearly free. */
#define OUTPUT_MSG_COST 64
/* When the outbox merges a kernel's output (outbox.h), sending what it holds every
 * OUTBOX_FLUSH_MS (ipykernel flushes a stream every 200 ms): while iopub holds BEHIND_MSGS
 * messages its subscribers have not read (a fast client never lags this far), and once
 * OUTPUT_BURST_MSGS went out within one OUTBOX_FLUSH_MS. The second is what a Python client
 * that lags is seen by: the thousands of messages its socket buffers and receive queue take
 * in are no longer kenneld's to count, and it took seconds to read through them. */
#define BEHIND_MSGS 100
#define OUTPUT_BURST_MSGS 64
#define OUTBOX_FLUSH_MS 50

struct session {
    char *id;
    char *name;
    char kernel_session[40];   /* the `session` field of every header kennel writes */
    session_limits_t limits;
    const session_ops_t *ops;
    void *ctx;
    session_state_t state;
    zlistx_t *queue;           /* jmsg_t* shell requests not yet sent to the kernel */
    zlistx_t *info_waiting;    /* kernel_info requests that arrived before the first hello */
    unsigned info_channels[INFO_WAITING]; /* channel each waiting kernel_info came on */
    jmsg_t *current;           /* the shell request with the kernel, or NULL */
    jmsg_t *last;              /* the last request served: parent of stray output */
    int awaiting_input;        /* the kernel sent input_request and waits for input_reply */
    int restart_pending;       /* a restart was asked for; start a kernel when this one exits */
    int had_hello;             /* this kernel said hello (a crash after that restarts it) */
    long long execution_count; /* the count of the last cell this kernel announced (its
                                * execute_input); 0 for a fresh one */
    json_t *kernel_info;       /* hello content, cached across restarts */
    char start_error[256];     /* why the last kernel could not start (its fatal frame) */
    log_limit_t kernel_log;    /* the kernel's log lines: KERNEL_LOG_PER_MINUTE */
    /* The cell with the kernel (current), when it is an execute_request (the deadline, also
     * when it is a comm message): */
    long long cell_started_ms; /* monotonic time it was sent */
    long long cell_timeout_ms; /* its deadline, 0 for none */
    int deadline_phase;        /* 0 none, 1 deadline armed, 2 signalled (grace armed), 3 killed */
    int cell_interrupted;      /* an interrupt_request came while it ran */
    size_t cell_output;        /* output bytes it has published (and since, until the next) */
    int cell_truncated;        /* it hit the output cap */
    int cell_ends_shown;       /* CELL_RESULT | CELL_ERROR: sent past the cap already */
    size_t cell_msgs;          /* output messages it has published (as cell_output) */
    outbox_t *outbox;          /* iopub output held while the clients lag */
    journal_t *journal;        /* iopub messages of the last cells, for replays */
    int flush_armed;           /* SESSION_TIMER_FLUSH is armed for it */
    long long burst_ms;        /* when the current OUTBOX_FLUSH_MS window of output began */
    size_t burst_msgs;         /* output messages sent in it */
    char last_outcome[24];     /* outcome of the last execute_request, for info */
    int storing;               /* the kernel sent its state; ops->snapshot_store keeps it */
    int evicting;              /* the kernel is being killed after saving its state */
    int dirty;                 /* a cell ran since the last save (checkpoint_ms) */
    int checkpointing;         /* the save under way is a checkpoint: the kernel stays */
    int stopping;              /* kenneld is stopping: session_save evicts, no TTL runs */
    int live_at_stop;          /* restored: the last kenneld stopped with its kernel alive */
    int restore_pending;       /* the next hello gets the snapshot */
    int save_fd;               /* the file a save goes to (ops->snapshot_file), passed once the
                                * kernel says its size (save_ready); -1: the pipe carries it */
    size_t save_len;           /* what save_ready announced; 0 before */
    char save_refused[200];    /* why the file was refused at save_ready, for the log */
    int restore_fd;            /* the snapshot's file, sent once the kernel is ready for it
                                * (restore_ready); -1: none */
    int forking;               /* the state being saved is for a fork (session_fork_save):
                                * the kernel stays, its state goes to ops->forked */
    char *forked_from;         /* a fork's source's name: what the notice of lost names says */
    json_t *unsaved;           /* names the last save could not keep (array) */
    char *notice;              /* told to the next cell: what a revival lost */
    char *origin;              /* told to the next cell first: where a moved session's state
                                * is from (cluster) */
    char created[UTIL_ISO_LEN];
    long long active_ms;       /* monotonic time of the last client message */
    long long used_ms;         /* ... or of the end of a request, if later: what the time to
                                * live counts from (a day-long cell is no disuse) */
    long long cells;           /* execute_requests finished */
    long long ran;             /* execute_requests that reached a kernel, those it died in
                                * too: the run records' cell numbers (from cells at a restore) */
    long long restarts;
    /* What the budgets count (session_limits_t.budget_*), over every cell that reached a
     * kernel: */
    long long spent_cpu_ms;
    long long spent_wall_ms;
    long long spent_cells;
    unsigned long long spent_output;
    log_limit_t warn_limit;
};

static void s_jmsg_free(void **item)
{
    jmsg_destroy((jmsg_t **)item);
}

static void s_outbox_send(void *arg, jmsg_t **msg_p);

static void s_restore_fd_close(session_t *self)
{
    if (self->restore_fd >= 0)
        close(self->restore_fd);
    self->restore_fd = -1;
}

static void s_save_fd_close(session_t *self)
{
    if (self->save_fd >= 0)
        close(self->save_fd);
    self->save_fd = -1;
    self->save_len = 0;
}

session_t *session_new(const char *id, const char *name, const session_limits_t *limits,
                       const session_ops_t *ops, void *ops_ctx)
{
    session_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->id = strdup(id);
    self->name = strdup(name);
    self->queue = zlistx_new();
    self->info_waiting = zlistx_new();
    self->outbox = outbox_new(s_outbox_send, self);
    self->journal = journal_new(limits->journal_bytes, limits->journal_age_ms);
    if (!self->id || !self->name || !self->queue || !self->info_waiting || !self->outbox ||
        !self->journal) {
        session_destroy(&self);
        return NULL;
    }
    zlistx_set_destructor(self->queue, s_jmsg_free);
    zlistx_set_destructor(self->info_waiting, s_jmsg_free);
    util_uuid(self->kernel_session);
    self->limits = *limits;
    self->ops = ops;
    self->ctx = ops_ctx;
    self->state = SESSION_DEAD;
    self->restore_fd = -1;
    self->save_fd = -1;
    util_iso_now(self->created);
    self->active_ms = self->used_ms = util_now_ms();
    return self;
}

void session_destroy(session_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    session_t *self = *self_p;
    s_restore_fd_close(self);
    s_save_fd_close(self);
    zlistx_destroy(&self->queue);
    zlistx_destroy(&self->info_waiting);
    outbox_destroy(&self->outbox);
    journal_destroy(&self->journal);
    jmsg_destroy(&self->current);
    jmsg_destroy(&self->last);
    json_decref(self->kernel_info);
    json_decref(self->unsaved);
    free(self->notice);
    free(self->origin);
    free(self->forked_from);
    free(self->id);
    free(self->name);
    free(self);
    *self_p = NULL;
}

int session_awaiting_input(const session_t *self)
{
    return self->awaiting_input && self->state == SESSION_BUSY;
}

int session_output_capped(const session_t *self)
{
    return self->cell_truncated;
}

session_state_t session_state(const session_t *self)
{
    return self->state;
}

const char *session_state_name(session_state_t state)
{
    static const char *names[] = {"starting", "idle", "busy",   "dead",
                                  "ended",    "saving", "evicted", "restoring"};
    return names[state];
}

const char *session_id(const session_t *self)
{
    return self->id;
}

const char *session_name(const session_t *self)
{
    return self->name;
}

/*  One budget as info shows it: {limit, spent, left}, in seconds for one counted in
 *  milliseconds (ms), else as counted; limit 0 and left null for none. */
static json_t *s_budget_json(long long limit, long long spent, int ms)
{
    long long left = spent < limit ? limit - spent : 0;
    if (!ms)
        return json_pack("{s:I, s:I, s:o}", "limit", (json_int_t)limit, "spent", (json_int_t)spent,
                         "left", limit > 0 ? json_integer((json_int_t)left) : json_null());
    return json_pack("{s:f, s:f, s:o}", "limit", limit / 1000.0, "spent", spent / 1000.0, "left",
                     limit > 0 ? json_real(left / 1000.0) : json_null());
}

json_t *session_info(const session_t *self)
{
    const session_limits_t *l = &self->limits;
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:s, s:{s:o, s:o, s:o, s:o}}", "id",
                     self->id, "name", self->name, "state", session_state_name(self->state),
                     "created", self->created, "idle_ms",
                     (json_int_t)(util_now_ms() - self->active_ms), "cells",
                     (json_int_t)self->cells, "queued", (json_int_t)zlistx_size(self->queue),
                     "restarts", (json_int_t)self->restarts, "last_outcome", self->last_outcome,
                     "budgets", "cpu", s_budget_json(l->budget_cpu_ms, self->spent_cpu_ms, 1),
                     "wall", s_budget_json(l->budget_wall_ms, self->spent_wall_ms, 1), "cells",
                     s_budget_json(l->budget_cells, self->spent_cells, 0), "output",
                     s_budget_json((long long)l->budget_output, (long long)self->spent_output, 0));
}

#define HISTORY_MAX_NAMES 256 /* unsaved names a record keeps: the notice shows ~1 KiB */
#define HISTORY_MAX_NAME 256  /* bytes of one (a Python name is rarely over 30) */

/*  The names of `names` (an array) a record keeps: strings, bounded in number and size. */
static json_t *s_history_names(const json_t *names)
{
    json_t *kept = json_array();
    for (size_t i = 0; kept && i < json_array_size(names); i++) {
        const json_t *name = json_array_get(names, i);
        if (json_is_string(name) && json_string_length(name) <= HISTORY_MAX_NAME &&
            json_array_size(kept) < HISTORY_MAX_NAMES)
            json_array_append(kept, (json_t *)name);
    }
    return kept;
}

/*  A time as util_iso_now writes it: digits, '-', ':', '.', 'T' and 'Z', at least a date. */
static int s_iso_like(const char *text)
{
    size_t n = strlen(text);
    return n >= 10 && n < UTIL_ISO_LEN && strspn(text, "0123456789-:.TZ") == n;
}

static void s_set_notice(session_t *self, const char *text);

json_t *session_history(const session_t *self)
{
    json_t *h = json_pack("{s:s, s:I, s:I, s:I}", "created", self->created, "cells",
                          (json_int_t)self->cells, "restarts", (json_int_t)self->restarts,
                          "used_at",
                          (json_int_t)(util_wall_ms() - (util_now_ms() - self->used_ms)));
    if (h && self->unsaved)
        json_object_set_new(h, "unsaved", s_history_names(self->unsaved));
    if (h && self->notice)
        json_object_set_new(h, "notice", json_string(self->notice));
    if (h && self->last_outcome[0])
        json_object_set_new(h, "last_outcome", json_string(self->last_outcome));
    if (h)
        json_object_set_new(
            h, "spent",
            json_pack("{s:I, s:I, s:I, s:I}", "cpu_ms", (json_int_t)self->spent_cpu_ms, "wall_ms",
                      (json_int_t)self->spent_wall_ms, "cells", (json_int_t)self->spent_cells,
                      "output", (json_int_t)self->spent_output));
    /* A kernel alive when kenneld stopped, which had run cells, and whose state was not
     * saved (a cell ran, the save failed or ran out of time): the next kenneld tells the
     * first cell, should it find no snapshot (one still being written now is found). */
    if (h && self->stopping && self->state != SESSION_EVICTED && self->state != SESSION_DEAD &&
        self->execution_count > 0)
        json_object_set_new(h, "live_at_stop", json_true());
    return h;
}

void session_history_restore(session_t *self, const json_t *h)
{
    const char *created = json_string_value(json_object_get(h, "created"));
    if (created && s_iso_like(created))
        snprintf(self->created, sizeof self->created, "%s", created);
    const json_t *cells = json_object_get(h, "cells"), *restarts = json_object_get(h, "restarts");
    if (json_is_integer(cells) && json_integer_value(cells) >= 0)
        self->ran = self->cells = json_integer_value(cells);
    if (json_is_integer(restarts) && json_integer_value(restarts) >= 0)
        self->restarts = json_integer_value(restarts);
    const json_t *used = json_object_get(h, "used_at");
    if (json_is_integer(used) && json_integer_value(used) >= 0) {
        /* As long ago as then (a time in the future: now). */
        long long wall = util_wall_ms(), at = json_integer_value(used);
        self->used_ms = util_now_ms() - (at < wall ? wall - at : 0);
        self->active_ms = self->used_ms; /* idle_ms: since its last use, not this start */
    }
    const json_t *unsaved = json_object_get(h, "unsaved");
    if (json_is_array(unsaved)) {
        json_decref(self->unsaved);
        self->unsaved = s_history_names(unsaved);
    }
    const char *notice = json_string_value(json_object_get(h, "notice"));
    if (notice && strlen(notice) < 2048)
        s_set_notice(self, notice);
    self->live_at_stop = json_is_true(json_object_get(h, "live_at_stop"));
    const char *outcome = json_string_value(json_object_get(h, "last_outcome"));
    if (outcome && strlen(outcome) < sizeof self->last_outcome &&
        strspn(outcome, "abcdefghijklmnopqrstuvwxyz_") == strlen(outcome))
        snprintf(self->last_outcome, sizeof self->last_outcome, "%s", outcome);
    const json_t *spent = json_object_get(h, "spent");
    long long *counts[] = {&self->spent_cpu_ms, &self->spent_wall_ms, &self->spent_cells};
    const char *keys[] = {"cpu_ms", "wall_ms", "cells"};
    for (int i = 0; i < 3; i++) {
        const json_t *v = json_object_get(spent, keys[i]);
        if (json_is_integer(v) && json_integer_value(v) >= 0)
            *counts[i] = json_integer_value(v);
    }
    const json_t *out = json_object_get(spent, "output");
    if (json_is_integer(out) && json_integer_value(out) >= 0)
        self->spent_output = (unsigned long long)json_integer_value(out);
}

/* ---- sending ---------------------------------------------------------------------------- */

/*  Send msg on channel now; what goes to iopub goes into the journal too. Takes *msg_p. */
static void s_emit(session_t *self, unsigned channel, jmsg_t **msg_p)
{
    if (channel == ROUTE_IOPUB) {
        /* Serialised once, for the journal and the wire both (a failure only costs that). */
        (void)jmsg_freeze(*msg_p);
        journal_add(self->journal, *msg_p, util_now_ms());
    }
    self->ops->send(self->ctx, channel, msg_p);
}

/*  What the outbox sends goes straight to iopub. */
static void s_outbox_send(void *arg, jmsg_t **msg_p)
{
    s_emit(arg, ROUTE_IOPUB, msg_p);
}

/*  Keep the flush timer armed exactly while the outbox holds something. */
static void s_flush_timer(session_t *self)
{
    int held = outbox_held(self->outbox) > 0;
    if (held && !self->flush_armed)
        self->ops->timer_arm(self->ctx, SESSION_TIMER_FLUSH, OUTBOX_FLUSH_MS);
    else if (!held && self->flush_armed)
        self->ops->timer_cancel(self->ctx, SESSION_TIMER_FLUSH);
    self->flush_armed = held;
}

/*  Send msg on channel after the output the outbox holds: every message the session sends
 *  goes through here or s_send_output, so clients see the kernel's order. Takes *msg_p. */
static void s_send(session_t *self, unsigned channel, jmsg_t **msg_p)
{
    if (outbox_held(self->outbox)) {
        outbox_flush(self->outbox);
        s_flush_timer(self);
    }
    s_emit(self, channel, msg_p);
}

/*  Whether the outbox should merge output now: iopub's subscribers lag, or output comes
 *  faster than any client reads it one message at a time. */
static int s_behind(session_t *self)
{
    long long now = util_now_ms();
    if (now - self->burst_ms >= OUTBOX_FLUSH_MS) {
        self->burst_ms = now;
        self->burst_msgs = 0;
    }
    if (++self->burst_msgs > OUTPUT_BURST_MSGS)
        return 1;
    return self->ops->iopub_backlog && self->ops->iopub_backlog(self->ctx) >= BEHIND_MSGS;
}

/*  Send a kernel's output on iopub, through the outbox. Takes *msg_p. */
static void s_send_output(session_t *self, jmsg_t **msg_p)
{
    outbox_put(self->outbox, msg_p, s_behind(self));
    s_flush_timer(self);
}

/*  Publish msg_type on iopub with parent as parent_header; steals content. */
static void s_publish(session_t *self, const jmsg_t *parent, const char *msg_type, json_t *content)
{
    /* (no content: json_pack ran out of memory; an empty part would be sent as {}) */
    jmsg_t *m = content ? jmsg_new(msg_type, self->kernel_session) : NULL;
    if (!m || (parent && jmsg_set_parent_from(m, parent) < 0)) {
        jmsg_destroy(&m);
        json_decref(content);
        return;
    }
    jmsg_set_json(m, JMSG_CONTENT, content);
    s_send(self, ROUTE_IOPUB, &m);
}

/*  A line of kennel's own on the parent cell's stderr. */
static void s_notify(session_t *self, const jmsg_t *parent, const char *text)
{
    s_publish(self, parent, "stream", json_pack("{s:s, s:s}", "name", "stderr", "text", text));
}

static void s_publish_status(session_t *self, const jmsg_t *parent, const char *state)
{
    /* Twice a cell: its content written as text, not built and dumped (design.md, "JSON on
     * the hot path"). */
    char text[64];
    size_t n = strlen(state);
    static const char head[] = "{\"execution_state\":\"";
    jmsg_t *m = n < sizeof text - sizeof head - 2 ? jmsg_new("status", self->kernel_session) : NULL;
    if (!m)
        return;
    memcpy(text, head, sizeof head - 1);
    memcpy(text + sizeof head - 1, state, n);
    memcpy(text + sizeof head - 1 + n, "\"}", 2);
    if ((parent && jmsg_set_parent_from(m, parent) < 0) ||
        jmsg_set_text(m, JMSG_CONTENT, text, sizeof head - 1 + n + 2) < 0) {
        jmsg_destroy(&m);
        return;
    }
    s_send(self, ROUTE_IOPUB, &m);
}

/*  Send a reply of reply_type to request on channel, with metadata (NULL: empty); steals
 *  metadata and content. */
static void s_reply_md(session_t *self, unsigned channel, const jmsg_t *request,
                       const char *reply_type, json_t *metadata, json_t *content)
{
    /* (no content: json_pack ran out of memory; an empty part would be sent as {}) */
    jmsg_t *m = content ? jmsg_new_reply(request, reply_type, self->kernel_session) : NULL;
    if (!m) {
        json_decref(metadata);
        json_decref(content);
        return;
    }
    if (metadata)
        jmsg_set_json(m, JMSG_METADATA, metadata);
    jmsg_set_json(m, JMSG_CONTENT, content);
    s_send(self, channel, &m);
}

static void s_reply(session_t *self, unsigned channel, const jmsg_t *request,
                    const char *reply_type, json_t *content)
{
    s_reply_md(self, channel, request, reply_type, NULL, content);
}

/*  The metadata of an execute_reply: the kernel's (may be NULL), plus the outcome and the
 *  wall time, which only kenneld can measure: 0 for a request that never reached the kernel
 *  (!ran), which leaves the session's last outcome as it was. New reference. */
static json_t *s_outcome_metadata(session_t *self, json_t *kernel_md, const char *outcome,
                                  int ran)
{
    /* The kernel's metadata is amended where it is (the reply's own parsed part, given back
     * to jmsg_amend with its bytes rewritten): a deep copy of it was ~12 k instructions a
     * cell. */
    json_t *md = kernel_md ? json_incref(kernel_md) : json_object();
    json_t *metrics = json_object_get(md, "metrics");
    if (!json_is_object(metrics)) {
        metrics = json_object();
        json_object_set_new(md, "metrics", metrics);
    }
    json_object_set_new(metrics, "wall_ms", json_integer(ran ? util_now_ms() - self->cell_started_ms : 0));
    json_object_set_new(md, "outcome", json_string(outcome));
    if (ran)
        snprintf(self->last_outcome, sizeof self->last_outcome, "%s", outcome);
    return md;
}

/*  A kernel_info_reply's content without status: the kernel's hello, or, before any hello,
 *  the fields the spec requires, as kennel's kernel would give them (clients read them from
 *  an error reply too: jupyter_client's wait_for_ready died of a KeyError on
 *  protocol_version). New reference. */
static json_t *s_kernel_info(const session_t *self)
{
    if (self->kernel_info)
        return json_deep_copy(self->kernel_info);
    return json_pack("{s:s, s:s, s:s, s:{s:s, s:s, s:s}, s:s}", "protocol_version", "5.3",
                     "implementation", "kennel", "implementation_version", KENNEL_VERSION,
                     "language_info", "name", "python", "mimetype", "text/x-python",
                     "file_extension", ".py", "banner", "");
}

#define FAIL_WRAP 1  /* s_fail: publish busy and idle around it */
#define FAIL_UNRUN 2 /* s_fail: the request never reached the kernel */

/*  The run record of an execute_request that reached the kernel (session_ops_t.cell_done). */
static void s_cell_done(session_t *self, const jmsg_t *request, const json_t *metadata,
                        const char *ename)
{
    self->ran++;
    /* The budgets' spend: cells, wall time and output as kenneld counted them; CPU time as
     * the kernel reported it (absent when it died, and code in the cell could make its
     * kernel under-report it: the wall budget is the one a cell cannot talk down). At most
     * 1024 CPUs' worth of the wall time, so no figure overflows the sum. */
    const json_t *metrics = json_object_get(metadata, "metrics");
    long long wall = json_integer_value(json_object_get(metrics, "wall_ms"));
    double cpu = json_number_value(json_object_get(metrics, "cpu_ms"));
    wall = wall > 0 ? wall : 0;
    self->spent_cells++;
    self->spent_wall_ms += wall;
    if (cpu > 0)
        self->spent_cpu_ms +=
            cpu < 1024.0 * (wall + 1) ? (long long)(cpu + 0.5) : 1024 * (wall + 1);
    self->spent_output += self->cell_output;
    if (self->ops->cell_done)
        self->ops->cell_done(self->ctx, request, metadata, ename, self->ran, self->cell_output);
}

/*  An error reply for a request the kernel could not serve: an `error` on iopub for execute
 *  requests (so notebooks show it), then the reply with status error and, for executes, the
 *  outcome. flags: FAIL_WRAP, FAIL_UNRUN. */
static void s_fail(session_t *self, unsigned channel, const jmsg_t *request, const char *ename,
                   const char *evalue, const char *outcome, int flags)
{
    const route_t *r = route_lookup(jmsg_type(request));
    if (!r || !r->reply_type)
        return;
    if (flags & FAIL_WRAP)
        s_publish_status(self, request, "busy");
    int is_execute = strcmp(r->msg_type, "execute_request") == 0;
    char line[512];
    snprintf(line, sizeof line, "%s: %s", ename, evalue);
    if (is_execute)
        s_publish(self, request, "error",
                  json_pack("{s:s, s:s, s:[s]}", "ename", ename, "evalue", evalue, "traceback", line));
    json_t *content = json_pack("{s:s, s:s, s:s, s:[s]}", "status", "error", "ename", ename,
                                "evalue", evalue, "traceback", line);
    if (strcmp(r->msg_type, "kernel_info_request") == 0) {
        /* The error goes with the fields every kernel_info_reply must have. */
        json_t *info = s_kernel_info(self);
        json_object_update_missing(content, info);
        json_decref(info);
    }
    jmsg_t *m = jmsg_new_reply(request, r->reply_type, self->kernel_session);
    if (m) {
        if (is_execute) {
            /* The spec's integer (jupyter_console computes its next prompt from it, and
             * crashed on null): what ipykernel would say, the count the kernel announced for
             * this cell or, for one it announced nothing for (never sent, silent, or ended
             * before its execute_input), the last one it did, 0 for a fresh kernel. */
            json_object_set_new(content, "execution_count", json_integer(self->execution_count));
            jmsg_set_json(m, JMSG_METADATA,
                          s_outcome_metadata(self, NULL, outcome, !(flags & FAIL_UNRUN)));
            if (!(flags & FAIL_UNRUN))
                s_cell_done(self, request, jmsg_metadata(m), ename);
        }
        jmsg_set_json(m, JMSG_CONTENT, content);
        s_send(self, channel, &m);
    } else {
        json_decref(content);
    }
    if (flags & FAIL_WRAP)
        s_publish_status(self, request, "idle");
}

static json_t *s_kernel_info_content(const session_t *self)
{
    json_t *c = s_kernel_info(self);
    json_object_set_new(c, "status", json_string("ok"));
    return c;
}

/*  Answer a request kenneld serves itself, between busy and idle as ipykernel does. */
static void s_answer(session_t *self, unsigned channel, const jmsg_t *request,
                     const char *reply_type, json_t *content)
{
    s_publish_status(self, request, "busy");
    s_reply(self, channel, request, reply_type, content);
    s_publish_status(self, request, "idle");
}

/*  A request kennel does not serve (usage_request, debug_request, …) on shell or control: an
 *  error reply, between busy and idle, rather than a client waiting for its timeout.
 *  1 if answered; 0 if the type is no *_request. */
static int s_answer_unknown(session_t *self, unsigned channel, const jmsg_t *request)
{
    const char *type = jmsg_type(request);
    size_t len = strlen(type);
    char reply_type[72];
    if (len <= 8 || len > 64 || strcmp(type + len - 8, "_request") != 0)
        return 0;
    snprintf(reply_type, sizeof reply_type, "%.*s_reply", (int)(len - 8), type);
    char clean[72], evalue[128];
    snprintf(evalue, sizeof evalue, "kennel does not serve %s", log_sanitize(clean, sizeof clean, type, len));
    s_answer(self, channel, request, reply_type,
             json_pack("{s:s, s:s, s:s, s:[]}", "status", "error", "ename", "UnknownMessageType",
                       "evalue", evalue, "traceback"));
    return 1;
}

/* ---- the shell queue --------------------------------------------------------------------- */

/*  obj[key] as Python's bool() reads it, which is how ipykernel reads these flags (a
 *  `"restart": 1` restarts); dflt when absent. */
static int s_json_true(const json_t *obj, const char *key, int dflt)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return dflt;
    switch (json_typeof(v)) {
    case JSON_TRUE:
        return 1;
    case JSON_INTEGER:
        return json_integer_value(v) != 0;
    case JSON_REAL:
        return json_real_value(v) != 0;
    case JSON_STRING:
        return json_string_length(v) > 0;
    case JSON_ARRAY:
        return json_array_size(v) > 0;
    case JSON_OBJECT:
        return json_object_size(v) > 0;
    default: /* false, null */
        return 0;
    }
}

/*  Whether a failed request aborts the execute requests queued behind it (stop_on_error,
 *  default true; silent cells never do). */
static int s_stops_on_error(const jmsg_t *req)
{
    const json_t *c = jmsg_content(req);
    return strcmp(jmsg_type(req), "execute_request") == 0 && s_json_true(c, "stop_on_error", 1) &&
           !s_json_true(c, "silent", 0);
}

static void s_arm_ttl(session_t *self);

static int s_start_kernel(session_t *self)
{
    self->had_hello = 0;
    /* A fresh kernel counts from 1 again; a revived one goes on from its snapshot's count,
     * which is the last one its predecessor announced. */
    if (!self->restore_pending)
        self->execution_count = 0;
    self->awaiting_input = 0;
    if (self->ops->kernel_start(self->ctx) < 0) {
        int saved = errno;
        if (!self->start_error[0])
            snprintf(self->start_error, sizeof self->start_error, "%s", strerror(saved));
        LOG_W("session=%s: kernel start failed: %s", self->id, self->start_error);
        self->state = SESSION_DEAD;
        s_arm_ttl(self);
        errno = saved;
        return -1;
    }
    self->state = SESSION_STARTING;
    return 0;
}

int session_start(session_t *self)
{
    return s_start_kernel(self);
}

void session_start_restored(session_t *self, int has_state)
{
    if (!has_state && self->live_at_stop)
        s_set_notice(self, "[kennel: kenneld stopped while this session's kernel ran, and its "
                           "state could not be saved (a cell was running, or the save failed "
                           "or took too long); the kernel starts fresh: every name defined "
                           "before is gone]\n");
    self->live_at_stop = 0;
    self->state = has_state ? SESSION_EVICTED : SESSION_DEAD;
    s_arm_ttl(self);
}

int session_start_forked(session_t *self, const session_t *src, const json_t *unsaved)
{
    free(self->forked_from);
    self->forked_from = strdup(src->name);
    json_decref(self->unsaved);
    self->unsaved = unsaved ? json_deep_copy(unsaved) : json_array();
    if (!self->forked_from || !self->unsaved) {
        LOG_E("out of memory");
        exit(1);
    }
    /* The restored kernel goes on from the source's count, as a revived one does. */
    self->execution_count = src->execution_count;
    self->restore_pending = 1;
    LOG_I("session=%s: forked from %s", self->id, src->id);
    return s_start_kernel(self);
}

void session_note_unsaved(session_t *self, const char *what)
{
    if (!self->unsaved)
        self->unsaved = json_array();
    if (!self->unsaved || json_array_append_new(self->unsaved, json_string(what)) < 0) {
        LOG_E("out of memory");
        exit(1);
    }
}

/*  A request reached an evicted session: start a kernel that will get the snapshot. */
static int s_revive(session_t *self)
{
    LOG_I("session=%s: reviving", self->id);
    self->restore_pending = 1;
    return s_start_kernel(self);
}

static void s_fail_start(session_t *self, const char *evalue);

/*  Start a kernel if there is none: fresh for a dead session, restored for an evicted one. */
static void s_ensure_kernel(session_t *self)
{
    int rc = self->state == SESSION_DEAD      ? s_start_kernel(self)
             : self->state == SESSION_EVICTED ? s_revive(self)
                                              : 0;
    if (rc < 0) {
        /* Failed at once (no kernel will say hello or exit): the requests that asked for it
         * are answered now. They once waited for ever. */
        char evalue[300];
        snprintf(evalue, sizeof evalue, "the kernel could not start: %.200s", self->start_error);
        s_fail_start(self, evalue);
    }
}

/*  An execute_request's own deadline, metadata {"kennel": {"timeout": seconds}}: into *ms,
 *  -1 when it asks for none of its own (the session's then), 0 for no deadline (as
 *  --timeout 0), else at least 1 ms (a smaller one once became 0: none) and at most a week.
 *  -1 for anything else (a negative number, a string, true): refused, not ignored. */
static int s_own_timeout(const jmsg_t *req, long long *ms)
{
    json_t *t = json_object_get(json_object_get(jmsg_metadata(req), "kennel"), "timeout");
    double seconds = json_number_value(t);
    *ms = -1;
    if (!t || json_is_null(t))
        return 0;
    if (!json_is_number(t) || !(seconds >= 0))
        return -1;
    *ms = seconds == 0 ? 0 : seconds < 7 * 86400 ? util_seconds_ms(seconds) : 7 * 86400 * 1000LL;
    return 0;
}

/*  The request in `current` has just gone to the kernel: start its clock and deadline (own,
 *  as s_own_timeout found it, else the session's). */
static void s_cell_begin(session_t *self, long long own)
{
    self->cell_started_ms = util_now_ms();
    self->cell_interrupted = 0;
    self->cell_output = 0;
    self->cell_truncated = 0;
    self->cell_msgs = 0;
    self->cell_ends_shown = 0;
    self->deadline_phase = 0;
    self->cell_timeout_ms = 0;
    /* A comm message's handlers run user code (a widget's observers) under the session's
     * deadline, as a cell does. */
    int is_execute = strcmp(jmsg_type(self->current), "execute_request") == 0;
    if (is_execute)
        self->dirty = 1; /* the next idle checkpoint_ms saves it (s_idle_rearm) */
    if (!is_execute && route_lookup(jmsg_type(self->current))->reply_type)
        return;
    self->cell_timeout_ms = own >= 0 ? own : self->limits.timeout_ms;
    if (self->cell_timeout_ms > 0) {
        self->deadline_phase = 1;
        self->ops->timer_arm(self->ctx, SESSION_TIMER_CELL, self->cell_timeout_ms);
    }
    if (is_execute && self->origin) {
        s_notify(self, self->current, self->origin);
        free(self->origin);
        self->origin = NULL;
    }
    if (is_execute && self->notice) {
        s_notify(self, self->current, self->notice);
        free(self->notice);
        self->notice = NULL;
    }
}

/*  The cell (or a save or restore of state) is over: no deadline timer may fire for it. */
static void s_cell_end(session_t *self)
{
    if (self->deadline_phase == 1 || self->deadline_phase == 2)
        self->ops->timer_cancel(self->ctx, SESSION_TIMER_CELL);
    self->deadline_phase = 0;
}

/*  Restart the idle clock (any client message, the end of any request). */
static void s_idle_rearm(session_t *self)
{
    self->used_ms = util_now_ms();
    if (self->state == SESSION_EVICTED || self->state == SESSION_DEAD) {
        /* No kernel to evict: the clock that runs is the time to live (an idle timeout
         * here once ended such a session after --idle instead of --ttl). */
        s_arm_ttl(self);
        return;
    }
    if (self->limits.idle_timeout_ms > 0)
        self->ops->timer_arm(self->ctx, SESSION_TIMER_IDLE, self->limits.idle_timeout_ms);
    if (self->limits.checkpoint_ms > 0 && self->dirty)
        self->ops->timer_arm(self->ctx, SESSION_TIMER_CHECKPOINT, self->limits.checkpoint_ms);
}

/*  After eviction the idle timer counts down the rest of the session's time to live, from
 *  its last use (a client message, or the end of a request). Not while kenneld stops: that save is no sign of disuse (it
 *  once ended, directory and all, every session whose --idle was at least its --ttl). */
static void s_arm_ttl(session_t *self)
{
    if (self->limits.ttl_ms <= 0 || self->stopping)
        return;
    long long left = self->limits.ttl_ms - (util_now_ms() - self->used_ms);
    self->ops->timer_arm(self->ctx, SESSION_TIMER_IDLE, left > 1 ? left : 1);
}

/*  Saving or restoring a session's state runs user code (__reduce__, __setstate__), which
 *  may never return. It gets a cell's deadline (SAVE_DEADLINE_MS where cells have none),
 *  then the kernel's CellTimeout (the kernel stays, not evicted; or starts without the rest
 *  of its state), then the grace, then a kill. The cell timer is free then: no cell runs. */
static void s_state_deadline(session_t *self)
{
    self->deadline_phase = 1;
    self->cell_timeout_ms = self->limits.timeout_ms > 0 ? self->limits.timeout_ms : SAVE_DEADLINE_MS;
    self->ops->timer_arm(self->ctx, SESSION_TIMER_CELL, self->cell_timeout_ms);
}

/*  Ask the kernel for its state: to_file, into the session's save file where there is one
 *  (s_on_save_ready), where the kernel writes its arrays from where they are into the page
 *  cache; the pipe took two copies into fresh memory (kenneld's frame, then the worker's)
 *  and bounds a snapshot to one frame. A fork's state takes the pipe: kenneld writes the
 *  fork's file from the frame on its loop, which the frame's bound keeps short. 0, or -1
 *  (the kernel is going). */
static int s_ask_save(session_t *self, int to_file)
{
    static const char op[] = "{\"op\":\"save\"}", op_file[] = "{\"op\":\"save\",\"fd\":true}";
    s_save_fd_close(self);
    self->save_refused[0] = '\0';
    if (to_file && self->ops->snapshot_file && self->ops->snapshot_fits &&
        self->ops->snapshot_store_fd && self->ops->fd_to_kernel)
        self->save_fd = self->ops->snapshot_file(self->ctx);
    kpipe_iov_t part = self->save_fd >= 0 ? (kpipe_iov_t){op_file, sizeof op_file - 1}
                                          : (kpipe_iov_t){op, sizeof op - 1};
    if (self->ops->to_kernel(self->ctx, &part, 1) < 0) {
        s_save_fd_close(self);
        return -1;
    }
    return 0;
}

/*  Idle eviction, step 1: ask the kernel for its state. Busy or starting kernels are left
 *  alone; the end of their work restarts the idle clock. */
static void s_evict(session_t *self)
{
    if (self->state != SESSION_IDLE || zlistx_size(self->queue) > 0)
        return;
    if (s_ask_save(self, 1) == 0) {
        /* Why, in the log: kenneld's stop, a checkpoint, or the idle clock (whose time it
         * names: a stop or a checkpoint comes at any idle time). */
        if (self->stopping)
            LOG_I("session=%s: kenneld stops: saving its state", self->id);
        else if (self->checkpointing)
            LOG_I("session=%s: checkpoint: saving its state", self->id);
        else
            LOG_I("session=%s: idle for %lld ms: saving its state", self->id,
                  self->limits.idle_timeout_ms);
        self->state = SESSION_SAVING;
        s_state_deadline(self);
    }
}

int session_fork_save(session_t *self)
{
    if (self->state != SESSION_IDLE || zlistx_size(self->queue) > 0 || !self->ops->forked) {
        errno = EBUSY;
        return -1;
    }
    if (s_ask_save(self, 0) < 0) {
        errno = EBUSY; /* the kernel is going; its exit comes */
        return -1;
    }
    LOG_I("session=%s: saving its state for a fork", self->id);
    /* The idle clock stops meanwhile: a fork is a use of the session. */
    self->ops->timer_cancel(self->ctx, SESSION_TIMER_IDLE);
    self->state = SESSION_SAVING;
    self->forking = 1;
    s_state_deadline(self);
    return 0;
}

/*  A fork's save is over without its state (why): the fork is told, the kernel stays. */
static void s_fork_failed(session_t *self, const char *why)
{
    if (!self->forking)
        return;
    self->forking = 0;
    self->ops->forked(self->ctx, NULL, 0, NULL, why);
}

int session_save(session_t *self)
{
    /* A session whose kernel lives is in use until kenneld stops: its time to live, which
     * the next kenneld runs, counts from now (a day-long cell, or a session never evicted
     * under --idle 0, once ended as that kenneld started). */
    if (!self->stopping && self->state != SESSION_EVICTED && self->state != SESSION_DEAD)
        self->used_ms = util_now_ms();
    self->stopping = 1;
    if (self->state == SESSION_BUSY || self->state == SESSION_STARTING ||
        self->state == SESSION_RESTORING || zlistx_size(self->queue) > 0)
        return -1;
    s_evict(self);
    return self->state == SESSION_SAVING;
}

void session_on_timer(session_t *self, session_timer_t which)
{
    if (which == SESSION_TIMER_FLUSH) {
        self->flush_armed = 0;
        outbox_flush(self->outbox);
        return;
    }
    if (which == SESSION_TIMER_IDLE &&
        (self->state == SESSION_EVICTED || self->state == SESSION_DEAD)) {
        LOG_I("session=%s: unused for %lld ms: ending it", self->id, self->limits.ttl_ms);
        session_end(self, "the session was unused for its time to live and ended");
        self->ops->ended(self->ctx);
        return;
    }
    if (which == SESSION_TIMER_IDLE) {
        s_evict(self);
        return;
    }
    if (which == SESSION_TIMER_CHECKPOINT) {
        /* Saved as an eviction saves, but the kernel stays (session_on_snapshot_stored). A
         * session in use is checkpointed when it is next idle long enough. */
        if (self->dirty && self->state == SESSION_IDLE && zlistx_size(self->queue) == 0) {
            self->checkpointing = 1;
            s_evict(self);
            if (self->state != SESSION_SAVING)
                self->checkpointing = 0;
        }
        return;
    }
    /* The deadline of a cell, or of a save or restore of state (s_state_deadline). */
    char what[80];
    if (self->state == SESSION_SAVING || self->state == SESSION_RESTORING)
        snprintf(what, sizeof what, "%s its state",
                 self->state == SESSION_SAVING ? "saving" : "restoring");
    else if (self->state == SESSION_BUSY && self->current)
        snprintf(what, sizeof what, "cell %s", jmsg_id(self->current));
    else
        return;
    if (self->deadline_phase == 1) {
        /* A catchable CellTimeout in the kernel (SIGINT stays for interrupts). */
        LOG_I("session=%s: %s passed its %lld ms deadline", self->id, what, self->cell_timeout_ms);
        self->deadline_phase = 2;
        self->ops->kernel_signal(self->ctx, SIGUSR2);
        self->ops->timer_arm(self->ctx, SESSION_TIMER_CELL, self->limits.grace_ms);
    } else if (self->deadline_phase == 2) {
        /* It did not stop (a C loop, a handler that swallowed the exception, a sleeping
         * child): the kernel goes, and its exit answers the cell or ends the save. */
        LOG_W("session=%s: %s ignored its deadline for %lld ms; killing the kernel", self->id,
              what, self->limits.grace_ms);
        self->deadline_phase = 3;
        self->ops->kernel_signal(self->ctx, SIGKILL);
    }
}

static void s_abort_queued_executes(session_t *self);

/*  Answer a shell request that will not reach the kernel with an error, inside the busy
 *  s_pump published for it, then idle; as a failed cell, it aborts the executes queued
 *  behind it. Takes *req_p. */
static void s_refuse(session_t *self, jmsg_t **req_p, const char *ename, const char *evalue,
                     const char *outcome)
{
    s_fail(self, ROUTE_SHELL, *req_p, ename, evalue, outcome, FAIL_UNRUN);
    s_publish_status(self, *req_p, "idle");
    /* A cell refused for a budget aborts none: each one behind it is refused for the same
     * reason, which says more than `aborted`. */
    if (s_stops_on_error(*req_p) && strcmp(outcome, "budget") != 0)
        s_abort_queued_executes(self);
    jmsg_destroy(req_p);
}

/*  Whether one of the session's budgets is spent: 1 with a line naming it and its numbers
 *  in why, else 0. */
static int s_budget_spent(const session_t *self, char *why, size_t len)
{
    const session_limits_t *l = &self->limits;
    if (l->budget_cells > 0 && self->spent_cells >= l->budget_cells)
        snprintf(why, len, "the session's cells budget is spent: %lld of %lld cells run",
                 self->spent_cells, l->budget_cells);
    else if (l->budget_cpu_ms > 0 && self->spent_cpu_ms >= l->budget_cpu_ms)
        snprintf(why, len, "the session's cpu budget is spent: %.3f of %.3f seconds of CPU",
                 self->spent_cpu_ms / 1000.0, l->budget_cpu_ms / 1000.0);
    else if (l->budget_wall_ms > 0 && self->spent_wall_ms >= l->budget_wall_ms)
        snprintf(why, len,
                 "the session's wall budget is spent: %.3f of %.3f seconds of cells' wall time",
                 self->spent_wall_ms / 1000.0, l->budget_wall_ms / 1000.0);
    else if (l->budget_output > 0 && self->spent_output >= l->budget_output)
        snprintf(why, len, "the session's output budget is spent: %llu of %llu bytes of output",
                 self->spent_output, l->budget_output);
    else
        return 0;
    return 1;
}

/*  Send the next queued request to the kernel while it is idle. A comm message (comm_open,
 *  comm_msg, comm_close: the shell messages without a reply) holds the kernel as a request
 *  does, until the kernel says `done`: its handlers run user code, whose output is its own,
 *  and a burst of them once filled the kernel's pipe. */
static void s_pump(session_t *self)
{
    /* A kernel being killed for a restart or an eviction gets nothing more; its successor
     * serves the queue. */
    if (self->restart_pending || self->evicting)
        return;
    while (self->state == SESSION_IDLE && zlistx_size(self->queue) > 0) {
        jmsg_t *req = zlistx_detach(self->queue, NULL);
        const route_t *r = route_lookup(jmsg_type(req));
        s_publish_status(self, req, "busy");
        long long own = -1;
        if (strcmp(r->msg_type, "execute_request") == 0 && s_own_timeout(req, &own) < 0) {
            /* Run without the deadline it asked for, it could run for ever. */
            s_refuse(self, &req, "BadRequest",
                     "metadata kennel.timeout must be a number of seconds, 0 for no deadline",
                     "error");
            continue;
        }
        char spent[160];
        if (strcmp(r->msg_type, "execute_request") == 0 &&
            s_budget_spent(self, spent, sizeof spent)) {
            s_refuse(self, &req, "BudgetExhausted", spent, "budget");
            continue;
        }
        /* Every buffer goes (the wire allows 64): past the pipe's parts, the frame cannot be
         * made and the request is refused as too large, rather than cut short. */
        kpipe_iov_t parts[KPIPE_MAX_PARTS];
        static const char op[] = "{\"op\":\"request\",\"channel\":\"shell\"}";
        size_t n = 0;
        parts[n++] = (kpipe_iov_t){op, sizeof op - 1};
        for (int i = 0; i < JMSG_NPARTS; i++) {
            size_t len = 0;
            const void *raw = jmsg_raw(req, (jmsg_part_t)i, &len);
            parts[n++] = (kpipe_iov_t){raw ? raw : "{}", raw ? len : 2};
        }
        zmsg_t *bufs = jmsg_buffers(req);
        int too_many = 0;
        for (zframe_t *f = zmsg_first(bufs); f; f = zmsg_next(bufs)) {
            if (n == KPIPE_MAX_PARTS) {
                too_many = 1;
                break;
            }
            parts[n++] = (kpipe_iov_t){zframe_data(f), zframe_size(f)};
        }
        int rc = too_many ? SESSION_TOO_LARGE : self->ops->to_kernel(self->ctx, parts, n);
        if (rc == 0) {
            self->current = req;
            self->state = SESSION_BUSY;
            s_cell_begin(self, own);
            return;
        }
        if (rc == SESSION_TOO_LARGE) {
            /* It never will fit: refused rather than hold the queue behind it. */
            s_refuse(self, &req, "RequestTooLarge",
                     "the request does not fit in a frame to the kernel", "error");
            continue;
        }
        s_publish_status(self, req, "idle");
        /* The kernel is going away; its exit will restart it. Serve this one first then. */
        zlistx_add_start(self->queue, req);
        return;
    }
}

/*  stop_on_error: every execute_request queued behind a failed one is answered `aborted`
 *  without running; other requests (completion, inspection) are still served. */
static void s_abort_queued_executes(session_t *self)
{
    /* Take the handle and step past it before deleting: the cursor must never sit on a node
     * being freed. */
    jmsg_t *req = zlistx_first(self->queue);
    while (req) {
        void *handle = zlistx_cursor(self->queue);
        jmsg_t *next = zlistx_next(self->queue);
        if (strcmp(jmsg_type(req), "execute_request") == 0) {
            s_publish_status(self, req, "busy");
            s_reply_md(self, ROUTE_SHELL, req, "execute_reply",
                       s_outcome_metadata(self, NULL, "aborted", 0),
                       json_pack("{s:s}", "status", "aborted"));
            s_publish_status(self, req, "idle");
            zlistx_delete(self->queue, handle);
        }
        req = next;
    }
}

/* ---- client requests --------------------------------------------------------------------- */

/*  A kennel_replay_request: the journal's messages of the cell it names (content "cell",
 *  a msg_id; absent or "": the latest), in one reply, at once, whatever the kernel does. */
static void s_replay(session_t *self, unsigned channel, const jmsg_t *req)
{
    const char *cell = jmsg_cstr(json_object_get(jmsg_content(req), "cell"));
    size_t len = 0;
    char *text = journal_replay(self->journal, cell, util_now_ms(), &len);
    jmsg_t *m = text ? jmsg_new_reply(req, "kennel_replay_reply", self->kernel_session) : NULL;
    if (m && jmsg_set_raw_unparsed(m, JMSG_CONTENT, text, len) == 0)
        s_send(self, channel, &m);
    jmsg_destroy(&m);
    free(text);
}

static void s_on_broker(session_t *self, unsigned channel, jmsg_t *req)
{
    const char *type = jmsg_type(req);
    if (strcmp(type, "kennel_replay_request") == 0) {
        s_replay(self, channel, req);
        jmsg_destroy(&req);
        return;
    }
    if (strcmp(type, "kernel_info_request") == 0) {
        if (self->kernel_info) {
            s_answer(self, channel, req, "kernel_info_reply", s_kernel_info_content(self));
            jmsg_destroy(&req);
        } else {
            /* Before the first hello there is nothing to answer with yet. Past INFO_WAITING
             * the oldest waiting one goes: clients ask again while they wait
             * (wait_for_ready), and it is the latest ask of each that must be answered. */
            if (zlistx_size(self->info_waiting) == INFO_WAITING) {
                jmsg_t *oldest = zlistx_detach(self->info_waiting, NULL);
                jmsg_destroy(&oldest);
                memmove(self->info_channels, self->info_channels + 1,
                        (INFO_WAITING - 1) * sizeof self->info_channels[0]);
            }
            self->info_channels[zlistx_size(self->info_waiting)] = channel;
            zlistx_add_end(self->info_waiting, req);
            s_ensure_kernel(self);
        }
        return;
    } else if (strcmp(type, "interrupt_request") == 0) {
        if (self->state == SESSION_BUSY) {
            self->cell_interrupted = 1;
            self->ops->kernel_signal(self->ctx, SIGINT);
        }
        s_answer(self, channel, req, "interrupt_reply", json_pack("{s:s}", "status", "ok"));
        jmsg_destroy(&req);
    } else if (strcmp(type, "shutdown_request") == 0) {
        /* The reply says what was asked, whatever kenneld does underneath: a launched
         * session ends at any shutdown, and its front end's kernel manager starts the next
         * one. Notebook read `restart: false` as the kernel's death (replayed after its
         * WebSocket reconnected), and shut the new kernel down. */
        int asked = s_json_true(jmsg_content(req), "restart", 0);
        int restart = asked && !self->limits.end_on_shutdown;
        json_t *content = json_pack("{s:s, s:b}", "status", "ok", "restart", asked);
        s_publish_status(self, req, "busy");
        s_reply(self, channel, req, "shutdown_reply", json_deep_copy(content));
        /* ipykernel also publishes the shutdown reply on iopub, for other clients to see. */
        s_publish(self, req, "shutdown_reply", content);
        s_publish_status(self, req, "idle");
        jmsg_destroy(&req);
        if (restart) {
            LOG_I("session=%s: restart requested", self->id);
            /* A restart is a fresh namespace: a saved one is forgotten, and the cells queued
             * until now, written for the old one, are aborted rather than run in the new one
             * (as when the kernel dies, and as a Jupyter restart drops the queue). Requests
             * after this one are the new kernel's. */
            self->restore_pending = 0;
            self->ops->snapshot_drop(self->ctx);
            s_abort_queued_executes(self);
            if (self->state == SESSION_DEAD || self->state == SESSION_EVICTED) {
                s_start_kernel(self);
            } else {
                self->restart_pending = 1;
                self->ops->kernel_signal(self->ctx, SIGKILL);
            }
        } else {
            LOG_I("session=%s: shutdown requested", self->id);
            session_end(self, "the session was shut down (shutdown_request)");
            self->ops->ended(self->ctx);
        }
    } else {
        jmsg_destroy(&req);
    }
}

void session_on_request(session_t *self, unsigned channel, jmsg_t **msg_p)
{
    jmsg_t *req = *msg_p;
    *msg_p = NULL;
    if (self->state == SESSION_ENDED) {
        jmsg_destroy(&req);
        return;
    }
    s_idle_rearm(self);
    const route_t *r = route_on(jmsg_type(req), channel);
    if (!r && !route_lookup(jmsg_type(req)) && (channel == ROUTE_SHELL || channel == ROUTE_CONTROL) &&
        s_answer_unknown(self, channel, req)) {
        jmsg_destroy(&req);
        return;
    }
    if (!r || r->handler == ROUTE_BY_NONE) {
        char type[64];
        if (log_allow(&self->warn_limit, 5))
            LOG_W("session=%s: ignoring msg_type %s on %s", self->id,
                  log_sanitize(type, sizeof type, jmsg_type(req), strlen(jmsg_type(req))),
                  route_channel_name(channel));
        jmsg_destroy(&req);
        return;
    }
    self->active_ms = util_now_ms();
    if (r->handler == ROUTE_BY_BROKER) {
        s_on_broker(self, channel, req);
        return;
    }
    if (channel == ROUTE_STDIN) {
        /* An input_reply is only meaningful while the kernel waits for one. */
        if (self->awaiting_input && self->state == SESSION_BUSY) {
            static const char op[] = "{\"op\":\"request\",\"channel\":\"stdin\"}";
            kpipe_iov_t parts[1 + JMSG_NPARTS] = {{op, sizeof op - 1}};
            for (int i = 0; i < JMSG_NPARTS; i++) {
                size_t len = 0;
                const void *raw = jmsg_raw(req, (jmsg_part_t)i, &len);
                parts[1 + i] = (kpipe_iov_t){raw ? raw : "{}", raw ? len : 2};
            }
            self->awaiting_input = 0;
            self->ops->to_kernel(self->ctx, parts, 1 + JMSG_NPARTS);
        }
        jmsg_destroy(&req);
        return;
    }
    if (zlistx_size(self->queue) >= self->limits.max_queued) {
        if (log_allow(&self->warn_limit, 5))
            LOG_W("session=%s: queue full (%zu), refusing %s", self->id, self->limits.max_queued,
                  r->msg_type);
        s_fail(self, channel, req, "QueueFull",
               "too many requests are waiting for this session; try again later", "error",
               FAIL_WRAP | FAIL_UNRUN);
        jmsg_destroy(&req);
        return;
    }
    zlistx_add_end(self->queue, req);
    s_ensure_kernel(self);
    s_pump(self);
}

/* ---- kernel frames ----------------------------------------------------------------------- */

/*  The kernel's op headers and hello are parsed whole, so they are bounded: the runtime's are
 *  under 100 KiB (its longest, `saved` and `restored`, name at most 256 variables). A larger
 *  one would hold the loop in jansson (~28 ns a byte), so it is a protocol violation. */
#define OP_MAX_BYTES (256u << 10)

static json_t *s_part_json(const kpipe_frame_t *f, size_t i)
{
    kpipe_iov_t p = kpipe_frame_part(f, i);
    if (p.len > OP_MAX_BYTES)
        return NULL;
    json_t *obj = json_loadb(p.data, p.len, JMSG_JSON_LOAD_FLAGS, NULL);
    if (obj && !json_is_object(obj)) {
        json_decref(obj);
        obj = NULL;
    }
    return obj;
}

/*  What kenneld reads of an op header: its strings (NUL-terminated; NULL when absent or not a
 *  string: the last member of a key stands, as in jansson's parse) and an execute_input's
 *  execution_count (-1: none). The ops that come with every cell (iopub, reply, done, stdin)
 *  are read from their bytes, without building them (design.md, "JSON on the hot path");
 *  every other op, and a hot one holding an escape or a long string, is parsed by jansson
 *  into json, which the other ops' handlers read. */
typedef struct {
    const char *op, *msg_type, *parent_msg_id, *status, *ename;
    long long execution_count;
    json_t *json; /* (owned) */
} op_head_t;

enum { OPF_OP, OPF_TYPE, OPF_PARENT, OPF_STATUS, OPF_ENAME, OPF_STRINGS, OPF_COUNT = OPF_STRINGS };
static const char *const s_op_keys[] = {"op", "msg_type", "parent_msg_id", "status", "ename",
                                        "execution_count"};
#define OPF_MAX 136 /* bytes of a string read from the bytes (ename: 128), its NUL included */

typedef struct {
    const char *data;
    int bail; /* an escape, a long string or number: left to jansson */
    int set[OPF_STRINGS + 1];
    char str[OPF_STRINGS][OPF_MAX];
    long long count;
} op_scan_t;

static int s_op_member(void *arg, size_t key_at, size_t key_len, size_t value_at,
                       size_t value_len)
{
    op_scan_t *sc = arg;
    const char *key = sc->data + key_at + 1, *v = sc->data + value_at;
    size_t klen = key_len - 2, i;
    if (memchr(key, '\\', klen)) {
        sc->bail = 1; /* it might spell one of ours */
        return 0;
    }
    /* An object, an array, a real or a long integer, in any member: jansson's to read. The
     * runtime sends none in these ops, and jansson refuses some (1e400, 30 digits), which
     * then ends the kernel as a protocol violation, as for every other op. */
    if (v[0] == '{' || v[0] == '[') {
        sc->bail = 1;
        return 0;
    }
    long long number = 0;
    int is_number = v[0] == '-' || (v[0] >= '0' && v[0] <= '9');
    if (is_number && !jvalid_small_int(v, value_len, &number)) {
        sc->bail = 1;
        return 0;
    }
    for (i = 0; i <= OPF_COUNT; i++)
        if (strlen(s_op_keys[i]) == klen && memcmp(s_op_keys[i], key, klen) == 0)
            break;
    if (i > OPF_COUNT)
        return 0;
    sc->set[i] = 0;
    if (i == OPF_COUNT) {
        /* (an integer of at most 18 digits: any other number bailed above) */
        if (is_number) {
            sc->count = number;
            sc->set[i] = 1;
        }
        return 0;
    }
    if (v[0] != '"')
        return 0;
    size_t n = value_len - 2;
    if (n >= OPF_MAX || memchr(v + 1, '\\', n)) {
        sc->bail = 1;
        return 0;
    }
    memcpy(sc->str[i], v + 1, n);
    sc->str[i][n] = '\0';
    sc->set[i] = 1;
    return 0;
}

static int s_hot_op(const char *op)
{
    return strcmp(op, "iopub") == 0 || strcmp(op, "reply") == 0 || strcmp(op, "done") == 0 ||
           strcmp(op, "stdin") == 0;
}

/*  Read f's op header into *h (strings in *sc or in h->json). 0, or -1 when it is no JSON
 *  object (or longer than OP_MAX_BYTES). */
static int s_op_head(const kpipe_frame_t *f, op_scan_t *sc, op_head_t *h)
{
    kpipe_iov_t p = kpipe_frame_part(f, 0);
    size_t values;
    *h = (op_head_t){.execution_count = -1};
    memset(sc, 0, offsetof(op_scan_t, str));
    sc->data = p.data;
    if (p.len <= OP_MAX_BYTES &&
        jvalid_members(p.data, p.len, &values, s_op_member, sc,
                       kpipe_frame_part_utf8(f, 0) ? JVALID_UTF8_CHECKED : 0) == 0 &&
        !sc->bail && sc->set[OPF_OP] && s_hot_op(sc->str[OPF_OP])) {
        const char **out[] = {&h->op, &h->msg_type, &h->parent_msg_id, &h->status, &h->ename};
        for (size_t i = 0; i < OPF_STRINGS; i++)
            *out[i] = sc->set[i] ? sc->str[i] : NULL;
        h->execution_count = sc->set[OPF_COUNT] ? sc->count : -1;
        return 0;
    }
    if (!(h->json = s_part_json(f, 0)))
        return -1;
    const char **out[] = {&h->op, &h->msg_type, &h->parent_msg_id, &h->status, &h->ename};
    for (size_t i = 0; i < OPF_STRINGS; i++)
        *out[i] = json_string_value(json_object_get(h->json, s_op_keys[i]));
    json_t *count = json_object_get(h->json, "execution_count");
    h->execution_count = json_is_integer(count) ? json_integer_value(count) : -1;
    return 0;
}

/*  Kernel frames' parts, each read into a zframe of its own. */
static void *s_part_alloc(void *arg, size_t len, void **handle)
{
    (void)arg;
    static char empty; /* what an empty part's bytes are (never read) */
    zframe_t *f = zframe_new(NULL, len);
    if (f)
        util_hugepage_hint(zframe_data(f), len); /* a snapshot: tens of MB */
    *handle = f;
    return !f ? NULL : len ? (void *)zframe_data(f) : &empty;
}

static void s_part_release(void *arg, void *handle)
{
    (void)arg;
    zframe_t *f = handle;
    zframe_destroy(&f);
}

const kpipe_alloc_t *session_kpipe_alloc(void)
{
    static const kpipe_alloc_t alloc = {s_part_alloc, s_part_release, NULL};
    return &alloc;
}

/*  Build a message of type from the kernel's metadata, content and buffers (parts 1, 2, 3…).
 *  NULL when they are not JSON objects. */
static jmsg_t *s_from_kernel(session_t *self, kpipe_frame_t *f, const char *type,
                             const jmsg_t *parent, int reply, int count_known)
{
    if (kpipe_frame_count(f) < 3)
        return NULL;
    jmsg_t *m = reply && parent ? jmsg_new_reply(parent, type, self->kernel_session)
                                : jmsg_new(type, self->kernel_session);
    if (!m)
        return NULL;
    if (parent && !reply)
        jmsg_set_parent_from(m, parent);
    /* kenneld adds to a reply's metadata (its status comes in the op header); anything else
     * it only passes on, as the kernel's bytes (checked to be JSON objects, never parsed):
     * a reply's content may be large and dense (user_expressions, history with outputs).
     * Each part is the frame the decoder read it into (session_kpipe_alloc), moved on, not
     * copied: a copy of a 60 MiB output into fresh pages held the loop ~200 ms. The decoder
     * checked their UTF-8 as they came, so the JSON checks need not decode it. */
    unsigned md_utf8 = kpipe_frame_part_utf8(f, 1) ? JMSG_UTF8_CHECKED : 0;
    unsigned ct_utf8 = kpipe_frame_part_utf8(f, 2) ? JMSG_UTF8_CHECKED : 0;
    zframe_t *md = kpipe_frame_take(f, 1), *ct = kpipe_frame_take(f, 2);
    int md_rc = reply ? jmsg_take_raw(m, JMSG_METADATA, &md, JMSG_MAX_VALUES, JMSG_PARSE_MAX,
                                      md_utf8)
                      : jmsg_take_raw_unparsed(m, JMSG_METADATA, &md, md_utf8);
    /* An execute_input's content is parsed (shallowly past JMSG_PARSE_MAX: the cell's code
     * may be long) for its execution_count, which kenneld's own replies repeat, unless the
     * op header said it. */
    int ct_rc = !count_known && strcmp(type, "execute_input") == 0
                    ? jmsg_take_raw(m, JMSG_CONTENT, &ct, JMSG_MAX_VALUES, JMSG_PARSE_MAX, ct_utf8)
                    : jmsg_take_raw_unparsed(m, JMSG_CONTENT, &ct, ct_utf8);
    if (md_rc < 0 || ct_rc < 0) {
        zframe_destroy(&md);
        zframe_destroy(&ct);
        jmsg_destroy(&m);
        return NULL;
    }
    for (size_t i = 3; i < kpipe_frame_count(f); i++) {
        zframe_t *b = kpipe_frame_take(f, i);
        zmsg_append(jmsg_buffers(m), &b);
    }
    return m;
}

/*  Replace the line the next cell will be told (NULL: none). */
static void s_set_notice(session_t *self, const char *text)
{
    free(self->notice);
    self->notice = text ? strdup(text) : NULL;
}

void session_set_origin(session_t *self, const char *text)
{
    free(self->origin);
    self->origin = text ? strdup(text) : NULL;
}

/*  The per-request output cap: outputs past max_output bytes (each message charged
 *  OUTPUT_MSG_COST beyond its own) or past max_output_msgs messages are dropped, and the
 *  client gets one notice instead of a flood. The budget runs from a request's start to the
 *  next one's, so a thread that goes on printing after its cell shares that cell's. One
 *  execute_result and one error per request pass even past it (counted all the same), so
 *  the client sees how the cell ended; a frame is bounded anyway. */
static int s_output_allowed(session_t *self, const kpipe_frame_t *f, const char *type)
{
    size_t cost = OUTPUT_MSG_COST;
    for (size_t i = 1; i < kpipe_frame_count(f); i++)
        cost += kpipe_frame_part(f, i).len;
    int end = strcmp(type, "execute_result") == 0 ? CELL_RESULT
              : strcmp(type, "error") == 0        ? CELL_ERROR
                                                  : 0;
    if (end && self->current && !(self->cell_ends_shown & end)) {
        self->cell_ends_shown |= end;
        self->cell_output += cost;
        self->cell_msgs++;
        return 1;
    }
    size_t max = self->limits.max_output, max_msgs = self->limits.max_output_msgs;
    int msgs_ok = !max_msgs || self->cell_msgs < max_msgs;
    if (!self->cell_truncated && msgs_ok && self->cell_output <= max &&
        cost <= max - self->cell_output) {
        self->cell_output += cost;
        self->cell_msgs++;
        return 1;
    }
    if (!self->cell_truncated) {
        self->cell_truncated = 1;
        char text[160];
        if (msgs_ok)
            snprintf(text, sizeof text,
                     "\n[kennel: this cell's output passed its limit of %zu bytes; the rest is "
                     "not shown]\n", max);
        else
            snprintf(text, sizeof text,
                     "\n[kennel: this cell's output passed its limit of %zu messages; the rest "
                     "is not shown]\n", max_msgs);
        const jmsg_t *cell = self->current ? self->current : self->last;
        s_notify(self, cell, text);
        LOG_I("session=%s: output of cell %s truncated", self->id, cell ? jmsg_id(cell) : "-");
    }
    return 0;
}

static int s_on_hello(session_t *self, const kpipe_frame_t *f, const char **why)
{
    if (self->state != SESSION_STARTING || kpipe_frame_count(f) != 2) {
        *why = "unexpected hello";
        return -1;
    }
    json_t *info = s_part_json(f, 1);
    if (!info) {
        *why = "hello content is not a JSON object";
        return -1;
    }
    json_decref(self->kernel_info);
    self->kernel_info = info;
    self->had_hello = 1;
    self->state = SESSION_IDLE;
    if (self->restore_pending) {
        /* The snapshot goes first; the queue waits for `restored`. Its file, if it has one,
         * goes as a descriptor the kernel maps (s_on_restore_ready): no copy of it in
         * kenneld, and the kernel reads pages already in the page cache. */
        void *snap = NULL;
        size_t len = 0;
        /* Padded so that the snapshot starts 64 bytes into the frame's body (part count,
         * this part's length, the op, the snapshot's length): its arrays are views of the
         * buffer the kernel reads the frame into, aligned only if the snapshot is. */
        static const char op[] = "{\"op\":\"restore\"}                                    ";
        _Static_assert(4 + 4 + sizeof op - 1 + 4 == 64, "the snapshot 64 bytes into the body");
        static const char op_fd[] = "{\"op\":\"restore\",\"fd\":true}";
        int fd = self->ops->snapshot_fd ? self->ops->snapshot_fd(self->ctx) : -1;
        if (fd >= 0) {
            kpipe_iov_t parts[1] = {{op_fd, sizeof op_fd - 1}};
            if (self->ops->to_kernel(self->ctx, parts, 1) == 0) {
                self->restore_fd = fd;
                self->state = SESSION_RESTORING;
                s_state_deadline(self);
            } else {
                close(fd);
            }
        } else if (self->ops->snapshot_load(self->ctx, &snap, &len) == 0) {
            kpipe_iov_t parts[2] = {{op, sizeof op - 1}, {snap, len}};
            if (self->ops->to_kernel(self->ctx, parts, 2) == 0) {
                self->state = SESSION_RESTORING;
                s_state_deadline(self);
            }
            free(snap);
        } else {
            s_set_notice(self, "[kennel: the saved state of this session could not be read; it "
                               "starts fresh]\n");
        }
        self->restore_pending = 0;
    }
    LOG_I("session=%s: kernel ready%s", self->id,
          self->state != SESSION_RESTORING ? ""
          : self->restore_fd >= 0          ? ", restoring its state (its file, mapped)"
                                           : ", restoring its state");
    jmsg_t *req;
    size_t i = 0;
    while ((req = zlistx_detach(self->info_waiting, NULL))) {
        s_answer(self, self->info_channels[i++], req, "kernel_info_reply",
                 s_kernel_info_content(self));
        jmsg_destroy(&req);
    }
    s_pump(self);
    return 0;
}

static int s_on_saved_file(session_t *self, const json_t *op, const char *failed);

/*  A fork's save is over: the state goes to the fork, or why not; this kernel serves on. */
static void s_forked(session_t *self, const void *data, size_t len, const json_t *unsaved,
                     const char *why)
{
    self->forking = 0;
    self->state = SESSION_IDLE;
    self->ops->forked(self->ctx, data, len, unsaved, why);
    if (self->state == SESSION_IDLE) { /* (the callback may have ended the session) */
        s_idle_rearm(self);
        s_pump(self);
    }
}

/*  Idle eviction, step 2: the kernel sent its snapshot; keep it and end the kernel. */
static int s_on_saved(session_t *self, const kpipe_frame_t *f, const json_t *op, const char **why)
{
    const json_t *unsaved = json_object_get(op, "unsaved");
    const char *error = json_string_value(json_object_get(op, "error"));
    if (self->state != SESSION_SAVING) {
        *why = "unexpected saved";
        return -1;
    }
    if (self->storing) {
        *why = "saved twice";
        return -1;
    }
    s_cell_end(self);
    char clean[160];
    const char *failed = error ? log_sanitize(clean, sizeof clean, error, strlen(error))
                         : !json_is_array(unsaved) ||
                                   kpipe_frame_count(f) != (self->save_len ? 1u : 2u)
                             ? "no snapshot"
                             : NULL;
    if (error && self->save_refused[0])
        failed = self->save_refused; /* kenneld's reason, not the kernel's "refused" */
    if (self->save_len) /* the kernel wrote it to the file of s_on_save_ready */
        return s_on_saved_file(self, op, failed);
    s_save_fd_close(self);
    if (self->forking) {
        if (failed)
            s_forked(self, NULL, 0, NULL, failed);
        else
            s_forked(self, kpipe_frame_part(f, 1).data, kpipe_frame_part(f, 1).len, unsaved,
                     NULL);
        return 0;
    }
    if (!failed && self->ops->snapshot_store(self->ctx, kpipe_frame_part(f, 1).data,
                                             kpipe_frame_part(f, 1).len, &failed) == 0) {
        /* Kept off the loop (a write and an fsync: tens of ms): the kernel stays, holding
         * the state, until the snapshot is on disk. Requests wait meanwhile. */
        json_decref(self->unsaved);
        self->unsaved = json_deep_copy(unsaved);
        self->storing = 1;
        return 0;
    }
    self->storing = 1;
    session_on_snapshot_stored(self, failed ? failed : "cannot keep the snapshot");
    return 0;
}

/*  The kernel wrote its snapshot to save_fd (s_on_save_ready), or failed to (failed): kept
 *  as ops->snapshot_store keeps one sent through the pipe, once the file holds what the
 *  kernel announced and nothing else. */
static int s_on_saved_file(session_t *self, const json_t *op, const char *failed)
{
    static char reason[160];
    int fd = self->save_fd;
    size_t want = self->save_len;
    self->save_fd = -1;
    self->save_len = 0;
    const json_t *bytes = json_object_get(op, "bytes");
    struct stat st;
    if (!failed && (!json_is_integer(bytes) || (size_t)json_integer_value(bytes) != want)) {
        failed = "the kernel's saved names another size than its save_ready";
    } else if (!failed && fstat(fd, &st) < 0) {
        failed = "cannot read its file's size";
    } else if (!failed && (!S_ISREG(st.st_mode) || (unsigned long long)st.st_size != want)) {
        snprintf(reason, sizeof reason, "the kernel wrote %lld bytes, not the %zu it announced",
                 (long long)st.st_size, want);
        failed = reason;
    }
    const json_t *unsaved = json_object_get(op, "unsaved");
    if (!failed) {
        LOG_D("session=%s: the kernel wrote its snapshot; syncing and naming it", self->id);
        if (self->ops->snapshot_store_fd(self->ctx, fd, want, &failed) == 0) {
            /* Made durable and named off the loop (an fsync: tens of ms), as a store is. */
            json_decref(self->unsaved);
            self->unsaved = json_deep_copy(unsaved);
            self->storing = 1;
            return 0;
        }
    } else {
        close(fd);
    }
    self->storing = 1;
    session_on_snapshot_stored(self, failed ? failed : "cannot keep the snapshot");
    return 0;
}

void session_on_snapshot_stored(session_t *self, const char *why)
{
    if (self->state != SESSION_SAVING || !self->storing)
        return; /* the kernel died meanwhile, or the session ended: the snapshot is dropped */
    self->storing = 0;
    if (why)
        self->checkpointing = 0;
    if (why) {
        /* Keeping the kernel beats losing its state: try again after the next idle period. */
        LOG_W("session=%s: state not saved (%s); not evicting", self->id, why);
        json_decref(self->unsaved);
        self->unsaved = NULL;
        self->state = SESSION_IDLE;
        s_idle_rearm(self);
        s_pump(self);
        return;
    }
    if (self->checkpointing) {
        /* A checkpoint: the snapshot is on disk, the kernel serves on. The idle clock runs
         * on from the session's last use. */
        LOG_I("session=%s: checkpointed (its state saved; the kernel serves on)", self->id);
        self->checkpointing = 0;
        self->dirty = 0;
        self->state = SESSION_IDLE;
        s_pump(self);
        return;
    }
    self->evicting = 1;
    self->ops->kernel_signal(self->ctx, SIGKILL);
}

/*  Tell the next cell which names a revival lost: those the save could not pickle and those
 *  that failed to load. */
static void s_note_lost(session_t *self, const json_t *failed)
{
    char text[1024];
    size_t n = 0, i;
    const json_t *name;
    const json_t *lists[2] = {self->unsaved, failed};
    for (int l = 0; l < 2; l++)
        json_array_foreach((json_t *)lists[l], i, name)
            if (json_is_string(name) && n < sizeof text - 200)
                n += (size_t)snprintf(text + n, sizeof text - n, "%s%s", n ? ", " : "",
                                      json_string_value(name));
    if (!n) {
        s_set_notice(self, NULL);
        return;
    }
    char line[1400];
    if (self->forked_from)
        snprintf(line, sizeof line,
                 "[kennel: this session was forked from %.128s; these names could not be "
                 "copied and are not here: %s]\n",
                 self->forked_from, text);
    else
        snprintf(line, sizeof line,
                 "[kennel: this session was evicted while idle and revived; these names could "
                 "not be saved and are gone: %s]\n",
                 text);
    s_set_notice(self, line);
}

/*  The kernel has its snapshot, of `bytes` bytes, and waits for the file to write it to
 *  (nothing else is in flight to it: requests wait while it saves). One over the session's
 *  disk cap gets a refusal instead, and the kernel then reports its save failed. */
static int s_on_save_ready(session_t *self, const json_t *op, const char **why)
{
    const json_t *bytes = json_object_get(op, "bytes");
    if (self->state != SESSION_SAVING || self->save_fd < 0 || self->save_len ||
        self->storing || !json_is_integer(bytes) || json_integer_value(bytes) <= 0) {
        *why = "unexpected save_ready";
        return -1;
    }
    size_t len = (size_t)json_integer_value(bytes);
    const char *no = NULL;
    if (self->deadline_phase != 1)
        no = "the save passed its deadline before the kernel could write it"; /* kept */
    if (no || self->ops->snapshot_fits(self->ctx, len, &no) < 0) {
        snprintf(self->save_refused, sizeof self->save_refused, "%s",
                 no ? no : "cannot keep the snapshot");
        s_save_fd_close(self);
        if (self->ops->fd_to_kernel(self->ctx, -1) < 0)
            LOG_W("session=%s: cannot refuse the kernel its snapshot's file", self->id);
        return 0; /* its saved says it failed; or its deadline ends it */
    }
    self->save_refused[0] = '\0';
    self->save_len = len;
    /* The deadline so far covered the pickling; the writing gets a deadline of its own, from
     * now: the save's again, or more by the snapshot's size, so that a large namespace under
     * a short --timeout is not killed mid-write (and its state lost) for a disk's speed. */
    if (self->deadline_phase == 1) {
        long long write_ms = SAVE_WRITE_MIN_MS + (long long)(len / SAVE_WRITE_BYTES_PER_MS);
        if (write_ms > self->cell_timeout_ms)
            self->cell_timeout_ms = write_ms;
        self->ops->timer_arm(self->ctx, SESSION_TIMER_CELL, self->cell_timeout_ms);
    }
    LOG_D("session=%s: its snapshot is %zu bytes; the kernel writes it to its file", self->id,
          len);
    if (self->ops->fd_to_kernel(self->ctx, self->save_fd) < 0)
        LOG_W("session=%s: cannot pass the kernel its snapshot's file", self->id);
    return 0; /* a kernel that got nothing answers saved with the failure, or its deadline */
}

/*  The kernel has read the restore frame and waits for the snapshot's descriptor (nothing
 *  else is in flight to it: the queue waits for `restored`). */
static int s_on_restore_ready(session_t *self, const char **why)
{
    if (self->state != SESSION_RESTORING || self->restore_fd < 0 || !self->ops->fd_to_kernel) {
        *why = "unexpected restore_ready";
        return -1;
    }
    int rc = self->ops->fd_to_kernel(self->ctx, self->restore_fd);
    s_restore_fd_close(self);
    if (rc < 0)
        LOG_W("session=%s: cannot pass the snapshot to the kernel", self->id);
    return 0; /* a kernel that got nothing answers restored with the failure, or its deadline */
}

static int s_on_restored(session_t *self, const json_t *op, const char **why)
{
    const json_t *failed = json_object_get(op, "failed");
    if (self->state != SESSION_RESTORING) {
        *why = "unexpected restored";
        return -1;
    }
    if (self->deadline_phase == 3)
        return 0; /* too late: the kernel is being killed, and its exit says so */
    s_restore_fd_close(self); /* a kernel that could not ask for it */
    s_cell_end(self);
    s_note_lost(self, json_is_array(failed) ? failed : NULL);
    json_decref(self->unsaved);
    self->unsaved = NULL;
    free(self->forked_from); /* a later revival's notice is an eviction's */
    self->forked_from = NULL;
    /* Under checkpoints the snapshot stays: it is still the session's state, the one another
     * node revives it from should this one die before the next checkpoint. */
    if (self->limits.checkpoint_ms <= 0)
        self->ops->snapshot_drop(self->ctx);
    self->state = SESSION_IDLE;
    LOG_I("session=%s: state restored", self->id);
    s_idle_rearm(self);
    s_pump(self);
    return 0;
}

static int s_on_reply(session_t *self, kpipe_frame_t *f, const op_head_t *op, const char **why)
{
    const char *type = op->msg_type;
    const char *parent_id = op->parent_msg_id;
    if (self->state != SESSION_BUSY || !self->current) {
        *why = "reply with no request in flight";
        return -1;
    }
    const route_t *r = route_lookup(jmsg_type(self->current));
    if (!type || !r->reply_type || strcmp(type, r->reply_type) != 0 || !parent_id ||
        strcmp(parent_id, jmsg_id(self->current)) != 0) {
        *why = "reply does not match the request in flight";
        return -1;
    }
    jmsg_t *reply = s_from_kernel(self, f, type, self->current, 1, 0);
    if (!reply) {
        *why = "reply metadata or content is not a JSON object";
        return -1;
    }
    jmsg_t *req = self->current;
    self->current = NULL;
    self->awaiting_input = 0;
    int failed = 0;
    if (strcmp(r->msg_type, "execute_request") == 0) {
        self->cells++;
        const char *status = op->status;
        int is_error = status && strcmp(status, "error") == 0;
        failed = is_error && s_stops_on_error(req);
        const char *outcome = self->deadline_phase >= 2 ? "timeout"
                              : is_error && self->cell_interrupted ? "interrupted"
                              : is_error                           ? "error"
                              : self->cell_truncated               ? "output_truncated"
                              : status && strcmp(status, "ok") == 0 ? "ok"
                                                                    : "aborted";
        /* (A large metadata was parsed shallowly: its other members are kept as they came.
         * The parsed metadata is amended in place: should the amend run out of memory, the
         * run record has the outcome the reply's bytes lack.) */
        if (jmsg_amend(reply, JMSG_METADATA,
                       s_outcome_metadata(self, jmsg_metadata(reply), outcome, 1)) < 0)
            LOG_W("session=%s: out of memory: the reply goes without its outcome", self->id);
        /* The error's name from the op header (the content is passed on unparsed); the
         * kernel's word, for the record only: a short printable name or none. */
        const char *ename = is_error ? op->ename : NULL;
        if (ename && op->json)
            ename = jmsg_cstr(json_object_get(op->json, "ename")); /* (none with a NUL) */
        if (ename && (strlen(ename) > 128 || strspn(ename, "abcdefghijklmnopqrstuvwxyz"
                                                           "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                           "0123456789_.") != strlen(ename)))
            ename = NULL;
        s_cell_done(self, req, jmsg_metadata(reply), ename);
    }
    s_cell_end(self);
    s_send(self, ROUTE_SHELL, &reply);
    s_publish_status(self, req, "idle");
    jmsg_destroy(&self->last);
    self->last = req;
    self->state = SESSION_IDLE;
    if (failed)
        s_abort_queued_executes(self);
    s_idle_rearm(self);
    s_pump(self);
    return 0;
}

/*  The kernel is done with a comm message (a request without a reply): idle, and the next.
 *  Output after it goes to the last request that had a reply, as output between cells does. */
static int s_on_done(session_t *self, const op_head_t *op, const char **why)
{
    const char *parent_id = op->parent_msg_id;
    if (self->state != SESSION_BUSY || !self->current ||
        route_lookup(jmsg_type(self->current))->reply_type || !parent_id ||
        strcmp(parent_id, jmsg_id(self->current)) != 0) {
        *why = "done does not match the request in flight";
        return -1;
    }
    jmsg_t *req = self->current;
    self->current = NULL;
    s_cell_end(self);
    s_publish_status(self, req, "idle");
    jmsg_destroy(&req);
    self->state = SESSION_IDLE;
    s_idle_rearm(self);
    s_pump(self);
    return 0;
}

/*  A line of the kernel's own diagnostics, into kenneld's log: prefixed with the session,
 *  made printable, cut short and at most KERNEL_LOG_PER_MINUTE a minute, since user code
 *  can write such frames too. The kernel has no other way into kenneld's log. */
static void s_on_log(session_t *self, const json_t *op)
{
    if (!log_allow_in(&self->kernel_log, KERNEL_LOG_PER_MINUTE, 60000))
        return;
    const char *text = json_string_value(json_object_get(op, "text"));
    char clean[KERNEL_LOG_CHARS];
    LOG_W("session=%s: kernel: %s", self->id,
          log_sanitize(clean, sizeof clean, text ? text : "", text ? strlen(text) : 0));
}

int session_on_kernel(session_t *self, kpipe_frame_t *frame, const char **why)
{
    *why = NULL;
    /* Frames still in the pipe of a kernel that is being killed are of no use to anyone. */
    if (self->state == SESSION_ENDED || self->state == SESSION_DEAD || self->restart_pending ||
        self->evicting)
        return 0;
    op_scan_t scan;
    op_head_t head;
    const char *name = s_op_head(frame, &scan, &head) == 0 ? head.op : NULL;
    json_t *op = head.json; /* (NULL for the hot ops, which read head only) */
    int rc = -1;
    if (!name) {
        *why = "op header is not a JSON object with an op";
    } else if (strcmp(name, "hello") == 0) {
        rc = s_on_hello(self, frame, why);
    } else if (strcmp(name, "fatal") == 0 && self->state == SESSION_STARTING) {
        /* The launcher could not build the sandbox: keep its reason for the clients. */
        const char *error = json_string_value(json_object_get(op, "error"));
        char clean[200];
        snprintf(self->start_error, sizeof self->start_error, "%s",
                 log_sanitize(clean, sizeof clean, error ? error : "", error ? strlen(error) : 0));
        LOG_W("session=%s: kernel could not start: %s", self->id, self->start_error);
        rc = 0;
    } else if (strcmp(name, "log") == 0) {
        s_on_log(self, op);
        rc = 0;
    } else if (self->state == SESSION_STARTING) {
        *why = "output before hello";
    } else if (strcmp(name, "saved") == 0) {
        rc = s_on_saved(self, frame, op, why);
    } else if (strcmp(name, "restored") == 0) {
        rc = s_on_restored(self, op, why);
    } else if (strcmp(name, "restore_ready") == 0) {
        rc = s_on_restore_ready(self, why);
    } else if (strcmp(name, "save_ready") == 0) {
        rc = s_on_save_ready(self, op, why);
    } else if (strcmp(name, "reply") == 0) {
        rc = s_on_reply(self, frame, &head, why);
    } else if (strcmp(name, "done") == 0) {
        rc = s_on_done(self, &head, why);
    } else if (strcmp(name, "iopub") == 0) {
        const char *type = head.msg_type;
        const route_t *r = type ? route_on(type, ROUTE_IOPUB) : NULL;
        jmsg_t *m = NULL;
        if (!r || r->handler != ROUTE_BY_KERNEL)
            *why = "iopub msg_type not allowed";
        else if (!s_output_allowed(self, frame, type))
            rc = 0; /* past the cap: dropped unread */
        else if (!(m = s_from_kernel(self, frame, type, self->current ? self->current : self->last,
                                     0, head.execution_count >= 0)))
            *why = "iopub metadata or content is not a JSON object";
        else {
            json_t *count = json_object_get(jmsg_content(m), "execution_count");
            long long n = head.execution_count >= 0 ? head.execution_count
                          : json_is_integer(count)   ? json_integer_value(count)
                                                     : -1;
            if (strcmp(type, "execute_input") == 0 && self->current && n >= 0)
                self->execution_count = n;
            s_send_output(self, &m);
            rc = 0;
        }
    } else if (strcmp(name, "stdin") == 0) {
        const char *type = head.msg_type;
        jmsg_t *m = NULL;
        if (!type || strcmp(type, "input_request") != 0 || self->state != SESSION_BUSY ||
            strcmp(jmsg_type(self->current), "execute_request") != 0 ||
            !s_json_true(jmsg_content(self->current), "allow_stdin", 0) || self->awaiting_input)
            *why = "input_request not allowed now";
        else if (!(m = s_from_kernel(self, frame, type, self->current, 1, 0)))
            *why = "input_request metadata or content is not a JSON object";
        else {
            self->awaiting_input = 1;
            s_send(self, ROUTE_KSTDIN, &m);
            rc = 0;
        }
    } else {
        *why = "unknown op";
    }
    json_decref(op);
    return rc;
}

/* ---- kernel exit ------------------------------------------------------------------------- */

/*  Fail every request still waiting, queued or for the first hello (the kernel could not
 *  start, the session ended), each in its own busy/idle. */
static void s_fail_waiting(session_t *self, const char *ename, const char *evalue,
                           const char *outcome)
{
    jmsg_t *req;
    while ((req = zlistx_detach(self->queue, NULL))) {
        s_fail(self, ROUTE_SHELL, req, ename, evalue, outcome, FAIL_WRAP | FAIL_UNRUN);
        jmsg_destroy(&req);
    }
    size_t i = 0;
    while ((req = zlistx_detach(self->info_waiting, NULL))) {
        s_fail(self, self->info_channels[i++], req, ename, evalue, outcome,
               FAIL_WRAP | FAIL_UNRUN);
        jmsg_destroy(&req);
    }
}

/*  No kernel came (evalue says why): the requests waiting for one fail with KernelStartFailed,
 *  and the next start has its own error to report. */
static void s_fail_start(session_t *self, const char *evalue)
{
    self->start_error[0] = '\0';
    s_fail_waiting(self, "KernelStartFailed", evalue, "crashed");
}

void session_on_kernel_exit(session_t *self, const char *how, session_exit_t kind)
{
    if (self->state == SESSION_ENDED)
        return;
    char evalue[320];
    if (self->evicting && self->restart_pending) {
        /* A restart came while the eviction killed the kernel: the restart wins (its
         * snapshot is dropped already); the session once stayed "starting" for ever. */
        self->evicting = 0;
        self->state = SESSION_IDLE;
    }
    if (self->evicting) {
        /* Idle eviction, step 3: the kernel is gone, its state kept. */
        self->evicting = 0;
        self->state = SESSION_EVICTED;
        LOG_I("session=%s: evicted", self->id);
        if (zlistx_size(self->queue) || zlistx_size(self->info_waiting))
            s_revive(self);
        else
            s_arm_ttl(self);
        return;
    }
    if (self->state == SESSION_SAVING && self->forking) {
        /* A fork's save: this session's own state is not at stake, only the fork's. */
        s_cell_end(self);
        s_fork_failed(self, how);
        self->state = SESSION_IDLE;
    }
    if (self->state == SESSION_SAVING || self->state == SESSION_RESTORING) {
        s_cell_end(self);
        self->storing = 0;
        snprintf(evalue, sizeof evalue,
                 "[kennel: the kernel %.200s while %s this session's saved state; it starts "
                 "fresh]\n",
                 how, self->state == SESSION_SAVING ? "saving" : "restoring");
        if (!self->restart_pending) /* a restart asked for is no news */
            s_set_notice(self, evalue);
        self->ops->snapshot_drop(self->ctx);
        self->restore_pending = 0;
    }
    s_restore_fd_close(self);
    s_save_fd_close(self);
    int expected = self->restart_pending;
    self->restart_pending = 0;
    self->awaiting_input = 0;
    if (self->current) {
        const char *ename = "KernelDied", *outcome = "crashed";
        if (self->deadline_phase == 3) {
            ename = "CellTimeout";
            outcome = "timeout";
            snprintf(evalue, sizeof evalue,
                     "the cell ran past its %.1f s deadline and did not stop within %.1f s, so "
                     "the kernel was killed and restarted: its state is lost",
                     self->cell_timeout_ms / 1000.0, self->limits.grace_ms / 1000.0);
        } else if (expected) {
            ename = "KernelRestarted";
            outcome = "killed";
            snprintf(evalue, sizeof evalue, "the kernel was restarted while running this request");
        } else {
            outcome = kind == SESSION_EXIT_MEMORY ? "memory" : "crashed";
            snprintf(evalue, sizeof evalue,
                     "the kernel %.200s while running this request; it was restarted and its "
                     "state is lost",
                     how);
        }
        jmsg_t *req = self->current;
        self->current = NULL;
        s_fail(self, ROUTE_SHELL, req, ename, evalue, outcome, 0);
        s_publish_status(self, req, "idle");
        /* stop_on_error, as for any failed cell; a restart the client asked for is not one
         * (its own request aborted what was queued before it). */
        int abort = !expected && s_stops_on_error(req);
        if (route_lookup(jmsg_type(req))->reply_type) {
            jmsg_destroy(&self->last);
            self->last = req;
        } else {
            jmsg_destroy(&req); /* a comm message: stray output stays the last cell's */
        }
        s_cell_end(self);
        if (abort)
            s_abort_queued_executes(self);
    }
    if (!expected)
        LOG_W("session=%s: kernel %s", self->id, how);
    if (self->had_hello || expected) {
        self->restarts++;
        if (s_start_kernel(self) == 0)
            return;
        snprintf(evalue, sizeof evalue, "the kernel could not be restarted: %.200s",
                 self->start_error);
    } else {
        if (self->start_error[0])
            snprintf(evalue, sizeof evalue, "the kernel could not start: %.200s", self->start_error);
        else
            snprintf(evalue, sizeof evalue, "the kernel %.200s before it was ready", how);
        self->state = SESSION_DEAD;
        s_arm_ttl(self); /* a session no kernel serves expires as an evicted one does */
    }
    s_fail_start(self, evalue);
}

void session_start_failed(session_t *self, const char *why)
{
    snprintf(self->start_error, sizeof self->start_error, "%s", why);
}

const char *session_start_error(const session_t *self)
{
    return self->start_error;
}

void session_end(session_t *self, const char *why)
{
    if (self->state == SESSION_ENDED)
        return;
    if (self->state != SESSION_DEAD)
        self->ops->kernel_signal(self->ctx, SIGKILL);
    s_cell_end(self);
    s_fork_failed(self, "the session ended");
    /* Every request still open gets its answer (its clients once waited for ever). */
    if (self->current) {
        s_fail(self, ROUTE_SHELL, self->current, "SessionEnded", why, "killed", 0);
        s_publish_status(self, self->current, "idle");
        jmsg_destroy(&self->current);
    }
    s_fail_waiting(self, "SessionEnded", why, "killed");
    self->state = SESSION_ENDED;
}
