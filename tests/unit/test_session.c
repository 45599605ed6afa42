/*  Unit tests of the session state machine with recording ops (no sockets, no processes):
 *  queueing one request at a time, busy/idle order, kernel_info before and after hello,
 *  stop_on_error aborts, kernel protocol violations, stdin, interrupt, shutdown, kernel death,
 *  a failed start, and the queue limit. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "../harness.h"
#include "log.h"
#include "route.h"
#include "util.h"
#include "session.h"
#include "wire.h"

typedef struct {
    unsigned channel;
    char type[64];
    char parent_id[64];
    json_t *content;
    const void *content_at; /* where its content's bytes were (compared, never read) */
} sent_t;

typedef struct {
    sent_t sent[256];
    int nsent;
    char kframes[64][160]; /* op header + ' ' + header msg_type of each frame to the kernel */
    int nk;
    int starts, start_fails, ended;
    int too_large;          /* to_kernel refuses the next frames as SESSION_TOO_LARGE */
    long long timer_ms;     /* the armed cell timer's delay, or -1 */
    long long idle_ms;      /* the armed idle timer's delay, or -1 */
    char *snapshot;         /* what snapshot_store kept */
    size_t snapshot_len;
    int snapshot_drops;
    int store_refused;      /* snapshot_store fails at once */
    int timer_arms, timer_cancels;
    long long flush_ms;     /* the armed flush timer's delay, or -1 */
    size_t backlog;         /* what iopub_backlog answers */
    json_t *metadata[256];  /* metadata of each sent message (parallel to sent) */
    int signals[16];
    int nsig;
    struct {                /* each cell_done: the code, outcome, error name, cell number */
        char code[32], outcome[24], ename[40];
        long long cell;
        size_t output_bytes;
    } done[16];
    int ndone;
    int forks;              /* forked calls */
    char forked[64];        /* the last one's data, or "why: ..." */
    char forked_unsaved[64]; /* its unsaved names, comma-joined */
    int fd_restores;        /* snapshot_fd opens a file (else -1: the bytes go) */
    int snapshot_fd;        /* the last one opened, or -1 */
    int fds_passed;         /* fd_to_kernel calls with that very descriptor */
    int file_saves;         /* snapshot_file makes a file (else -1: the bytes go) */
    int save_file;          /* that file (the test's own descriptor), or -1 */
    int fits_refused;       /* snapshot_fits refuses */
    int save_fds_passed;    /* fd_to_kernel calls with a copy of the save file */
    int refusals;           /* fd_to_kernel calls with -1 */
    long long stored_len;   /* snapshot_store_fd's len, or -1 */
    long long stored_size;  /* the size of the file it was given */
} rec_t;

/*  A part as a client would read it: kenneld passes a kernel's iopub parts on as bytes. New
 *  reference. */
static json_t *s_wire_part(const jmsg_t *m, jmsg_part_t part)
{
    if (jmsg_json(m, part))
        return json_incref(jmsg_json(m, part));
    size_t len = 0;
    const void *raw = jmsg_raw(m, part, &len);
    return raw ? json_loadb(raw, len, JMSG_JSON_LOAD_FLAGS, NULL) : NULL;
}

static void op_send(void *ctx, unsigned channel, jmsg_t **msg_p)
{
    rec_t *r = ctx;
    sent_t *s = &r->sent[r->nsent++];
    s->channel = channel;
    snprintf(s->type, sizeof s->type, "%s", jmsg_type(*msg_p));
    const char *pid = json_string_value(json_object_get(jmsg_json(*msg_p, JMSG_PARENT), "msg_id"));
    snprintf(s->parent_id, sizeof s->parent_id, "%s", pid ? pid : "");
    s->content = s_wire_part(*msg_p, JMSG_CONTENT);
    size_t len;
    s->content_at = jmsg_raw(*msg_p, JMSG_CONTENT, &len);
    r->metadata[r->nsent - 1] = s_wire_part(*msg_p, JMSG_METADATA);
    jmsg_destroy(msg_p);
}

static int op_to_kernel(void *ctx, const kpipe_iov_t *parts, size_t n)
{
    rec_t *r = ctx;
    char type[64] = "";
    if (n > 1) {
        json_t *h = json_loadb(parts[1].data, parts[1].len, 0, NULL);
        snprintf(type, sizeof type, "%s", json_string_value(json_object_get(h, "msg_type")) ?: "");
        json_decref(h);
    }
    if (r->too_large)
        return SESSION_TOO_LARGE;
    snprintf(r->kframes[r->nk++], 160, "%.*s %s", (int)parts[0].len, (const char *)parts[0].data, type);
    return 0;
}

static int op_kernel_start(void *ctx)
{
    rec_t *r = ctx;
    r->starts++;
    return r->start_fails ? -1 : 0;
}

static void op_kernel_signal(void *ctx, int sig)
{
    rec_t *r = ctx;
    r->signals[r->nsig++] = sig;
}

static void op_ended(void *ctx)
{
    ((rec_t *)ctx)->ended++;
}

static void op_timer_arm(void *ctx, session_timer_t which, long long ms)
{
    rec_t *r = ctx;
    if (which == SESSION_TIMER_FLUSH) {
        r->flush_ms = ms;
        return;
    }
    if (which == SESSION_TIMER_IDLE) {
        r->idle_ms = ms;
        return;
    }
    r->timer_ms = ms;
    r->timer_arms++;
}

static void op_timer_cancel(void *ctx, session_timer_t which)
{
    rec_t *r = ctx;
    if (which == SESSION_TIMER_FLUSH) {
        r->flush_ms = -1;
        return;
    }
    if (which == SESSION_TIMER_IDLE) {
        r->idle_ms = -1;
        return;
    }
    r->timer_ms = -1;
    r->timer_cancels++;
}

static int op_snapshot_store(void *ctx, const void *data, size_t len, const char **why)
{
    rec_t *r = ctx;
    if (r->store_refused) {
        *why = "refused by the test";
        return -1;
    }
    free(r->snapshot);
    r->snapshot = malloc(len + 1);
    memcpy(r->snapshot, data, len);
    r->snapshot_len = len;
    return 0;
}

static int op_snapshot_load(void *ctx, void **data, size_t *len)
{
    rec_t *r = ctx;
    if (!r->snapshot)
        return -1;
    *data = malloc(r->snapshot_len + 1);
    memcpy(*data, r->snapshot, r->snapshot_len);
    *len = r->snapshot_len;
    return 0;
}

static void op_snapshot_drop(void *ctx)
{
    rec_t *r = ctx;
    free(r->snapshot);
    r->snapshot = NULL;
    r->snapshot_drops++;
}

static size_t op_iopub_backlog(void *ctx)
{
    return ((rec_t *)ctx)->backlog;
}

static void op_cell_done(void *ctx, const jmsg_t *request, const json_t *metadata,
                         const char *ename, long long cell, size_t output_bytes)
{
    rec_t *r = ctx;
    if (r->ndone == 16)
        return;
    const char *code = json_string_value(json_object_get(jmsg_content(request), "code"));
    const char *outcome = json_string_value(json_object_get(metadata, "outcome"));
    snprintf(r->done[r->ndone].code, 32, "%s", code ? code : "");
    snprintf(r->done[r->ndone].outcome, 24, "%s", outcome ? outcome : "");
    snprintf(r->done[r->ndone].ename, 40, "%s", ename ? ename : "");
    r->done[r->ndone].cell = cell;
    r->done[r->ndone++].output_bytes = output_bytes;
}

static void op_forked(void *ctx, const void *data, size_t len, const json_t *unsaved,
                      const char *why)
{
    rec_t *r = ctx;
    r->forks++;
    if (!data)
        snprintf(r->forked, sizeof r->forked, "why: %s", why);
    else
        snprintf(r->forked, sizeof r->forked, "%.*s", (int)len, (const char *)data);
    r->forked_unsaved[0] = '\0';
    size_t i;
    json_t *n;
    json_array_foreach((json_t *)unsaved, i, n)
        snprintf(r->forked_unsaved + strlen(r->forked_unsaved),
                 sizeof r->forked_unsaved - strlen(r->forked_unsaved), "%s%s", i ? "," : "",
                 json_string_value(n));
}

static int op_snapshot_fd(void *ctx)
{
    rec_t *r = ctx;
    r->snapshot_fd = r->fd_restores && r->snapshot ? open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
    return r->snapshot_fd;
}

static int op_fd_to_kernel(void *ctx, int fd)
{
    rec_t *r = ctx;
    struct stat a, b;
    r->refusals += fd < 0;
    r->fds_passed += fd >= 0 && fd == r->snapshot_fd && fcntl(fd, F_GETFD) >= 0;
    r->save_fds_passed += fd >= 0 && r->save_file >= 0 && fstat(fd, &a) == 0 &&
                          fstat(r->save_file, &b) == 0 && a.st_ino == b.st_ino;
    return 0;
}

static int op_snapshot_file(void *ctx)
{
    rec_t *r = ctx;
    if (!r->file_saves)
        return -1;
    if (r->save_file < 0)
        r->save_file = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    else if (ftruncate(r->save_file, 0) < 0)
        return -1;
    return r->save_file < 0 ? -1 : dup(r->save_file);
}

static int op_snapshot_fits(void *ctx, size_t len, const char **why)
{
    (void)len;
    rec_t *r = ctx;
    if (r->fits_refused)
        *why = "over the test's cap";
    return r->fits_refused ? -1 : 0;
}

static int op_snapshot_store_fd(void *ctx, int fd, size_t len, const char **why)
{
    (void)why;
    rec_t *r = ctx;
    struct stat st;
    r->stored_len = (long long)len;
    r->stored_size = fstat(fd, &st) == 0 ? (long long)st.st_size : -1;
    close(fd);
    return 0;
}

static const session_ops_t s_ops = {op_send,          op_to_kernel,      op_kernel_start,
                                    op_kernel_signal, op_ended,          op_timer_arm,
                                    op_timer_cancel,  op_snapshot_store, op_snapshot_load,
                                    op_snapshot_drop, op_iopub_backlog,  op_cell_done,
                                    op_forked,        op_snapshot_fd,    op_fd_to_kernel,
                                    op_snapshot_file, op_snapshot_fits,  op_snapshot_store_fd};

static rec_t *s_rec_new(void)
{
    rec_t *r = calloc(1, sizeof(rec_t));
    r->timer_ms = r->idle_ms = r->flush_ms = -1;
    r->save_file = -1;
    r->stored_len = r->stored_size = -1;
    return r;
}

static void s_rec_free(rec_t *r)
{
    for (int i = 0; i < r->nsent; i++) {
        json_decref(r->sent[i].content);
        json_decref(r->metadata[i]);
    }
    free(r->snapshot);
    if (r->save_file >= 0)
        close(r->save_file);
    free(r);
}

/*  A request as a client would send it, through a real encode/decode. */
static jmsg_t *s_req(const char *type, json_t *content, char *id_out)
{
    wire_t *w = wire_new("k", 1, NULL);
    jmsg_t *m = jmsg_new(type, "client");
    zframe_t *id = zframe_new("CLIENT", 6);
    zmsg_append(jmsg_ids(m), &id);
    if (content)
        jmsg_set_json(m, JMSG_CONTENT, content);
    if (id_out)
        strcpy(id_out, jmsg_id(m));
    zmsg_t *z = wire_encode(w, m);
    jmsg_destroy(&m);
    jmsg_t *out = NULL;
    wire_decode(w, &z, &out);
    wire_destroy(&w);
    return out;
}

static void s_request(session_t *s, unsigned channel, const char *type, json_t *content, char *id_out)
{
    jmsg_t *m = s_req(type, content, id_out);
    session_on_request(s, channel, &m);
}

/*  Where the content part (the third) of the last frame s_kernel fed was read into. */
static const void *s_fed_content_at;

/*  Feed the session one kernel frame made of string parts. */
static int s_kernel(session_t *s, int n, const char **parts)
{
    kpipe_iov_t iov[8];
    for (int i = 0; i < n; i++)
        iov[i] = (kpipe_iov_t){parts[i], strlen(parts[i])};
    uint8_t *buf;
    size_t len;
    kpipe_encode(iov, (size_t)n, 1 << 20, &buf, &len);
    kpipe_t *d = kpipe_new_with(1 << 20, session_kpipe_alloc());
    kpipe_feed(d, buf, len);
    kpipe_frame_t *f = NULL;
    kpipe_next(d, &f);
    s_fed_content_at = n > 2 ? kpipe_frame_part(f, 2).data : NULL;
    const char *why = NULL;
    int rc = session_on_kernel(s, f, &why);
    kpipe_frame_destroy(&f);
    kpipe_destroy(&d);
    free(buf);
    return rc;
}

static int s_hello(session_t *s)
{
    const char *parts[] = {"{\"op\":\"hello\",\"pid\":1}", "{\"protocol_version\":\"5.3\",\"implementation\":\"kennel\"}"};
    return s_kernel(s, 2, parts);
}

static int s_reply(session_t *s, const char *type, const char *parent_id, const char *content)
{
    /* The status (and an error's name) go in the op header too, as the kernel sends them. */
    json_t *c = json_loads(content, 0, NULL);
    const char *status = json_string_value(json_object_get(c, "status"));
    const char *ename = json_string_value(json_object_get(c, "ename"));
    char op[320], en[96] = "";
    if (ename)
        snprintf(en, sizeof en, ",\"ename\":\"%s\"", ename);
    snprintf(op, sizeof op, "{\"op\":\"reply\",\"msg_type\":\"%s\",\"parent_msg_id\":\"%s\",\"status\":\"%s\"%s}",
             type, parent_id, status ? status : "", en);
    json_decref(c);
    const char *parts[] = {op, "{}", content};
    return s_kernel(s, 3, parts);
}

static session_t *s_session_with(rec_t *r, size_t max_queued, long long timeout_ms, size_t max_output)
{
    session_limits_t lim = {.max_queued = max_queued, .timeout_ms = timeout_ms, .grace_ms = 2000,
                            .max_output = max_output, .idle_timeout_ms = 60000};
    session_t *s = session_new("id1", "name1", &lim, &s_ops, r);
    CHECK_EQ_INT(session_start(s), 0);
    return s;
}

static session_t *s_session(rec_t *r, size_t max_queued)
{
    session_limits_t lim = {.max_queued = max_queued, .grace_ms = 2000, .max_output = 1 << 20};
    session_t *s = session_new("id1", "name1", &lim, &s_ops, r);
    CHECK_EQ_INT(session_start(s), 0);
    return s;
}

/*  A session with these limits whose kernel said hello. */
static session_t *s_session_ready(rec_t *r, const session_limits_t *lim)
{
    session_t *s = session_new("id1", "name1", lim, &s_ops, r);
    CHECK_EQ_INT(session_start(s), 0);
    s_hello(s);
    return s;
}

/*  A started session (not yet said hello) with this idle timeout and an hour to live. */
static session_t *s_session_ttl(rec_t *r, const char *id, long long idle_ms)
{
    session_limits_t lim = {.max_queued = 8, .grace_ms = 2000, .max_output = 1 << 20,
                            .idle_timeout_ms = idle_ms, .ttl_ms = 3600000};
    return session_new(id, "name1", &lim, &s_ops, r);
}

/*  Index of the first message sent after `from` with this type, or -1. */
static int s_find(rec_t *r, int from, const char *type)
{
    for (int i = from; i < r->nsent; i++)
        if (strcmp(r->sent[i].type, type) == 0)
            return i;
    return -1;
}

static const char *s_status(rec_t *r, int i)
{
    return json_string_value(json_object_get(r->sent[i].content, "execution_state"));
}

TEST(kernel_info_waits_for_hello)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    CHECK_EQ_INT(r->starts, 1);
    CHECK_EQ_INT(session_state(s), SESSION_STARTING);
    char id[40];
    s_request(s, ROUTE_CONTROL, "kernel_info_request", NULL, id);
    CHECK_EQ_INT(r->nsent, 0);
    CHECK_EQ_INT(s_hello(s), 0);
    CHECK_EQ_INT(session_state(s), SESSION_IDLE);
    /* busy, reply on control, idle — all with the request as parent. */
    CHECK_EQ_INT(r->nsent, 3);
    CHECK_STR(s_status(r, 0), "busy");
    CHECK_STR(r->sent[1].type, "kernel_info_reply");
    CHECK_EQ_INT(r->sent[1].channel, ROUTE_CONTROL);
    CHECK_STR(r->sent[1].parent_id, id);
    CHECK_STR(json_string_value(json_object_get(r->sent[1].content, "status")), "ok");
    CHECK_STR(json_string_value(json_object_get(r->sent[1].content, "implementation")), "kennel");
    CHECK_STR(s_status(r, 2), "idle");
    /* After hello it is answered at once, without the kernel. */
    s_request(s, ROUTE_SHELL, "kernel_info_request", NULL, NULL);
    CHECK_EQ_INT(r->nsent, 6);
    CHECK_EQ_INT(r->nk, 0);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(kernel_info_past_the_waiting_bound_keeps_the_latest)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    char first[40], last[40], id[40];
    for (int i = 0; i < 100; i++) {
        s_request(s, i % 2 ? ROUTE_CONTROL : ROUTE_SHELL, "kernel_info_request", NULL, id);
        if (i == 0)
            snprintf(first, sizeof first, "%s", id);
    }
    snprintf(last, sizeof last, "%s", id);
    CHECK_EQ_INT(r->nsent, 0);
    CHECK_EQ_INT(s_hello(s), 0);
    CHECK_EQ_INT(r->nsent, 3 * 64); /* the newest 64, each between busy and idle */
    int saw_first = 0, saw_last = 0, right_channel = 1;
    for (int i = 0; i < r->nsent; i++) {
        if (strcmp(r->sent[i].type, "kernel_info_reply") != 0)
            continue;
        saw_first |= strcmp(r->sent[i].parent_id, first) == 0;
        saw_last |= strcmp(r->sent[i].parent_id, last) == 0;
    }
    /* The 100th request (i = 99) came on control, and is answered there. */
    int rep = s_find(r, 3 * 63, "kernel_info_reply");
    CHECK(rep >= 0);
    right_channel = rep >= 0 && r->sent[rep].channel == ROUTE_CONTROL &&
                    strcmp(r->sent[rep].parent_id, last) == 0;
    CHECK(!saw_first);
    CHECK(saw_last);
    CHECK(right_channel);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(one_request_at_a_time)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    char id1[40], id2[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1"), id1);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "2"), id2);
    CHECK_EQ_INT(r->nk, 0); /* nothing before hello */
    s_hello(s);
    CHECK_EQ_INT(r->nk, 1);
    CHECK_STR(r->kframes[0], "{\"op\":\"request\",\"channel\":\"shell\"} execute_request");
    CHECK_EQ_INT(session_state(s), SESSION_BUSY);
    CHECK_STR(s_status(r, 0), "busy");
    CHECK_STR(r->sent[0].parent_id, id1);
    /* Output is published with the running request as parent. */
    const char *out[] = {"{\"op\":\"iopub\",\"msg_type\":\"stream\"}", "{}", "{\"name\":\"stdout\",\"text\":\"x\"}"};
    CHECK_EQ_INT(s_kernel(s, 3, out), 0);
    int at = s_find(r, 0, "stream");
    CHECK(at > 0);
    CHECK_STR(r->sent[at].parent_id, id1);
    /* ... its content the very bytes the pipe's decoder read, not a copy of them. */
    CHECK(r->sent[at].content_at == s_fed_content_at);
    /* The reply releases the next request. */
    CHECK_EQ_INT(s_reply(s, "execute_reply", id1, "{\"status\":\"ok\",\"execution_count\":1}"), 0);
    int rep = s_find(r, 0, "execute_reply");
    CHECK(rep > at);
    CHECK_EQ_INT(r->sent[rep].channel, ROUTE_SHELL);
    CHECK_STR(s_status(r, rep + 1), "idle");
    CHECK_STR(r->sent[rep + 1].parent_id, id1);
    CHECK_STR(s_status(r, rep + 2), "busy");
    CHECK_STR(r->sent[rep + 2].parent_id, id2);
    CHECK_EQ_INT(r->nk, 2);
    json_t *info = session_info(s);
    CHECK_EQ_INT(json_integer_value(json_object_get(info, "cells")), 1);
    CHECK_STR(json_string_value(json_object_get(info, "state")), "busy");
    json_decref(info);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(stop_on_error_aborts_queued_executes)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    char id1[40], id2[40], id3[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1/0"), id1);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "2"), id2);
    s_request(s, ROUTE_SHELL, "complete_request", json_pack("{s:s, s:i}", "code", "pri", "cursor_pos", 3), NULL);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "3"), id3);
    int mark = r->nsent;
    s_reply(s, "execute_reply", id1, "{\"status\":\"error\",\"ename\":\"ZeroDivisionError\"}");
    int a2 = s_find(r, mark + 1, "execute_reply");
    CHECK(a2 > 0);
    CHECK_STR(r->sent[a2].parent_id, id2);
    CHECK_STR(json_string_value(json_object_get(r->sent[a2].content, "status")), "aborted");
    int a3 = s_find(r, a2 + 1, "execute_reply");
    CHECK(a3 > 0);
    CHECK_STR(r->sent[a3].parent_id, id3);
    /* The completion still reaches the kernel. */
    CHECK_EQ_INT(r->nk, 2);
    CHECK(strstr(r->kframes[1], "complete_request") != NULL);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(request_too_large_for_a_frame)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    r->too_large = 1;
    char id1[40], id2[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "huge"), id1);
    /* Refused within one busy/idle, with an error and its reply. */
    CHECK_EQ_INT(r->nsent, 4);
    CHECK_STR(r->sent[0].type, "status");
    CHECK_STR(r->sent[1].type, "error");
    CHECK_STR(r->sent[2].type, "execute_reply");
    CHECK_STR(json_string_value(json_object_get(r->sent[2].content, "ename")), "RequestTooLarge");
    CHECK_STR(r->sent[3].type, "status");
    CHECK_STR(json_string_value(json_object_get(r->sent[3].content, "execution_state")), "idle");
    /* The queue goes on: the next request reaches the kernel. */
    r->too_large = 0;
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "2"), id2);
    CHECK_EQ_INT(r->nk, 1);
    /* Behind it, as behind any failed cell, queued executes are aborted. */
    char id3[40], id4[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "huge"), id3);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "4"), id4);
    r->too_large = 1;
    int mark = r->nsent;
    s_reply(s, "execute_reply", id2, "{\"status\":\"ok\"}");
    int refused = s_find(r, mark, "execute_reply");
    refused = s_find(r, refused + 1, "execute_reply");
    CHECK_STR(r->sent[refused].parent_id, id3);
    int aborted = s_find(r, refused + 1, "execute_reply");
    CHECK(aborted > 0);
    CHECK_STR(r->sent[aborted].parent_id, id4);
    CHECK_STR(json_string_value(json_object_get(r->sent[aborted].content, "status")), "aborted");
    session_destroy(&s);
    s_rec_free(r);
}

TEST(stop_on_error_false_keeps_queue)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    char id1[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s, s:b}", "code", "1/0", "stop_on_error", 0), id1);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "2"), NULL);
    s_reply(s, "execute_reply", id1, "{\"status\":\"error\"}");
    CHECK_EQ_INT(r->nk, 2);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(kernel_violations)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    const char *early[] = {"{\"op\":\"iopub\",\"msg_type\":\"stream\"}", "{}", "{}"};
    CHECK_EQ_INT(s_kernel(s, 3, early), -1); /* output before hello */
    s_hello(s);
    CHECK_EQ_INT(s_hello(s), -1); /* a second hello */
    const char *status[] = {"{\"op\":\"iopub\",\"msg_type\":\"status\"}", "{}", "{\"execution_state\":\"idle\"}"};
    CHECK_EQ_INT(s_kernel(s, 3, status), -1); /* status is kenneld's */
    const char *reply_type[] = {"{\"op\":\"iopub\",\"msg_type\":\"execute_reply\"}", "{}", "{}"};
    CHECK_EQ_INT(s_kernel(s, 3, reply_type), -1);
    const char *array[] = {"{\"op\":\"iopub\",\"msg_type\":\"stream\"}", "{}", "[1,2]"};
    CHECK_EQ_INT(s_kernel(s, 3, array), -1);
    const char *notjson[] = {"op!"};
    CHECK_EQ_INT(s_kernel(s, 1, notjson), -1);
    const char *unknown[] = {"{\"op\":\"mount\"}"};
    CHECK_EQ_INT(s_kernel(s, 1, unknown), -1);
    CHECK_EQ_INT(s_reply(s, "execute_reply", "nobody", "{}"), -1); /* nothing in flight */
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1"), id);
    CHECK_EQ_INT(s_reply(s, "execute_reply", "other-id", "{}"), -1);
    CHECK_EQ_INT(s_reply(s, "complete_reply", id, "{}"), -1);
    const char *input[] = {"{\"op\":\"stdin\",\"msg_type\":\"input_request\"}", "{}", "{\"prompt\":\"\"}"};
    /* allow_stdin defaults to true in the spec, but here the client said false. */
    s_reply(s, "execute_reply", id, "{\"status\":\"ok\"}");
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s, s:b}", "code", "input()", "allow_stdin", 0), id);
    CHECK_EQ_INT(s_kernel(s, 3, input), -1);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(stdin_round_trip)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s, s:b}", "code", "input()", "allow_stdin", 1), id);
    /* An input_reply nobody asked for is dropped. */
    s_request(s, ROUTE_STDIN, "input_reply", json_pack("{s:s}", "value", "early"), NULL);
    CHECK_EQ_INT(r->nk, 1);
    const char *input[] = {"{\"op\":\"stdin\",\"msg_type\":\"input_request\"}", "{}", "{\"prompt\":\"? \",\"password\":false}"};
    CHECK_EQ_INT(s_kernel(s, 3, input), 0);
    int at = s_find(r, 0, "input_request");
    CHECK(at >= 0);
    CHECK_EQ_INT(r->sent[at].channel, ROUTE_KSTDIN);
    CHECK_STR(r->sent[at].parent_id, id);
    s_request(s, ROUTE_STDIN, "input_reply", json_pack("{s:s}", "value", "42"), NULL);
    CHECK_EQ_INT(r->nk, 2);
    CHECK_STR(r->kframes[1], "{\"op\":\"request\",\"channel\":\"stdin\"} input_reply");
    session_destroy(&s);
    s_rec_free(r);
}

TEST(interrupt_and_shutdown)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    s_request(s, ROUTE_CONTROL, "interrupt_request", NULL, NULL);
    CHECK_EQ_INT(r->nsig, 0); /* idle: nothing to interrupt */
    CHECK(s_find(r, 0, "interrupt_reply") >= 0);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "sleep"), NULL);
    s_request(s, ROUTE_CONTROL, "interrupt_request", NULL, NULL);
    CHECK_EQ_INT(r->nsig, 1);
    CHECK_EQ_INT(r->signals[0], SIGINT);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "queued"), NULL);
    int from = r->nsent;
    s_request(s, ROUTE_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", 0), NULL);
    /* The running cell and the queued one are answered (their clients once waited for
     * ever), each with its idle. */
    int ended = 0, idles = 0;
    for (int i = from; i < r->nsent; i++) {
        const char *ename = json_string_value(json_object_get(r->sent[i].content, "ename"));
        ended += strcmp(r->sent[i].type, "execute_reply") == 0 && ename &&
                 strcmp(ename, "SessionEnded") == 0;
        idles += strcmp(r->sent[i].type, "status") == 0;
    }
    CHECK_EQ_INT(ended, 2);
    CHECK(idles >= 2);
    int rep = s_find(r, 0, "shutdown_reply");
    CHECK(rep >= 0);
    CHECK_EQ_INT(r->sent[rep].channel, ROUTE_CONTROL);
    CHECK(s_find(r, rep + 1, "shutdown_reply") > rep); /* also on iopub */
    CHECK_EQ_INT(r->ended, 1);
    CHECK_EQ_INT(session_state(s), SESSION_ENDED);
    CHECK_EQ_INT(r->signals[r->nsig - 1], SIGKILL);
    int before = r->nsent;
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1"), NULL);
    CHECK_EQ_INT(r->nsent, before); /* an ended session answers nothing */
    session_destroy(&s);
    s_rec_free(r);
}

TEST(a_launched_sessions_restart_is_answered_restart_true_and_ends_it)
{
    /* A kernelspec launcher's session ends at any shutdown (its front end's kernel manager
     * starts the next kernel), but the reply says what was asked: Notebook took
     * `restart: false` for the kernel's death and shut the new kernel down. */
    rec_t *r = s_rec_new();
    session_limits_t lim = {.max_queued = 8, .grace_ms = 2000, .max_output = 1 << 20,
                            .end_on_shutdown = 1};
    session_t *s = s_session_ready(r, &lim);
    s_request(s, ROUTE_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", 1), NULL);
    int rep = s_find(r, 0, "shutdown_reply");
    CHECK(rep >= 0);
    CHECK(json_is_true(json_object_get(r->sent[rep].content, "restart")));
    int pub = s_find(r, rep + 1, "shutdown_reply");
    CHECK(pub > rep);
    CHECK_EQ_INT(r->sent[pub].channel, ROUTE_IOPUB);
    CHECK(json_is_true(json_object_get(r->sent[pub].content, "restart")));
    CHECK_EQ_INT(r->ended, 1);
    CHECK_EQ_INT(session_state(s), SESSION_ENDED);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(restart_keeps_session)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    s_request(s, ROUTE_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", 1), NULL);
    CHECK_EQ_INT(r->signals[0], SIGKILL);
    CHECK_EQ_INT(r->ended, 0);
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    CHECK_EQ_INT(r->starts, 2);
    CHECK_EQ_INT(session_state(s), SESSION_STARTING);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(kernel_death_fails_request_and_restarts)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    char id[40];
    char id2[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "os._exit(3)"), id);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "2"), id2);
    s_request(s, ROUTE_SHELL, "complete_request", json_pack("{s:s, s:i}", "code", "pri", "cursor_pos", 3), NULL);
    session_on_kernel_exit(s, "exited with status 3", SESSION_EXIT_CRASH);
    int err = s_find(r, 0, "error");
    int rep = s_find(r, 0, "execute_reply");
    CHECK(err >= 0 && rep > err);
    CHECK_STR(r->sent[rep].parent_id, id);
    CHECK_STR(json_string_value(json_object_get(r->sent[rep].content, "ename")), "KernelDied");
    CHECK(strstr(json_string_value(json_object_get(r->sent[rep].content, "evalue")), "status 3") != NULL);
    CHECK_STR(s_status(r, rep + 1), "idle");
    CHECK_STR(json_string_value(json_object_get(r->metadata[rep], "outcome")), "crashed");
    CHECK_EQ_INT(r->starts, 2);
    /* stop_on_error: the queued cell is aborted; the completion goes to the new kernel. */
    int ab = s_find(r, rep + 1, "execute_reply");
    CHECK(ab > rep);
    CHECK_STR(r->sent[ab].parent_id, id2);
    CHECK_STR(json_string_value(json_object_get(r->sent[ab].content, "status")), "aborted");
    int nk = r->nk;
    s_hello(s);
    CHECK_EQ_INT(r->nk, nk + 1);
    CHECK(strstr(r->kframes[nk], "complete_request") != NULL);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(failed_start_fails_waiting_requests)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1"), id);
    s_request(s, ROUTE_SHELL, "kernel_info_request", NULL, NULL);
    session_on_kernel_exit(s, "exited with status 1", SESSION_EXIT_CRASH);
    CHECK_EQ_INT(session_state(s), SESSION_DEAD);
    CHECK_EQ_INT(r->starts, 1); /* no restart loop */
    int rep = s_find(r, 0, "execute_reply");
    CHECK(rep >= 0);
    CHECK_STR(json_string_value(json_object_get(r->sent[rep].content, "ename")), "KernelStartFailed");
    CHECK(s_find(r, 0, "kernel_info_reply") >= 0);
    /* The next request tries again. */
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1"), NULL);
    CHECK_EQ_INT(r->starts, 2);
    session_on_kernel_exit(s, "exited with status 1", SESSION_EXIT_CRASH);
    /* A start that fails at once (the zygote cannot open the workspace, say) answers the
     * requests that asked for it: they once waited for ever. */
    r->start_fails = 1;
    int from = r->nsent;
    session_start_failed(s, "sandbox: open workspace: No such file or directory");
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1"), NULL);
    CHECK_EQ_INT(r->starts, 3);
    CHECK_EQ_INT(session_state(s), SESSION_DEAD);
    rep = s_find(r, from, "execute_reply");
    CHECK(rep >= 0);
    if (rep >= 0) {
        CHECK_STR(json_string_value(json_object_get(r->sent[rep].content, "ename")),
                  "KernelStartFailed");
        CHECK(strstr(json_string_value(json_object_get(r->sent[rep].content, "evalue")),
                     "open workspace") != NULL);
    }
    from = r->nsent;
    s_request(s, ROUTE_SHELL, "kernel_info_request", NULL, NULL);
    CHECK(s_find(r, from, "kernel_info_reply") >= 0);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(a_session_no_kernel_serves_expires)
{
    /* DEAD (its kernel cannot start; or busy when kenneld stopped, restored without state):
     * it once held its directory and a --max-sessions place for ever. */
    rec_t *r = s_rec_new();
    session_t *s = s_session_ttl(r, "id1", 60000);
    session_start(s);
    session_on_kernel_exit(s, "exited with status 1", SESSION_EXIT_CRASH);
    CHECK_EQ_INT(session_state(s), SESSION_DEAD);
    CHECK(r->idle_ms > 3600000 - 5000 && r->idle_ms <= 3600000);
    session_on_timer(s, SESSION_TIMER_IDLE);
    CHECK_EQ_INT(session_state(s), SESSION_ENDED);
    CHECK_EQ_INT(r->ended, 1);
    session_destroy(&s);
    /* Restored without state: the same. */
    r->ended = 0;
    s = s_session_ttl(r, "id2", 60000);
    session_start_restored(s, 0);
    CHECK_EQ_INT(session_state(s), SESSION_DEAD);
    session_on_timer(s, SESSION_TIMER_IDLE);
    CHECK_EQ_INT(r->ended, 1);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(history_restored_with_its_ttl_clock_and_checked)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session_ttl(r, "id1", 60000);
    /* Last used 50 minutes ago (by the wall clock): 10 of the hour's time to live are left. */
    json_t *h = json_pack("{s:s, s:I, s:I, s:I, s:[s], s:s}", "created",
                          "2026-01-02T03:04:05.000006Z", "cells", (json_int_t)41, "restarts",
                          (json_int_t)2, "used_at", (json_int_t)(util_wall_ms() - 3000000),
                          "unsaved", "gen", "notice", "[kennel: a line]");
    session_history_restore(s, h);
    session_start_restored(s, 1);
    CHECK(r->idle_ms > 600000 - 5000 && r->idle_ms <= 600000);
    json_t *info = session_info(s);
    CHECK_STR(json_string_value(json_object_get(info, "created")), "2026-01-02T03:04:05.000006Z");
    CHECK_EQ_INT(json_integer_value(json_object_get(info, "cells")), 41);
    CHECK_EQ_INT(json_integer_value(json_object_get(info, "restarts")), 2);
    json_decref(info);
    /* What it gives the next kenneld is what it was given. */
    json_t *again = session_history(s);
    CHECK_STR(json_string_value(json_array_get(json_object_get(again, "unsaved"), 0)), "gen");
    CHECK_STR(json_string_value(json_object_get(again, "notice")), "[kennel: a line]");
    long long used = json_integer_value(json_object_get(again, "used_at"));
    CHECK(llabs(used - (util_wall_ms() - 3000000)) < 5000);
    json_decref(again);
    json_decref(h);
    session_destroy(&s);
    /* Out of range or of the wrong type: the session's own values stay; a time of last use in
     * the future is now. */
    s = s_session_ttl(r, "id2", 60000);
    info = session_info(s);
    char own[64];
    snprintf(own, sizeof own, "%s", json_string_value(json_object_get(info, "created")));
    json_decref(info);
    char long_created[300]; /* over a time's length and a name's (HISTORY_MAX_NAME) */
    memset(long_created, '1', sizeof long_created - 1);
    long_created[sizeof long_created - 1] = '\0';
    const char *bad_created[] = {"", "yesterday", long_created};
    for (size_t i = 0; i < sizeof bad_created / sizeof bad_created[0]; i++) {
        h = json_pack("{s:s, s:I, s:s, s:I, s:[s, i, s]}", "created", bad_created[i], "cells",
                      (json_int_t)-5, "restarts", "2", "used_at",
                      (json_int_t)(i == 0 ? util_wall_ms() + 86400000 : INT64_MIN), "unsaved",
                      "gen", 7, long_created);
        session_history_restore(s, h);
        json_decref(h);
    }
    session_start_restored(s, 1);
    CHECK(r->idle_ms > 3600000 - 5000 && r->idle_ms <= 3600000);
    info = session_info(s);
    CHECK_STR(json_string_value(json_object_get(info, "created")), own);
    CHECK_EQ_INT(json_integer_value(json_object_get(info, "cells")), 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(info, "restarts")), 0);
    json_decref(info);
    /* Of the names, only the string of a name's size is kept. */
    again = session_history(s);
    const json_t *kept = json_object_get(again, "unsaved");
    CHECK_EQ_INT(json_array_size(kept), 1);
    CHECK_STR(json_string_value(json_array_get(kept, 0)), "gen");
    json_decref(again);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(queue_limit)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 2);
    s_hello(s);
    for (int i = 0; i < 3; i++) /* one runs, two wait */
        s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "x"), NULL);
    CHECK_EQ_INT(s_find(r, 0, "execute_reply"), -1);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "x"), id);
    int rep = s_find(r, 0, "execute_reply");
    CHECK(rep >= 0);
    CHECK_STR(r->sent[rep].parent_id, id);
    CHECK_STR(json_string_value(json_object_get(r->sent[rep].content, "ename")), "QueueFull");
    session_destroy(&s);
    s_rec_free(r);
}

TEST(unknown_and_misrouted_ignored)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    s_request(s, ROUTE_SHELL, "interrupt_request", NULL, NULL); /* control only */
    s_request(s, ROUTE_CONTROL, "execute_request", json_pack("{s:s}", "code", "1"), NULL);
    s_request(s, ROUTE_SHELL, "status", NULL, NULL);
    s_request(s, ROUTE_SHELL, "no_such", NULL, NULL);
    CHECK_EQ_INT(r->nsent, 0);
    /* A request of an unknown type: an error reply between busy and idle, kernel untouched. */
    s_request(s, ROUTE_SHELL, "no_such_request", NULL, NULL);
    CHECK_EQ_INT(r->nsent, 3);
    int rep = s_find(r, 0, "no_such_reply");
    CHECK(rep == 1);
    CHECK_STR(json_string_value(json_object_get(r->sent[rep].content, "ename")), "UnknownMessageType");
    CHECK_EQ_INT(r->nk, 0);
    CHECK_EQ_INT(r->nsig, 0);
    session_destroy(&s);
    s_rec_free(r);
}

static const char *s_outcome(rec_t *r, int i)
{
    return json_string_value(json_object_get(r->metadata[i], "outcome"));
}

TEST(deadline_signal_then_grace_kill)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session_with(r, 8, 5000, 1 << 20);
    s_hello(s);
    char id[40], id2[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "while True: pass"), id);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "2"), id2);
    CHECK_EQ_INT(r->timer_ms, 5000);
    session_on_timer(s, SESSION_TIMER_CELL); /* the deadline */
    CHECK_EQ_INT(r->nsig, 1);
    CHECK_EQ_INT(r->signals[0], SIGUSR2);
    CHECK_EQ_INT(r->timer_ms, 2000); /* the grace period */
    session_on_timer(s, SESSION_TIMER_CELL); /* the grace period ends */
    CHECK_EQ_INT(r->signals[1], SIGKILL);
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    int rep = s_find(r, 0, "execute_reply");
    CHECK(rep >= 0);
    CHECK_STR(r->sent[rep].parent_id, id);
    CHECK_STR(json_string_value(json_object_get(r->sent[rep].content, "ename")), "CellTimeout");
    CHECK(strstr(json_string_value(json_object_get(r->sent[rep].content, "evalue")), "restarted") != NULL);
    CHECK_STR(s_outcome(r, rep), "timeout");
    CHECK(json_integer_value(json_object_get(json_object_get(r->metadata[rep], "metrics"), "wall_ms")) >= 0);
    /* stop_on_error: the queued cell is aborted, and the kernel restarts. */
    int ab = s_find(r, rep + 1, "execute_reply");
    CHECK(ab > rep);
    CHECK_STR(r->sent[ab].parent_id, id2);
    CHECK_STR(json_string_value(json_object_get(r->sent[ab].content, "status")), "aborted");
    CHECK_EQ_INT(r->starts, 2);
    json_t *info = session_info(s);
    CHECK_STR(json_string_value(json_object_get(info, "last_outcome")), "timeout");
    json_decref(info);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(deadline_caught_in_time_keeps_kernel)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session_with(r, 8, 0, 1 << 20);
    s_hello(s);
    /* No session deadline, but the request asks for 1.5 s in its metadata. */
    wire_t *w = wire_new("k", 1, NULL);
    jmsg_t *m = jmsg_new("execute_request", "client");
    char id[40];
    strcpy(id, jmsg_id(m));
    jmsg_set_json(m, JMSG_CONTENT, json_pack("{s:s}", "code", "sleep"));
    jmsg_set_json(m, JMSG_METADATA, json_pack("{s:{s:f}}", "kennel", "timeout", 1.5));
    zmsg_t *z = wire_encode(w, m);
    jmsg_destroy(&m);
    wire_decode(w, &z, &m);
    wire_destroy(&w);
    session_on_request(s, ROUTE_SHELL, &m);
    CHECK_EQ_INT(r->timer_ms, 1500);
    session_on_timer(s, SESSION_TIMER_CELL);
    CHECK_EQ_INT(r->signals[0], SIGUSR2);
    s_reply(s, "execute_reply", id, "{\"status\":\"error\",\"ename\":\"CellTimeout\"}");
    CHECK_EQ_INT(r->timer_ms, -1); /* the grace timer is cancelled */
    int rep = s_find(r, 0, "execute_reply");
    CHECK_STR(s_outcome(r, rep), "timeout");
    CHECK_EQ_INT(r->starts, 1);
    CHECK_EQ_INT(session_state(s), SESSION_IDLE);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(outcomes_and_metrics)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1"), id);
    CHECK_EQ_INT(r->timer_arms, 0); /* no deadline configured */
    char op[160];
    snprintf(op, sizeof op, "{\"op\":\"reply\",\"msg_type\":\"execute_reply\",\"parent_msg_id\":\"%s\",\"status\":\"ok\"}", id);
    const char *parts[] = {op, "{\"metrics\":{\"cpu_ms\":1.5}}", "{\"status\":\"ok\"}"};
    CHECK_EQ_INT(s_kernel(s, 3, parts), 0);
    int rep = s_find(r, 0, "execute_reply");
    CHECK_STR(s_outcome(r, rep), "ok");
    json_t *metrics = json_object_get(r->metadata[rep], "metrics");
    CHECK(json_real_value(json_object_get(metrics, "cpu_ms")) == 1.5); /* the kernel's, kept */
    CHECK(json_is_integer(json_object_get(metrics, "wall_ms")));
    /* interrupted */
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "sleep"), id);
    s_request(s, ROUTE_CONTROL, "interrupt_request", NULL, NULL);
    s_reply(s, "execute_reply", id, "{\"status\":\"error\",\"ename\":\"KeyboardInterrupt\"}");
    rep = s_find(r, rep + 1, "execute_reply");
    CHECK_STR(s_outcome(r, rep), "interrupted");
    /* error */
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1/0"), id);
    s_reply(s, "execute_reply", id, "{\"status\":\"error\"}");
    rep = s_find(r, rep + 1, "execute_reply");
    CHECK_STR(s_outcome(r, rep), "error");
    /* killed by the memory limit */
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "hog"), id);
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL) by the memory limit (256 MiB)", SESSION_EXIT_MEMORY);
    rep = s_find(r, rep + 1, "execute_reply");
    CHECK_STR(s_outcome(r, rep), "memory");
    CHECK(strstr(json_string_value(json_object_get(r->sent[rep].content, "evalue")), "memory limit") != NULL);
    /* Each cell that ran was handed to the run record once, with its outcome, its error's
     * name and its number; the one the kernel died in too. */
    CHECK_EQ_INT(r->ndone, 4);
    const char *codes[] = {"1", "sleep", "1/0", "hog"};
    const char *outcomes[] = {"ok", "interrupted", "error", "memory"};
    const char *enames[] = {"", "KeyboardInterrupt", "", "KernelDied"};
    for (int i = 0; i < 4 && i < r->ndone; i++) {
        CHECK_STR(r->done[i].code, codes[i]);
        CHECK_STR(r->done[i].outcome, outcomes[i]);
        CHECK_STR(r->done[i].ename, enames[i]);
        CHECK_EQ_INT(r->done[i].cell, i + 1);
    }
    session_destroy(&s);
    s_rec_free(r);
}

TEST(output_cap)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session_with(r, 8, 0, 200);
    s_hello(s);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "flood"), id);
    const char *out[] = {"{\"op\":\"iopub\",\"msg_type\":\"stream\"}", "{}",
                         "{\"name\":\"stdout\",\"text\":\"0123456789012345678901234567890123456789\"}"};
    int before = r->nsent;
    for (int i = 0; i < 10; i++)
        CHECK_EQ_INT(s_kernel(s, 3, out), 0);
    int streams = 0, notices = 0;
    for (int i = before; i < r->nsent; i++) {
        if (strcmp(r->sent[i].type, "stream") != 0)
            continue;
        const char *text = json_string_value(json_object_get(r->sent[i].content, "text"));
        if (strstr(text, "limit"))
            notices++;
        else
            streams++;
    }
    CHECK_EQ_INT(streams, 1); /* 63 bytes and 64 a message fit in 200, a second would not */
    CHECK_EQ_INT(notices, 1);
    const char *err[] = {"{\"op\":\"iopub\",\"msg_type\":\"error\"}", "{}", "{\"ename\":\"E\",\"evalue\":\"\",\"traceback\":[]}"};
    CHECK_EQ_INT(s_kernel(s, 3, err), 0);
    CHECK(s_find(r, before, "error") >= 0); /* the error still reaches the client */
    s_reply(s, "execute_reply", id, "{\"status\":\"ok\"}");
    CHECK_STR(s_outcome(r, s_find(r, 0, "execute_reply")), "output_truncated");
    /* The next cell starts with a fresh budget. */
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "print"), id);
    before = r->nsent;
    CHECK_EQ_INT(s_kernel(s, 3, out), 0);
    CHECK(s_find(r, before, "stream") >= 0);
    session_destroy(&s);
    s_rec_free(r);
}

/*  The texts of the stream messages sent from `from` on, joined, and how many there were. */
static int s_streams_text(rec_t *r, int from, char *out, size_t len)
{
    int n = 0;
    size_t used = 0;
    out[0] = '\0';
    for (int i = from; i < r->nsent; i++) {
        if (strcmp(r->sent[i].type, "stream") != 0)
            continue;
        n++;
        const char *text = json_string_value(json_object_get(r->sent[i].content, "text"));
        used += (size_t)snprintf(out + used, len - used, "%s", text ? text : "");
    }
    return n;
}

TEST(output_message_cap)
{
    rec_t *r = s_rec_new();
    session_limits_t lim = {.max_queued = 8, .grace_ms = 2000, .max_output = 1 << 20,
                            .max_output_msgs = 5};
    session_t *s = s_session_ready(r, &lim);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "flood"), id);
    const char *out[] = {"{\"op\":\"iopub\",\"msg_type\":\"clear_output\"}", "{}",
                         "{\"wait\":false}"};
    int before = r->nsent;
    CHECK(!session_output_capped(s));
    for (int i = 0; i < 9; i++)
        CHECK_EQ_INT(s_kernel(s, 3, out), 0);
    int clears = 0;
    for (int i = before; i < r->nsent; i++)
        clears += strcmp(r->sent[i].type, "clear_output") == 0;
    CHECK_EQ_INT(clears, 5);
    char text[512];
    CHECK_EQ_INT(s_streams_text(r, before, text, sizeof text), 1);
    CHECK(strstr(text, "limit of 5 messages") != NULL);
    CHECK(session_output_capped(s));
    s_reply(s, "execute_reply", id, "{\"status\":\"ok\"}");
    CHECK_STR(s_outcome(r, s_find(r, 0, "execute_reply")), "output_truncated");
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "again"), id);
    CHECK(!session_output_capped(s));
    session_destroy(&s);
    s_rec_free(r);
}

TEST(output_merged_while_iopub_lags)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "print"), id);
    int before = r->nsent;
    r->backlog = 100; /* iopub's subscribers lag */
    const char *a[] = {"{\"op\":\"iopub\",\"msg_type\":\"stream\"}", "{}",
                       "{\"name\":\"stdout\",\"text\":\"a\"}"};
    const char *b[] = {"{\"op\":\"iopub\",\"msg_type\":\"stream\"}", "{}",
                       "{\"name\":\"stdout\",\"text\":\"b\"}"};
    CHECK_EQ_INT(s_kernel(s, 3, a), 0);
    CHECK_EQ_INT(s_kernel(s, 3, b), 0);
    CHECK_EQ_INT(r->nsent, before); /* held */
    CHECK_EQ_INT(r->flush_ms, 50);
    session_on_timer(s, SESSION_TIMER_FLUSH);
    char text[64];
    CHECK_EQ_INT(s_streams_text(r, before, text, sizeof text), 1);
    CHECK_STR(text, "ab");
    /* Held again; the reply (and idle) go after it. */
    before = r->nsent;
    CHECK_EQ_INT(s_kernel(s, 3, a), 0);
    CHECK_EQ_INT(r->nsent, before);
    s_reply(s, "execute_reply", id, "{\"status\":\"ok\"}");
    CHECK_STR(r->sent[before].type, "stream");
    CHECK_STR(r->sent[before + 1].type, "execute_reply");
    CHECK_EQ_INT(s_find(r, before, "status"), before + 2);
    CHECK_EQ_INT(r->flush_ms, -1); /* nothing held: the timer was cancelled */
    /* Caught up: output goes at once. */
    r->backlog = 0;
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "print"), id);
    before = r->nsent;
    CHECK_EQ_INT(s_kernel(s, 3, a), 0);
    CHECK_EQ_INT(r->nsent, before + 1);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(output_faster_than_a_client_reads_is_merged)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "print"), id);
    int before = r->nsent;
    const char *x[] = {"{\"op\":\"iopub\",\"msg_type\":\"stream\"}", "{}",
                       "{\"name\":\"stdout\",\"text\":\"x\"}"};
    long long t0 = util_now_ms();
    for (int i = 0; i < 150; i++)
        CHECK_EQ_INT(s_kernel(s, 3, x), 0);
    long long took = util_now_ms() - t0;
    s_reply(s, "execute_reply", id, "{\"status\":\"ok\"}");
    char text[256];
    int n = s_streams_text(r, before, text, sizeof text);
    /* The burst is 64 messages within 50 ms of the session's clock: fed within one such
     * window, the rest is merged into one. Under valgrind feeding them can take longer,
     * and then each window lets its 64 go: only the text is checked. */
    if (took < 40)
        CHECK_EQ_INT(n, 65);
    else
        fprintf(stderr, "  (the frames took %lld ms to feed: the burst count is not checked)\n",
                took);
    CHECK_EQ_INT(strlen(text), 150); /* every byte, in fewer messages */
    session_destroy(&s);
    s_rec_free(r);
}

TEST(idle_eviction_and_revival)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session_with(r, 8, 0, 1 << 20); /* idle timeout 60 s */
    s_hello(s);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "x = 1"), id);
    CHECK_EQ_INT(r->idle_ms, 60000);
    /* Busy kernels are not evicted. */
    session_on_timer(s, SESSION_TIMER_IDLE);
    CHECK_EQ_INT(session_state(s), SESSION_BUSY);
    s_reply(s, "execute_reply", id, "{\"status\":\"ok\"}");
    CHECK_EQ_INT(r->idle_ms, 60000); /* re-armed at the end of the cell */
    int nk = r->nk;
    session_on_timer(s, SESSION_TIMER_IDLE);
    CHECK_EQ_INT(session_state(s), SESSION_SAVING);
    CHECK_EQ_INT(r->nk, nk + 1);
    CHECK(strncmp(r->kframes[nk], "{\"op\":\"save\"}", 13) == 0);
    const char *saved[] = {"{\"op\":\"saved\",\"unsaved\":[\"gen\",\"sock\"]}", "SNAPSHOT-BYTES"};
    int nsig = r->nsig;
    CHECK_EQ_INT(s_kernel(s, 2, saved), 0);
    CHECK(r->snapshot && memcmp(r->snapshot, "SNAPSHOT-BYTES", 14) == 0);
    /* The kernel keeps its state until the snapshot is on disk; requests wait meanwhile. */
    CHECK_EQ_INT(r->nsig, nsig);
    CHECK_EQ_INT(session_state(s), SESSION_SAVING);
    session_on_snapshot_stored(s, NULL);
    CHECK_EQ_INT(r->signals[r->nsig - 1], SIGKILL);
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    CHECK_EQ_INT(session_state(s), SESSION_EVICTED);
    CHECK_EQ_INT(r->starts, 1); /* evicted, not restarted */
    json_t *info = session_info(s);
    CHECK_STR(json_string_value(json_object_get(info, "state")), "evicted");
    json_decref(info);
    /* kernel_info is answered without reviving. */
    s_request(s, ROUTE_SHELL, "kernel_info_request", NULL, NULL);
    CHECK_EQ_INT(r->starts, 1);
    /* A cell revives it: hello, then the snapshot, then the cell. */
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "x"), id);
    CHECK_EQ_INT(r->starts, 2);
    nk = r->nk;
    s_hello(s);
    CHECK_EQ_INT(session_state(s), SESSION_RESTORING);
    CHECK_EQ_INT(r->nk, nk + 1);
    CHECK(strncmp(r->kframes[nk], "{\"op\":\"restore\"}", 16) == 0);
    int before = r->nsent;
    const char *restored[] = {"{\"op\":\"restored\",\"failed\":[\"broken\"]}"};
    CHECK_EQ_INT(s_kernel(s, 1, restored), 0);
    CHECK_EQ_INT(r->snapshot_drops, 1);
    CHECK_EQ_INT(session_state(s), SESSION_BUSY);
    CHECK(strstr(r->kframes[nk + 1], "execute_request") != NULL);
    /* The cell is told what was lost, with itself as parent. */
    int st = s_find(r, before, "stream");
    CHECK(st >= 0);
    const char *text = json_string_value(json_object_get(r->sent[st].content, "text"));
    CHECK(strstr(text, "gen") && strstr(text, "sock") && strstr(text, "broken"));
    CHECK_STR(r->sent[st].parent_id, id);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(fork_save_keeps_the_kernel_and_a_fork_restores_it)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session_with(r, 8, 0, 1 << 20);
    /* Starting: not forkable. */
    CHECK_EQ_INT(session_fork_save(s), -1);
    s_hello(s);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "x = 1"), id);
    CHECK_EQ_INT(session_fork_save(s), -1); /* busy */
    s_reply(s, "execute_reply", id, "{\"status\":\"ok\"}");
    int nk = r->nk;
    CHECK_EQ_INT(session_fork_save(s), 0);
    CHECK_EQ_INT(session_state(s), SESSION_SAVING);
    CHECK(strncmp(r->kframes[nk], "{\"op\":\"save\"}", 13) == 0);
    /* A cell meanwhile waits for the save. */
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "x"), id);
    CHECK_EQ_INT(r->nk, nk + 1);
    const char *saved[] = {"{\"op\":\"saved\",\"unsaved\":[\"gen\"]}", "STATE"};
    int nsig = r->nsig;
    CHECK_EQ_INT(s_kernel(s, 2, saved), 0);
    CHECK_EQ_INT(r->forks, 1);
    CHECK_STR(r->forked, "STATE");
    CHECK_STR(r->forked_unsaved, "gen");
    CHECK(!r->snapshot);        /* nothing stored */
    CHECK_EQ_INT(r->nsig, nsig); /* nothing killed */
    CHECK_EQ_INT(session_state(s), SESSION_BUSY); /* the waiting cell went */
    CHECK(strstr(r->kframes[nk + 1], "execute_request") != NULL);
    s_reply(s, "execute_reply", id, "{\"status\":\"ok\"}");
    /* A save that fails is told as such, the kernel stays. */
    CHECK_EQ_INT(session_fork_save(s), 0);
    const char *failed[] = {"{\"op\":\"saved\",\"error\":\"MemoryError: \"}"};
    CHECK_EQ_INT(s_kernel(s, 1, failed), 0);
    CHECK_EQ_INT(r->forks, 2);
    CHECK(strncmp(r->forked, "why: MemoryError", 16) == 0);
    CHECK_EQ_INT(session_state(s), SESSION_IDLE);
    /* The kernel dying meanwhile is told too, and it restarts as after any death. */
    CHECK_EQ_INT(session_fork_save(s), 0);
    int starts = r->starts;
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    CHECK_EQ_INT(r->forks, 3);
    CHECK(strstr(r->forked, "SIGKILL") != NULL);
    CHECK_EQ_INT(r->starts, starts + 1);

    /* The fork: its first kernel restores the state, and its first cell hears what the
     * source's save could not keep, and that it is a fork. */
    rec_t *r2 = s_rec_new();
    r2->snapshot = strdup("STATE");
    r2->snapshot_len = 5;
    json_t *unsaved = json_pack("[s]", "gen");
    session_t *d = session_new("id-2", "dst", &(session_limits_t){.max_queued = 8,
                                                               .grace_ms = 1000,
                                                               .max_output = 1 << 20},
                               &s_ops, r2);
    CHECK_EQ_INT(session_start_forked(d, s, unsaved), 0);
    json_decref(unsaved);
    session_note_unsaved(d, "(file a.fifo: a FIFO)");
    s_request(d, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "x"), id);
    s_hello(d);
    CHECK_EQ_INT(session_state(d), SESSION_RESTORING);
    int before = r2->nsent;
    const char *restored[] = {"{\"op\":\"restored\",\"failed\":[]}"};
    CHECK_EQ_INT(s_kernel(d, 1, restored), 0);
    int st = s_find(r2, before, "stream");
    CHECK(st >= 0);
    const char *text = json_string_value(json_object_get(r2->sent[st].content, "text"));
    CHECK(text && strstr(text, "forked from name1") && strstr(text, "gen") &&
          strstr(text, "a.fifo"));
    session_destroy(&d);
    s_rec_free(r2);
    session_destroy(&s);
    s_rec_free(r);
}

/*  The saving kernel sends its state ("S"), and the store keeps it. */
static void s_saved(session_t *s)
{
    const char *saved[] = {"{\"op\":\"saved\",\"unsaved\":[]}", "S"};
    CHECK_EQ_INT(s_kernel(s, 2, saved), 0);
    session_on_snapshot_stored(s, NULL);
}

/*  A session evicted with a snapshot, then asked for a cell: its new kernel restoring. */
static session_t *s_restoring(rec_t *r)
{
    session_t *s = s_session_with(r, 8, 0, 1 << 20);
    s_hello(s);
    session_on_timer(s, SESSION_TIMER_IDLE);
    s_saved(s);
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "x"), id);
    s_hello(s);
    CHECK_EQ_INT(session_state(s), SESSION_RESTORING);
    return s;
}

TEST(kernel_dies_while_restoring)
{
    rec_t *r = s_rec_new();
    session_t *s = s_restoring(r);
    session_on_kernel_exit(s, "was killed by signal 11 (SIGSEGV)", SESSION_EXIT_CRASH);
    /* Fresh start, snapshot gone, the cell runs on the new kernel and is told why. */
    CHECK_EQ_INT(r->snapshot_drops, 1);
    CHECK_EQ_INT(session_state(s), SESSION_STARTING);
    int before = r->nsent;
    s_hello(s);
    CHECK_EQ_INT(session_state(s), SESSION_BUSY);
    int st = s_find(r, before, "stream");
    CHECK(st >= 0 && strstr(json_string_value(json_object_get(r->sent[st].content, "text")), "restoring"));
    session_destroy(&s);
    s_rec_free(r);
}

/*  1 when fd is closed. */
static int s_closed(int fd)
{
    return fd >= 0 && fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

TEST(a_revival_passes_the_snapshot_file_once_the_kernel_asks)
{
    rec_t *r = s_rec_new();
    r->fd_restores = 1;
    session_t *s = s_restoring(r);
    int fd = r->snapshot_fd;
    CHECK(fd >= 0);
    CHECK(strstr(r->kframes[r->nk - 1], "{\"op\":\"restore\",\"fd\":true}") == r->kframes[r->nk - 1]);
    CHECK_EQ_INT(r->fds_passed, 0); /* not before the kernel is ready for it */
    const char *ready[] = {"{\"op\":\"restore_ready\"}"};
    CHECK_EQ_INT(s_kernel(s, 1, ready), 0);
    CHECK_EQ_INT(r->fds_passed, 1);
    CHECK(s_closed(fd)); /* passed: the session's own copy is closed */
    CHECK_EQ_INT(s_kernel(s, 1, ready), -1); /* a second ask is a protocol violation */
    const char *restored[] = {"{\"op\":\"restored\",\"failed\":[]}"};
    CHECK_EQ_INT(s_kernel(s, 1, restored), 0);
    CHECK_EQ_INT(session_state(s), SESSION_BUSY); /* the cell that revived it runs */
    session_destroy(&s);
    s_rec_free(r);
}

TEST(a_snapshot_file_not_asked_for_is_closed_with_the_kernel_or_the_session)
{
    rec_t *r = s_rec_new();
    r->fd_restores = 1;
    session_t *s = s_restoring(r);
    int fd = r->snapshot_fd;
    session_on_kernel_exit(s, "was killed by signal 11 (SIGSEGV)", SESSION_EXIT_CRASH);
    CHECK(s_closed(fd));
    session_destroy(&s);
    r->snapshot = NULL; /* (dropped with the state) */
    s = s_restoring(r);
    fd = r->snapshot_fd;
    session_destroy(&s);
    CHECK(fd < 0 || s_closed(fd));
    s_rec_free(r);
    /* Without a file (snapshot_fd -1, or a session that never asked), restore_ready is a
     * violation, and the bytes go as before. */
    r = s_rec_new();
    s = s_restoring(r);
    CHECK(strncmp(r->kframes[r->nk - 1], "{\"op\":\"restore\"}", 16) == 0);
    const char *ready[] = {"{\"op\":\"restore_ready\"}"};
    CHECK_EQ_INT(s_kernel(s, 1, ready), -1);
    session_destroy(&s);
    s_rec_free(r);
}

/*  An idle session of r whose kernel has been asked to save into its file. */
static session_t *s_saving_to_file(rec_t *r)
{
    r->file_saves = 1;
    session_t *s = s_session_with(r, 8, 0, 1 << 20);
    s_hello(s);
    int nk = r->nk;
    session_on_timer(s, SESSION_TIMER_IDLE);
    CHECK_EQ_INT(session_state(s), SESSION_SAVING);
    CHECK_EQ_INT(r->nk, nk + 1);
    CHECK(strncmp(r->kframes[nk], "{\"op\":\"save\",\"fd\":true} ", 24) == 0);
    return s;
}

TEST(an_eviction_saves_into_the_file_the_kernel_is_passed_once_it_says_the_size)
{
    rec_t *r = s_rec_new();
    session_t *s = s_saving_to_file(r);
    CHECK_EQ_INT(r->save_fds_passed, 0); /* not before the kernel says the size */
    const char *ready[] = {"{\"op\":\"save_ready\",\"bytes\":5}"};
    CHECK_EQ_INT(s_kernel(s, 1, ready), 0);
    CHECK_EQ_INT(r->save_fds_passed, 1);
    CHECK_EQ_INT(r->timer_ms, 60000); /* the write's own deadline: the save's, here */
    CHECK_EQ_INT(s_kernel(s, 1, ready), -1); /* a second one is a protocol violation */
    CHECK(pwrite(r->save_file, "STATE", 5, 0) == 5);
    const char *saved[] = {"{\"op\":\"saved\",\"unsaved\":[],\"bytes\":5}"};
    int nsig = r->nsig;
    CHECK_EQ_INT(s_kernel(s, 1, saved), 0);
    CHECK(r->stored_len == 5 && r->stored_size == 5);
    CHECK_EQ_INT(r->nsig, nsig); /* the kernel stays until the copy is on disk */
    session_on_snapshot_stored(s, NULL);
    CHECK_EQ_INT(r->signals[r->nsig - 1], SIGKILL);
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    CHECK_EQ_INT(session_state(s), SESSION_EVICTED);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(a_file_save_refused_or_written_wrong_keeps_the_kernel)
{
    /* Refused at save_ready (the disk cap): the byte alone, and the kernel's failed save
     * leaves it serving. */
    rec_t *r = s_rec_new();
    r->fits_refused = 1;
    session_t *s = s_saving_to_file(r);
    const char *ready[] = {"{\"op\":\"save_ready\",\"bytes\":5}"};
    CHECK_EQ_INT(s_kernel(s, 1, ready), 0);
    CHECK(r->refusals == 1 && r->save_fds_passed == 0);
    const char *failed[] = {"{\"op\":\"saved\",\"error\":\"OSError: refused\"}"};
    int nsig = r->nsig;
    CHECK_EQ_INT(s_kernel(s, 1, failed), 0);
    CHECK_EQ_INT(session_state(s), SESSION_IDLE);
    CHECK(r->nsig == nsig && r->stored_len == -1);
    session_destroy(&s);
    s_rec_free(r);
    /* More bytes in the file than the kernel said: not kept. */
    r = s_rec_new();
    s = s_saving_to_file(r);
    CHECK_EQ_INT(s_kernel(s, 1, ready), 0);
    CHECK(pwrite(r->save_file, "STATE+more", 10, 0) == 10);
    const char *saved[] = {"{\"op\":\"saved\",\"unsaved\":[],\"bytes\":5}"};
    CHECK_EQ_INT(s_kernel(s, 1, saved), 0);
    CHECK_EQ_INT(session_state(s), SESSION_IDLE);
    CHECK(r->stored_len == -1 && r->nsig == 0);
    session_destroy(&s);
    s_rec_free(r);
    /* Past the save's deadline before the kernel asked: refused, and the kernel kept. */
    r = s_rec_new();
    s = s_saving_to_file(r);
    session_on_timer(s, SESSION_TIMER_CELL); /* the deadline: SIGUSR2 */
    CHECK_EQ_INT(s_kernel(s, 1, ready), 0);
    CHECK(r->refusals == 1 && r->save_fds_passed == 0);
    CHECK_EQ_INT(s_kernel(s, 1, failed), 0);
    CHECK_EQ_INT(session_state(s), SESSION_IDLE);
    session_destroy(&s);
    s_rec_free(r);
    /* save_ready where no file was made (the bytes go through the pipe) is a violation; a
     * fork's save never asks for a file. */
    r = s_rec_new();
    s = s_session_with(r, 8, 0, 1 << 20);
    s_hello(s);
    session_on_timer(s, SESSION_TIMER_IDLE);
    CHECK(strncmp(r->kframes[r->nk - 1], "{\"op\":\"save\"}", 13) == 0);
    CHECK_EQ_INT(s_kernel(s, 1, ready), -1);
    session_destroy(&s);
    s_rec_free(r);
    r = s_rec_new();
    r->file_saves = 1;
    s = s_session_with(r, 8, 0, 1 << 20);
    s_hello(s);
    CHECK_EQ_INT(session_fork_save(s), 0);
    CHECK(strncmp(r->kframes[r->nk - 1], "{\"op\":\"save\"}", 13) == 0);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(restore_past_its_deadline_then_killed)
{
    rec_t *r = s_rec_new();
    session_t *s = s_restoring(r);
    CHECK_EQ_INT(r->timer_ms, 60000); /* no cell deadline here: SAVE_DEADLINE_MS */
    int nsig = r->nsig;
    session_on_timer(s, SESSION_TIMER_CELL); /* the deadline: CellTimeout */
    session_on_timer(s, SESSION_TIMER_CELL); /* the grace: kill */
    CHECK_EQ_INT(r->nsig, nsig + 2);
    CHECK_EQ_INT(r->signals[nsig], SIGUSR2);
    CHECK_EQ_INT(r->signals[nsig + 1], SIGKILL);
    /* A `restored` that comes with the kill is too late: the exit decides, and says so. */
    const char *restored[] = {"{\"op\":\"restored\",\"failed\":[]}"};
    CHECK_EQ_INT(s_kernel(s, 1, restored), 0);
    CHECK_EQ_INT(session_state(s), SESSION_RESTORING);
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    CHECK_EQ_INT(session_state(s), SESSION_STARTING);
    int before = r->nsent;
    s_hello(s);
    int st = s_find(r, before, "stream");
    CHECK(st >= 0 && strstr(json_string_value(json_object_get(r->sent[st].content, "text")), "restoring"));
    session_destroy(&s);
    s_rec_free(r);
}

TEST(snapshot_kept_off_the_loop)
{
    const char *saved[] = {"{\"op\":\"saved\",\"unsaved\":[]}", "S"};
    /* The store fails (the disk, the cap): the kernel is kept, and the waiting cell runs. */
    rec_t *r = s_rec_new();
    session_t *s = s_session_with(r, 8, 0, 1 << 20);
    s_hello(s);
    session_on_timer(s, SESSION_TIMER_IDLE);
    CHECK_EQ_INT(s_kernel(s, 2, saved), 0);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "x"), id);
    CHECK_EQ_INT(session_state(s), SESSION_SAVING);
    int nk = r->nk, nsig = r->nsig;
    session_on_snapshot_stored(s, "writing it: No space left on device");
    CHECK_EQ_INT(r->nsig, nsig);
    CHECK_EQ_INT(session_state(s), SESSION_BUSY);
    CHECK(r->nk == nk + 1 && strstr(r->kframes[nk], "execute_request"));
    CHECK_EQ_INT(r->idle_ms, 60000);
    s_reply(s, "execute_reply", id, "{\"status\":\"ok\"}");
    /* Refused at once: the same. */
    r->store_refused = 1;
    session_on_timer(s, SESSION_TIMER_IDLE);
    CHECK_EQ_INT(s_kernel(s, 2, saved), 0);
    CHECK_EQ_INT(session_state(s), SESSION_IDLE);
    CHECK_EQ_INT(r->nsig, nsig);
    r->store_refused = 0;
    /* The kernel dies while its snapshot is written: that answer comes to no one. */
    session_on_timer(s, SESSION_TIMER_IDLE);
    CHECK_EQ_INT(s_kernel(s, 2, saved), 0);
    int drops = r->snapshot_drops, starts = r->starts;
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    CHECK_EQ_INT(r->snapshot_drops, drops + 1);
    CHECK_EQ_INT(r->starts, starts + 1);
    CHECK_EQ_INT(session_state(s), SESSION_STARTING);
    nsig = r->nsig;
    session_on_snapshot_stored(s, NULL);
    CHECK_EQ_INT(r->nsig, nsig);
    CHECK_EQ_INT(session_state(s), SESSION_STARTING);
    s_hello(s);
    CHECK_EQ_INT(session_state(s), SESSION_IDLE);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(evicted_session_expires_after_ttl)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session_ttl(r, "id1", 60000);
    session_start(s);
    s_hello(s);
    session_on_timer(s, SESSION_TIMER_IDLE);
    s_saved(s);
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    CHECK_EQ_INT(session_state(s), SESSION_EVICTED);
    /* The rest of the time to live, counted from the last client message (just now: the
     * test's idle timer fired at once). */
    CHECK(r->idle_ms > 3600000 - 5000 && r->idle_ms <= 3600000);
    CHECK_EQ_INT(r->ended, 0);
    /* A message that revives nothing (an interrupt) keeps the time to live running: an idle
     * timeout once replaced it, and ended the session after --idle. */
    r->idle_ms = 0;
    s_request(s, ROUTE_CONTROL, "interrupt_request", NULL, NULL);
    CHECK_EQ_INT(session_state(s), SESSION_EVICTED);
    CHECK(r->idle_ms > 3600000 - 5000 && r->idle_ms <= 3600000);
    session_on_timer(s, SESSION_TIMER_IDLE);
    CHECK_EQ_INT(session_state(s), SESSION_ENDED);
    CHECK_EQ_INT(r->ended, 1);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(restart_while_eviction_kills_the_kernel)
{
    /* The restart wins; the session once stayed "starting" for ever, every frame ignored. */
    rec_t *r = s_rec_new();
    session_t *s = s_session_with(r, 8, 0, 1 << 20);
    s_hello(s);
    session_on_timer(s, SESSION_TIMER_IDLE);
    s_saved(s);
    s_request(s, ROUTE_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", 1), NULL);
    int starts = r->starts, drops = r->snapshot_drops;
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    CHECK_EQ_INT(r->starts, starts + 1);
    CHECK(r->snapshot_drops >= drops);
    CHECK(r->snapshot == NULL);
    CHECK_EQ_INT(session_state(s), SESSION_STARTING);
    int before = r->nsent;
    s_hello(s);
    CHECK_EQ_INT(session_state(s), SESSION_IDLE);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1"), id);
    CHECK_EQ_INT(session_state(s), SESSION_BUSY);
    CHECK(s_find(r, before, "stream") < 0); /* no notice: the restart was asked for */
    session_destroy(&s);
    s_rec_free(r);
}

TEST(a_save_as_kenneld_stops_starts_no_ttl)
{
    /* --idle at least --ttl: the eviction kenneld's stop asks for once ended the session at
     * once, directory and all. */
    rec_t *r = s_rec_new();
    session_t *s = s_session_ttl(r, "id1", 86400000);
    session_start(s);
    s_hello(s);
    CHECK_EQ_INT(session_save(s), 1);
    s_saved(s);
    r->idle_ms = 0;
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    CHECK_EQ_INT(session_state(s), SESSION_EVICTED);
    CHECK_EQ_INT(r->idle_ms, 0); /* no time-to-live timer */
    CHECK_EQ_INT(r->ended, 0);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(stop_on_error_aborts_consecutive_executes)
{
    /* Regression (found by ASan): deleting queued requests while walking the queue. */
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1/0"), id);
    for (int i = 0; i < 4; i++)
        s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "x"), NULL);
    s_reply(s, "execute_reply", id, "{\"status\":\"error\"}");
    int aborted = 0;
    for (int i = 0; i < r->nsent; i++)
        if (strcmp(r->sent[i].type, "execute_reply") == 0 &&
            strcmp(json_string_value(json_object_get(r->sent[i].content, "status")) ?: "", "aborted") == 0)
            aborted++;
    CHECK_EQ_INT(aborted, 4);
    json_t *info = session_info(s);
    CHECK_EQ_INT(json_integer_value(json_object_get(info, "queued")), 0);
    json_decref(info);
    session_destroy(&s);
    s_rec_free(r);
}

/*  The execution_count of an execute_reply kenneld writes itself: an integer, as the spec
 *  has it (jupyter_console's `int(content["execution_count"] + 1)` crashed on null). */
static json_int_t s_reply_count(rec_t *r, int i, int *is_int)
{
    json_t *c = json_object_get(r->sent[i].content, "execution_count");
    *is_int = json_is_integer(c);
    return json_integer_value(c);
}

TEST(kenneld_replies_carry_the_cells_execution_count)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    char id[40], id2[40];
    int is_int = 0;
    /* A cell that announced count 7, then the kernel died: its reply says 7. */
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "os._exit(0)"), id);
    const char *input[] = {"{\"op\":\"iopub\",\"msg_type\":\"execute_input\"}", "{}",
                           "{\"code\":\"os._exit(0)\",\"execution_count\":7}"};
    CHECK_EQ_INT(s_kernel(s, 3, input), 0);
    session_on_kernel_exit(s, "exited with status 0", SESSION_EXIT_CRASH);
    int rep = s_find(r, 0, "execute_reply");
    CHECK(rep >= 0);
    if (rep >= 0) {
        CHECK_STR(r->sent[rep].parent_id, id);
        CHECK_EQ_INT(s_reply_count(r, rep, &is_int), 7);
        CHECK(is_int);
    }
    /* The fresh kernel counts from 1 again: a silent cell (no execute_input) that ends with
     * the session is answered with the count of the last cell that kernel ran, 0. */
    s_hello(s);
    s_request(s, ROUTE_SHELL, "execute_request",
              json_pack("{s:s, s:b}", "code", "x", "silent", 1), id2);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "queued"), NULL);
    int from = r->nsent;
    session_end(s, "ended by the test");
    int n = 0;
    for (int i = from; i < r->nsent; i++)
        if (strcmp(r->sent[i].type, "execute_reply") == 0) {
            CHECK_EQ_INT(s_reply_count(r, i, &is_int), 0);
            CHECK(is_int);
            n++;
        }
    CHECK_EQ_INT(n, 2);
    session_destroy(&s);
    s_rec_free(r);
}

#define REPLY_OP "{\"op\":\"reply\",\"msg_type\":\"execute_reply\",\"parent_msg_id\":\""

/*  One cell: an execute_request, then the kernel's frames for it with the reply op header
 *  head + the request's msg_id (each '-' escaped when escape_id) + tail. Its record's index
 *  in r->done, or -1. */
static int s_cell_with_op(session_t *s, rec_t *r, const char *head, const char *tail,
                          int escape_id)
{
    char id[40], esc[80], op[600];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1+1"), id);
    /* the id with each '-' as \u002d: the same string to a JSON reader */
    size_t n = 0;
    for (const char *p = id; *p && n < sizeof esc - 7; p++)
        if (*p == '-' && escape_id)
            n += (size_t)snprintf(esc + n, sizeof esc - n, "\\u002d");
        else
            esc[n++] = *p;
    esc[n] = '\0';
    snprintf(op, sizeof op, "%s%s%s", head, esc, tail);
    const char *parts[] = {op, "{}", "{\"status\":\"ok\",\"execution_count\":1}"};
    int before = r->ndone;
    CHECK_EQ_INT(s_kernel(s, 3, parts), 0);
    return r->ndone > before ? r->ndone - 1 : -1;
}

/*  The hot ops' headers, read from their bytes, read as jansson reads them: an escaped key or
 *  value, the last of a repeated key, a value that is not a string, a string too long to
 *  keep; and an execute_input's count from its op header, its content left unparsed. */
TEST(op_headers_are_read_as_jansson_reads_them)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    int d;
    /* an escaped parent id (read by jansson) matches the request's */
    d = s_cell_with_op(s, r, REPLY_OP, "\",\"status\":\"ok\"}", 1);
    CHECK(d >= 0 && strcmp(r->done[d].outcome, "ok") == 0);
    /* an escaped key */
    d = s_cell_with_op(s, r, "{\"\\u006fp\":\"reply\",\"msg_type\":\"execute_reply\",\"parent_msg_id\":\"", "\",\"status\":\"ok\"}", 0);
    CHECK(d >= 0 && strcmp(r->done[d].outcome, "ok") == 0);
    /* the last status stands: "error" then "ok" is ok; "ok" then 1 is none (aborted) */
    d = s_cell_with_op(s, r, REPLY_OP, "\",\"status\":\"error\",\"status\":\"ok\"}", 0);
    CHECK(d >= 0 && strcmp(r->done[d].outcome, "ok") == 0);
    d = s_cell_with_op(s, r, REPLY_OP, "\",\"status\":\"ok\",\"status\":1}", 0);
    CHECK(d >= 0 && strcmp(r->done[d].outcome, "aborted") == 0);
    /* an error's name: kept when short and plain, dropped when over 128 bytes (a string the
     * byte reader leaves to jansson) */
    d = s_cell_with_op(s, r, REPLY_OP, "\",\"status\":\"error\",\"ename\":\"ValueError\"}", 0);
    CHECK(d >= 0 && strcmp(r->done[d].ename, "ValueError") == 0 &&
          strcmp(r->done[d].outcome, "error") == 0);
    char long_tail[300];
    snprintf(long_tail, sizeof long_tail, "\",\"status\":\"error\",\"ename\":\"%0150d\"}", 0);
    d = s_cell_with_op(s, r, REPLY_OP, long_tail, 0);
    CHECK(d >= 0 && r->done[d].ename[0] == '\0' && strcmp(r->done[d].outcome, "error") == 0);
    /* a number jansson cannot hold, at any depth, ends the kernel as jansson's parse of
     * every other op does (a protocol violation), not read past by the byte reader */
    {
        static const char *const too_big[] = {
            "\",\"status\":\"ok\",\"x\":[1e400]}",
            "\",\"status\":\"ok\",\"x\":{\"y\":123456789012345678901234567890}}",
            "\",\"status\":\"ok\",\"x\":-123456789012345678901}"};
        for (size_t b = 0; b < sizeof too_big / sizeof *too_big; b++) {
            rec_t *r2 = s_rec_new();
            session_t *s2 = s_session(r2, 8);
            s_hello(s2);
            char id2[40], op[400];
            s_request(s2, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1"), id2);
            snprintf(op, sizeof op, "%s%s%s", REPLY_OP, id2, too_big[b]);
            const char *parts[] = {op, "{}", "{\"status\":\"ok\"}"};
            CHECK_EQ_INT(s_kernel(s2, 3, parts), -1);
            session_destroy(&s2);
            s_rec_free(r2);
        }
    }
    /* a reply for another request is still refused */
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "2"), id);
    const char *wrong[] = {"{\"op\":\"reply\",\"msg_type\":\"execute_reply\",\"parent_msg_id\":\"nope\",\"status\":\"ok\"}", "{}", "{\"status\":\"ok\"}"};
    CHECK_EQ_INT(s_kernel(s, 3, wrong), -1);
    session_destroy(&s);
    s_rec_free(r);

    /* A count in the op header that is negative or real is none (the content's stands); one
     * of 19 digits is jansson's to read; the last of a repeated one stands. */
    static const struct {
        const char *op;
        long long want;
    } counts[] = {
        {"{\"op\":\"iopub\",\"msg_type\":\"execute_input\",\"execution_count\":-4}", 3},
        {"{\"op\":\"iopub\",\"msg_type\":\"execute_input\",\"execution_count\":4.0}", 3},
        {"{\"op\":\"iopub\",\"msg_type\":\"execute_input\",\"execution_count\":1234567890123456789}",
         1234567890123456789LL}, /* (19 digits: jansson reads it) */
        {"{\"op\":\"iopub\",\"msg_type\":\"execute_input\",\"execution_count\":5,\"execution_count\":6}", 6},
        {"{\"op\":\"iopub\",\"msg_type\":\"execute_input\",\"execution_count\":5,\"execution_count\":\"x\"}", 3},
    };
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
        r = s_rec_new();
        s = s_session(r, 8);
        s_hello(s);
        s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "x"), id);
        const char *in[] = {counts[k].op, "{}", "{\"code\":\"x\",\"execution_count\":3}"};
        CHECK_EQ_INT(s_kernel(s, 3, in), 0);
        session_on_kernel_exit(s, "exited with status 0", SESSION_EXIT_CRASH);
        int at = s_find(r, 0, "execute_reply"), isint = 0;
        CHECK(at >= 0 && s_reply_count(r, at, &isint) == counts[k].want && isint);
        session_destroy(&s);
        s_rec_free(r);
    }
    /* The count in the op header stands, whatever the content says (it is not parsed). */
    r = s_rec_new();
    s = s_session(r, 8);
    s_hello(s);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "x"), id);
    const char *input[] = {"{\"op\":\"iopub\",\"msg_type\":\"execute_input\",\"execution_count\":12}",
                           "{}", "{\"code\":\"x\",\"execution_count\":3}"};
    CHECK_EQ_INT(s_kernel(s, 3, input), 0);
    session_on_kernel_exit(s, "exited with status 0", SESSION_EXIT_CRASH);
    int rep = s_find(r, 0, "execute_reply"), is_int = 0;
    CHECK(rep >= 0 && s_reply_count(r, rep, &is_int) == 12 && is_int);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(kenneld_replies_keep_the_last_count_known)
{
    /* A queued cell refused for the full queue, and one with a deadline-killed kernel that
     * had announced nothing for it (a silent cell): the last count the kernel announced. */
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 1);
    s_hello(s);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1"), id);
    const char *input[] = {"{\"op\":\"iopub\",\"msg_type\":\"execute_input\"}", "{}",
                           "{\"code\":\"1\",\"execution_count\":3}"};
    s_kernel(s, 3, input);
    s_reply(s, "execute_reply", id, "{\"status\":\"ok\",\"execution_count\":3}");
    s_request(s, ROUTE_SHELL, "execute_request",
              json_pack("{s:s, s:b}", "code", "while 1: pass", "silent", 1), id);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "q"), NULL);
    int from = r->nsent;
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "full"), NULL);
    int rep = s_find(r, from, "execute_reply");
    int is_int = 0;
    CHECK(rep >= 0);
    if (rep >= 0) {
        CHECK_STR(json_string_value(json_object_get(r->sent[rep].content, "ename")), "QueueFull");
        CHECK_EQ_INT(s_reply_count(r, rep, &is_int), 3);
        CHECK(is_int);
    }
    from = r->nsent;
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    rep = s_find(r, from, "execute_reply");
    CHECK(rep >= 0);
    if (rep >= 0) {
        CHECK_STR(r->sent[rep].parent_id, id);
        CHECK_EQ_INT(s_reply_count(r, rep, &is_int), 3);
        CHECK(is_int);
    }
    session_destroy(&s);
    s_rec_free(r);
}

TEST(kernel_info_error_reply_has_the_specs_fields)
{
    /* jupyter_client's wait_for_ready reads protocol_version from any kernel_info_reply, an
     * error too: kenneld's for a kernel that could not start once lacked it (KeyError). */
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_request(s, ROUTE_SHELL, "kernel_info_request", NULL, NULL);
    session_on_kernel_exit(s, "exited with status 1", SESSION_EXIT_CRASH);
    int rep = s_find(r, 0, "kernel_info_reply");
    CHECK(rep >= 0);
    if (rep >= 0) {
        json_t *c = r->sent[rep].content;
        CHECK_STR(json_string_value(json_object_get(c, "status")), "error");
        CHECK_STR(json_string_value(json_object_get(c, "ename")), "KernelStartFailed");
        CHECK_STR(json_string_value(json_object_get(c, "protocol_version")), "5.3");
        CHECK_STR(json_string_value(json_object_get(c, "implementation")), "kennel");
        CHECK(json_is_string(json_object_get(c, "implementation_version")));
        CHECK(json_is_string(json_object_get(c, "banner")));
        CHECK_STR(json_string_value(json_object_get(json_object_get(c, "language_info"), "name")),
                  "python");
    }
    session_destroy(&s);
    s_rec_free(r);
}

TEST(restart_aborts_queued_executes)
{
    /* Cells queued behind the running one were written for the namespace a restart throws
     * away: they are aborted, as when the kernel dies, rather than run in the fresh kernel.
     * What comes after the restart runs in the new kernel, and so does a completion. */
    rec_t *r = s_rec_new();
    session_t *s = s_session(r, 8);
    s_hello(s);
    char running[40], queued[40], complete[40], after[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "long"), running);
    s_request(s, ROUTE_SHELL, "execute_request",
              json_pack("{s:s, s:b}", "code", "'keep' in dir()", "stop_on_error", 0), queued);
    s_request(s, ROUTE_SHELL, "complete_request", json_pack("{s:s, s:i}", "code", "pri", "cursor_pos", 3), complete);
    s_request(s, ROUTE_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", 1), NULL);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "new"), after);
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    int n = 0;
    for (int i = 0; i < r->nsent; i++) {
        if (strcmp(r->sent[i].type, "execute_reply") != 0)
            continue;
        const char *status = json_string_value(json_object_get(r->sent[i].content, "status"));
        if (strcmp(r->sent[i].parent_id, running) == 0) {
            CHECK_STR(json_string_value(json_object_get(r->sent[i].content, "ename")), "KernelRestarted");
            n++;
        } else if (strcmp(r->sent[i].parent_id, queued) == 0) {
            CHECK_STR(status, "aborted");
            CHECK_STR(json_string_value(json_object_get(r->metadata[i], "outcome")), "aborted");
            n++;
        } else {
            CHECK(0); /* nothing else is answered before the new kernel */
        }
    }
    CHECK_EQ_INT(n, 2);
    int nk = r->nk;
    s_hello(s);
    CHECK_EQ_INT(r->nk, nk + 1);
    CHECK(strstr(r->kframes[nk], "complete_request") != NULL);
    s_reply(s, "complete_reply", complete, "{\"status\":\"ok\"}");
    CHECK_EQ_INT(r->nk, nk + 2);
    CHECK(strstr(r->kframes[nk + 1], "execute_request") != NULL); /* `after` */
    session_destroy(&s);
    s_rec_free(r);
}

static int s_done(session_t *s, const char *parent_id)
{
    char op[160];
    snprintf(op, sizeof op, "{\"op\":\"done\",\"parent_msg_id\":\"%s\"}", parent_id);
    const char *parts[] = {op};
    return s_kernel(s, 1, parts);
}

TEST(comm_messages_go_to_the_kernel_one_at_a_time)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session_with(r, 8, 5000, 1 << 20);
    s_hello(s);
    char cell[40], open[40], msg[40], after[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1"), cell);
    /* Behind a running cell, comm messages wait in the queue, as ipykernel's do. */
    s_request(s, ROUTE_SHELL, "comm_open",
              json_pack("{s:s, s:s, s:{}}", "comm_id", "c1", "target_name", "t", "data"), open);
    s_request(s, ROUTE_SHELL, "comm_msg", json_pack("{s:s, s:{}}", "comm_id", "c1", "data"), msg);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "2"), after);
    CHECK_EQ_INT(r->nk, 1);
    CHECK_EQ_INT(s_reply(s, "execute_reply", cell, "{\"status\":\"ok\",\"execution_count\":1}"), 0);
    /* The comm_open goes, busy before it, and holds the kernel until its done. */
    CHECK_EQ_INT(r->nk, 2);
    CHECK_STR(r->kframes[1], "{\"op\":\"request\",\"channel\":\"shell\"} comm_open");
    CHECK_EQ_INT(session_state(s), SESSION_BUSY);
    int busy = s_find(r, 0, "execute_reply") + 2;
    CHECK_STR(s_status(r, busy), "busy");
    CHECK_STR(r->sent[busy].parent_id, open);
    CHECK_EQ_INT(r->timer_ms, 5000); /* its handlers run user code: the session's deadline */
    /* No comm_close from kenneld: the kernel answers for the comm. Its output is the comm's. */
    CHECK_EQ_INT(s_find(r, 0, "comm_close"), -1);
    const char *out[] = {"{\"op\":\"iopub\",\"msg_type\":\"comm_msg\"}", "{}",
                         "{\"comm_id\":\"c1\",\"data\":{}}", "binary"};
    CHECK_EQ_INT(s_kernel(s, 4, out), 0);
    int at = s_find(r, busy, "comm_msg");
    CHECK(at > busy);
    CHECK_STR(r->sent[at].parent_id, open);
    /* A reply, or a done for another message, is out of protocol. */
    CHECK_EQ_INT(s_reply(s, "execute_reply", open, "{\"status\":\"ok\"}"), -1);
    CHECK_EQ_INT(s_done(s, msg), -1);
    CHECK_EQ_INT(s_done(s, open), 0);
    CHECK_STR(s_status(r, at + 1), "idle");
    CHECK_STR(r->sent[at + 1].parent_id, open);
    CHECK_EQ_INT(r->nk, 3);
    CHECK_STR(r->kframes[2], "{\"op\":\"request\",\"channel\":\"shell\"} comm_msg");
    CHECK_EQ_INT(s_done(s, msg), 0);
    CHECK_EQ_INT(r->nk, 4);
    CHECK_STR(r->kframes[3], "{\"op\":\"request\",\"channel\":\"shell\"} execute_request");
    /* A done for an execute_request is out of protocol too. */
    CHECK_EQ_INT(s_done(s, after), -1);
    CHECK_EQ_INT(s_reply(s, "execute_reply", after, "{\"status\":\"ok\",\"execution_count\":2}"), 0);
    /* Output between requests goes to the last cell, not to a comm message. */
    const char *stray[] = {"{\"op\":\"iopub\",\"msg_type\":\"stream\"}", "{}",
                           "{\"name\":\"stdout\",\"text\":\"x\"}"};
    s_request(s, ROUTE_SHELL, "comm_msg", json_pack("{s:s, s:{}}", "comm_id", "c1", "data"), msg);
    CHECK_EQ_INT(s_done(s, msg), 0);
    int n = r->nsent;
    CHECK_EQ_INT(s_kernel(s, 3, stray), 0);
    CHECK_EQ_INT(r->nsent, n + 1);
    CHECK_STR(r->sent[n].parent_id, after);
    json_t *info = session_info(s);
    CHECK_EQ_INT(json_integer_value(json_object_get(info, "cells")), 2);
    json_decref(info);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(a_comm_message_past_its_deadline_or_with_a_dying_kernel)
{
    rec_t *r = s_rec_new();
    session_t *s = s_session_with(r, 8, 5000, 1 << 20);
    s_hello(s);
    char cell[40], msg[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "1"), cell);
    s_reply(s, "execute_reply", cell, "{\"status\":\"ok\",\"execution_count\":1}");
    s_request(s, ROUTE_SHELL, "comm_msg", json_pack("{s:s, s:{}}", "comm_id", "c1", "data"), msg);
    session_on_timer(s, SESSION_TIMER_CELL); /* a handler that loops: CellTimeout */
    CHECK_EQ_INT(r->signals[0], SIGUSR2);
    session_on_timer(s, SESSION_TIMER_CELL); /* it ignored that too */
    CHECK_EQ_INT(r->signals[1], SIGKILL);
    int n = r->nsent;
    session_on_kernel_exit(s, "was killed by signal 9 (SIGKILL)", SESSION_EXIT_CRASH);
    /* No reply (it has none): its idle; and stray output stays the last cell's. */
    CHECK_EQ_INT(r->nsent, n + 1);
    CHECK_STR(s_status(r, n), "idle");
    CHECK_STR(r->sent[n].parent_id, msg);
    CHECK_EQ_INT(r->starts, 2);
    s_hello(s);
    const char *stray[] = {"{\"op\":\"iopub\",\"msg_type\":\"stream\"}", "{}",
                           "{\"name\":\"stdout\",\"text\":\"x\"}"};
    CHECK_EQ_INT(s_kernel(s, 3, stray), 0);
    CHECK_STR(r->sent[r->nsent - 1].parent_id, cell);
    session_destroy(&s);
    s_rec_free(r);
}

/*  Run one cell to its ok reply, with the kernel's metrics (a JSON object's text). */
static void s_cell_ok(session_t *s, const char *code, const char *metrics_md)
{
    char id[40], op[200];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", code), id);
    snprintf(op, sizeof op, "{\"op\":\"reply\",\"msg_type\":\"execute_reply\",\"parent_msg_id\":\"%s\",\"status\":\"ok\"}", id);
    const char *parts[] = {op, metrics_md, "{\"status\":\"ok\"}"};
    CHECK_EQ_INT(s_kernel(s, 3, parts), 0);
}

/*  Send one more cell, which the spent budget must refuse without the kernel: its error on
 *  iopub inside busy/idle, its execute_reply (BudgetExhausted, outcome budget, wall_ms 0),
 *  and no run record. The reply's evalue must hold each of `words`. */
static void s_check_refused(rec_t *r, session_t *s, const char *word1, const char *word2)
{
    int before = r->nsent, nk = r->nk, ndone = r->ndone;
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "more"), id);
    CHECK_EQ_INT(r->nk, nk); /* never reached the kernel */
    CHECK_EQ_INT(r->ndone, ndone);
    int busy = s_find(r, before, "status"), err = s_find(r, before, "error");
    int rep = s_find(r, before, "execute_reply");
    CHECK(busy >= 0 && err > busy && rep > err);
    if (busy < 0 || err < 0 || rep < 0)
        return;
    CHECK_STR(s_status(r, busy), "busy");
    CHECK_STR(r->sent[err].parent_id, id);
    CHECK_STR(json_string_value(json_object_get(r->sent[err].content, "ename")), "BudgetExhausted");
    const json_t *c = r->sent[rep].content;
    CHECK_STR(json_string_value(json_object_get(c, "status")), "error");
    CHECK_STR(json_string_value(json_object_get(c, "ename")), "BudgetExhausted");
    const char *evalue = json_string_value(json_object_get(c, "evalue"));
    CHECK(evalue && strstr(evalue, word1) && strstr(evalue, word2));
    CHECK_STR(s_outcome(r, rep), "budget");
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(r->metadata[rep], "metrics"), "wall_ms")), 0);
    int idle = s_find(r, rep, "status");
    CHECK(idle > rep && strcmp(s_status(r, idle), "idle") == 0);
    CHECK_EQ_INT(session_state(s), SESSION_IDLE);
}

TEST(cells_budget_refuses_the_cell_past_it)
{
    rec_t *r = s_rec_new();
    session_limits_t lim = {.max_queued = 8, .grace_ms = 2000, .max_output = 1 << 20,
                            .budget_cells = 2};
    session_t *s = s_session_ready(r, &lim);
    s_cell_ok(s, "a", "{}");
    json_t *info = session_info(s);
    json_t *cells = json_object_get(json_object_get(info, "budgets"), "cells");
    CHECK_EQ_INT(json_integer_value(json_object_get(cells, "left")), 1);
    json_decref(info);
    s_cell_ok(s, "b", "{}");
    CHECK_EQ_INT(r->ndone, 2);
    s_check_refused(r, s, "cells budget", "2 of 2 cells");
    /* Another cell is refused for the budget too, not aborted behind the refused one. */
    s_check_refused(r, s, "cells budget", "2 of 2 cells");
    /* What is not a cell is still served. */
    int before = r->nsent;
    s_request(s, ROUTE_SHELL, "kernel_info_request", NULL, NULL);
    int rep = s_find(r, before, "kernel_info_reply");
    CHECK(rep >= 0 && strcmp(json_string_value(json_object_get(r->sent[rep].content, "status")), "ok") == 0);
    info = session_info(s);
    json_t *b = json_object_get(info, "budgets");
    cells = json_object_get(b, "cells");
    CHECK_EQ_INT(json_integer_value(json_object_get(cells, "limit")), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(cells, "spent")), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(cells, "left")), 0);
    CHECK(json_real_value(json_object_get(json_object_get(b, "cpu"), "limit")) == 0);
    CHECK(json_is_null(json_object_get(json_object_get(b, "cpu"), "left"))); /* none */
    CHECK(json_is_null(json_object_get(json_object_get(b, "output"), "left")));
    json_decref(info);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(cpu_budget_counts_the_kernels_cpu_ms_and_lets_the_crossing_cell_end)
{
    rec_t *r = s_rec_new();
    session_limits_t lim = {.max_queued = 8, .grace_ms = 2000, .max_output = 1 << 20,
                            .budget_cpu_ms = 10};
    session_t *s = s_session_ready(r, &lim);
    s_cell_ok(s, "a", "{\"metrics\":{\"cpu_ms\":6.0}}");
    s_cell_ok(s, "b", "{\"metrics\":{\"cpu_ms\":6.0}}"); /* crosses the budget: runs to its end */
    CHECK_EQ_INT(r->ndone, 2);
    CHECK_STR(r->done[1].outcome, "ok");
    s_check_refused(r, s, "cpu budget", "0.012 of 0.010 seconds of CPU");
    json_t *info = session_info(s);
    json_t *cpu = json_object_get(json_object_get(info, "budgets"), "cpu");
    CHECK(json_real_value(json_object_get(cpu, "spent")) == 0.012);
    CHECK(json_real_value(json_object_get(cpu, "left")) == 0);
    json_decref(info);
    session_destroy(&s);
    s_rec_free(r);
}

TEST(wall_budget_counts_kennelds_wall_time)
{
    rec_t *r = s_rec_new();
    session_limits_t lim = {.max_queued = 8, .grace_ms = 2000, .max_output = 1 << 20,
                            .budget_wall_ms = 5};
    session_t *s = s_session_ready(r, &lim);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "sleep"), id);
    usleep(20000); /* the cell runs 20 ms by kenneld's clock, whatever the kernel says */
    char op[200];
    snprintf(op, sizeof op, "{\"op\":\"reply\",\"msg_type\":\"execute_reply\",\"parent_msg_id\":\"%s\",\"status\":\"ok\"}", id);
    const char *parts[] = {op, "{\"metrics\":{\"wall_ms\":0}}", "{\"status\":\"ok\"}"};
    CHECK_EQ_INT(s_kernel(s, 3, parts), 0);
    s_check_refused(r, s, "wall budget", "of 0.005 seconds of cells' wall time");
    session_destroy(&s);
    s_rec_free(r);
}

TEST(output_budget_counts_what_cells_published)
{
    rec_t *r = s_rec_new();
    session_limits_t lim = {.max_queued = 8, .grace_ms = 2000, .max_output = 1 << 20,
                            .budget_output = 150};
    session_t *s = s_session_ready(r, &lim);
    char id[40];
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "print"), id);
    const char *out[] = {"{\"op\":\"iopub\",\"msg_type\":\"stream\"}", "{}",
                         "{\"name\":\"stdout\",\"text\":\"0123456789\"}"};
    CHECK_EQ_INT(s_kernel(s, 3, out), 0); /* 40 bytes and 64 a message: 104, under 150 */
    s_reply(s, "execute_reply", id, "{\"status\":\"ok\"}");
    json_t *info = session_info(s);
    json_t *o = json_object_get(json_object_get(info, "budgets"), "output");
    long long spent = json_integer_value(json_object_get(o, "spent"));
    CHECK(spent > 64 && spent < 150);
    CHECK_EQ_INT(json_integer_value(json_object_get(o, "left")), 150 - spent);
    json_decref(info);
    s_request(s, ROUTE_SHELL, "execute_request", json_pack("{s:s}", "code", "print"), id);
    CHECK_EQ_INT(s_kernel(s, 3, out), 0);
    s_reply(s, "execute_reply", id, "{\"status\":\"ok\"}");
    s_check_refused(r, s, "output budget", "of 150 bytes of output");
    session_destroy(&s);
    s_rec_free(r);
}

TEST(budgets_spend_survives_the_record)
{
    rec_t *r = s_rec_new();
    session_limits_t lim = {.max_queued = 8, .grace_ms = 2000, .max_output = 1 << 20,
                            .budget_cells = 1};
    session_t *s = s_session_ready(r, &lim);
    s_cell_ok(s, "a", "{\"metrics\":{\"cpu_ms\":3.4}}");
    json_t *h = session_history(s);
    json_t *spent = json_object_get(h, "spent");
    CHECK_EQ_INT(json_integer_value(json_object_get(spent, "cells")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(spent, "cpu_ms")), 3);
    session_destroy(&s);
    /* The next kenneld's session, from the record: its budget is still spent. */
    s = session_new("id1", "name1", &lim, &s_ops, r);
    session_history_restore(s, h);
    json_decref(h);
    CHECK_EQ_INT(session_start(s), 0);
    s_hello(s);
    s_check_refused(r, s, "cells budget", "1 of 1 cells");
    /* A record's spend that is not a count is ignored. */
    session_destroy(&s);
    h = json_pack("{s:{s:i, s:s}}", "spent", "cells", -5, "cpu_ms", "x");
    s = session_new("id1", "name1", &lim, &s_ops, r);
    session_history_restore(s, h);
    json_decref(h);
    json_t *info = session_info(s);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(json_object_get(info, "budgets"), "cells"), "spent")), 0);
    json_decref(info);
    session_destroy(&s);
    s_rec_free(r);
}

int main(void)
{
    zsys_handler_set(NULL);
    log_init("test_session", LOG_LEVEL_ERROR);
    RUN(kernel_info_waits_for_hello);
    RUN(one_request_at_a_time);
    RUN(comm_messages_go_to_the_kernel_one_at_a_time);
    RUN(a_comm_message_past_its_deadline_or_with_a_dying_kernel);
    RUN(stop_on_error_aborts_queued_executes);
    RUN(stop_on_error_false_keeps_queue);
    RUN(stop_on_error_aborts_consecutive_executes);
    RUN(snapshot_kept_off_the_loop);
    RUN(a_save_as_kenneld_stops_starts_no_ttl);
    RUN(restart_while_eviction_kills_the_kernel);
    RUN(kernel_violations);
    RUN(stdin_round_trip);
    RUN(interrupt_and_shutdown);
    RUN(a_launched_sessions_restart_is_answered_restart_true_and_ends_it);
    RUN(restart_keeps_session);
    RUN(kernel_death_fails_request_and_restarts);
    RUN(failed_start_fails_waiting_requests);
    RUN(a_session_no_kernel_serves_expires);
    RUN(history_restored_with_its_ttl_clock_and_checked);
    RUN(queue_limit);
    RUN(unknown_and_misrouted_ignored);
    RUN(deadline_signal_then_grace_kill);
    RUN(deadline_caught_in_time_keeps_kernel);
    RUN(outcomes_and_metrics);
    RUN(output_cap);
    RUN(output_message_cap);
    RUN(output_merged_while_iopub_lags);
    RUN(output_faster_than_a_client_reads_is_merged);
    RUN(idle_eviction_and_revival);
    RUN(kernel_dies_while_restoring);
    RUN(evicted_session_expires_after_ttl);
    RUN(request_too_large_for_a_frame);
    RUN(a_revival_passes_the_snapshot_file_once_the_kernel_asks);
    RUN(an_eviction_saves_into_the_file_the_kernel_is_passed_once_it_says_the_size);
    RUN(a_file_save_refused_or_written_wrong_keeps_the_kernel);
    RUN(a_snapshot_file_not_asked_for_is_closed_with_the_kernel_or_the_session);
    RUN(restore_past_its_deadline_then_killed);
    RUN(kernel_info_past_the_waiting_bound_keeps_the_latest);
    RUN(kenneld_replies_carry_the_cells_execution_count);
    RUN(op_headers_are_read_as_jansson_reads_them);
    RUN(kenneld_replies_keep_the_last_count_known);
    RUN(kernel_info_error_reply_has_the_specs_fields);
    RUN(restart_aborts_queued_executes);
    RUN(cells_budget_refuses_the_cell_past_it);
    RUN(cpu_budget_counts_the_kernels_cpu_ms_and_lets_the_crossing_cell_end);
    RUN(wall_budget_counts_kennelds_wall_time);
    RUN(output_budget_counts_what_cells_published);
    RUN(budgets_spend_survives_the_record);
    RUN(fork_save_keeps_the_kernel_and_a_fork_restores_it);
    return harness_done();
}
