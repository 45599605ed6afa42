/*  manager: a thin request/reply layer. Validation of arguments happens here, so the broker
 *  only ever sees well-typed values. */
#include "manager.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "config.h"
#include "log.h"
#include "route.h"
#include "util.h"
#include "wsfile.h"

struct manager {
    loop_t *loop;
    broker_t *broker;
    zsock_t *sock;
    wire_t *wire;
    char *endpoint;
    char session[40];     /* the `session` field of our reply headers */
    size_t max_file;      /* largest file the file API moves */
    log_limit_t warn_limit;
    jmsg_t *parked;       /* a file request waiting for its session's new workspace image;
                           * the socket is not read meanwhile, so requests keep their order */
    int park_timer;       /* retries the parked request, or -1 */
    gate_t *gate;         /* guards the socket under CURVE, or NULL */
    unsigned char curve_key[32]; /* under CURVE: the one client key admitted (the pair's own) */
};

#define MANAGER_SNDHWM 8   /* replies queued for one client that does not read */
#define PARK_RETRY_MS 1000 /* in case a word from the broker was missed; it should not be */

/*  Reply to req with content (stolen) and, when data is not NULL, one binary buffer. */
static void s_reply_data(manager_t *self, const jmsg_t *req, json_t *content, const void *data,
                         size_t data_len)
{
    char reply_type[128] = "error_reply"; /* for a type that is no `*_request` */
    const char *type = jmsg_type(req);
    size_t tlen = strlen(type);
    if (tlen >= 8 && tlen - 8 + 7 < sizeof reply_type && strcmp(type + tlen - 8, "_request") == 0) {
        memcpy(reply_type, type, tlen - 8);
        strcpy(reply_type + tlen - 8, "_reply");
    }
    jmsg_t *rep = jmsg_new_reply(req, reply_type, self->session);
    if (!rep) {
        json_decref(content);
        return;
    }
    jmsg_set_json(rep, JMSG_CONTENT, content);
    if (data)
        zmsg_addmem(jmsg_buffers(rep), data, data_len);
    zmsg_t *z = wire_encode(self->wire, rep);
    jmsg_destroy(&rep);
    if (z && zmsg_send(&z, self->sock) < 0)
        zmsg_destroy(&z);
}

static void s_reply(manager_t *self, const jmsg_t *req, json_t *content)
{
    s_reply_data(self, req, content, NULL, 0);
}

static json_t *s_error(const char *ename, const char *evalue)
{
    return json_pack("{s:s, s:s, s:s}", "status", "error", "ename", ename, "evalue", evalue);
}

static json_t *s_ok_session(json_t *info)
{
    return json_pack("{s:s, s:o}", "status", "ok", "session", info);
}

/*  The session argument: a non-empty string. */
static const char *s_session_arg(const jmsg_t *req)
{
    const char *v = jmsg_cstr(json_object_get(jmsg_content(req), "session"));
    return v && *v ? v : NULL;
}

/*  Per-session limits over the defaults: {"memory": bytes, "pids": n, "cpu": cpus,
 *  "tmp": bytes, "disk": bytes, "timeout": seconds, "idle": seconds, "budget_cpu": seconds,
 *  "budget_wall": seconds, "budget_cells": n, "budget_output": bytes}; 0 for disk, timeout,
 *  idle and the budgets: none, as kenneld's own options. NULL on success, else the
 *  reason. */
static const char *s_parse_limits(const json_t *obj, reslimits_t *lim)
{
    if (!obj || json_is_null(obj))
        return NULL;
    if (!json_is_object(obj))
        return "limits must be an object";
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        double x = json_number_value(v);
        if (!json_is_number(v) || x < 0 ||
            (x == 0 && strcmp(key, "disk") != 0 && strcmp(key, "idle") != 0 &&
             strcmp(key, "timeout") != 0 && strncmp(key, "budget_", 7) != 0))
            return "limits must be positive numbers (disk, idle, timeout and the budgets may be "
                   "0: no cap, never evicted, no deadline, no budget)";
        if (strcmp(key, "memory") == 0) {
            if (x < KENNEL_MEMORY_MIN || x > 1e12)
                return "memory must be between 256 MiB (what a kernel needs to start) and 1 TB";
            lim->cg.memory_bytes = (unsigned long long)x;
        } else if (strcmp(key, "pids") == 0) {
            if (x < 8 || x > 65536)
                return "pids must be between 8 and 65536";
            lim->cg.pids = (unsigned long)x;
        } else if (strcmp(key, "cpu") == 0) {
            if (x < 0.01 || x > 1024)
                return "cpu must be between 0.01 and 1024";
            lim->cg.cpus = x;
        } else if (strcmp(key, "idle") == 0) {
            if (x > 365 * 86400)
                return "idle must be at most a year (seconds)";
            lim->idle_ms = util_seconds_ms(x); /* 1 µs is 1 ms, not 0 (never) */
        } else if (strcmp(key, "timeout") == 0) {
            if (x > 7 * 86400)
                return "timeout must be at most a week (seconds)";
            lim->timeout_ms = util_seconds_ms(x); /* 1 µs is 1 ms, not 0 (none) */
        } else if (strcmp(key, "tmp") == 0) {
            if (x < (1 << 20) || x > 1e12)
                return "tmp must be between 1 MiB and 1 TB";
            lim->tmp_bytes = (unsigned long long)x;
        } else if (strcmp(key, "disk") == 0) {
            if ((x != 0 && x < (16 << 20)) || x > 1e12)
                return "disk must be 0 (no cap) or between 16 MiB and 1 TB";
            lim->disk_bytes = (unsigned long long)x;
        } else if (strcmp(key, "budget_cpu") == 0 || strcmp(key, "budget_wall") == 0) {
            if (x > 365 * 86400)
                return "budget_cpu and budget_wall must be at most a year (seconds)";
            *(key[7] == 'c' ? &lim->budget_cpu_ms : &lim->budget_wall_ms) =
                x == 0 ? 0 : util_seconds_ms(x);
        } else if (strcmp(key, "budget_cells") == 0) {
            if (x != (long long)x || x > 1e12)
                return "budget_cells must be a whole number of cells, at most 10^12";
            lim->budget_cells = (long long)x;
        } else if (strcmp(key, "budget_output") == 0) {
            if (x > 1e15)
                return "budget_output must be at most 10^15 bytes";
            lim->budget_output = (unsigned long long)x;
        } else {
            return "limits takes memory, pids, cpu, tmp, disk, timeout, idle, budget_cpu, "
                   "budget_wall, budget_cells and budget_output";
        }
    }
    return NULL;
}

/*  An ASCII letter or digit (isalnum follows the locale). */
static int s_alnum(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/*  A session name's shape: NULL when good, else why not. */
static const char *s_check_name(const char *name)
{
    if (!name || !*name || strlen(name) > 128)
        return "name must be a string of 1 to 128 characters";
    for (const char *p = name; *p; p++)
        if (!(*p == '-' || *p == '_' || *p == '.' || s_alnum(*p)))
            return "name may contain only letters, digits, '-', '_' and '.'";
    /* "-x" would read as an option to the CLI, "." and ".." as directories. */
    if (!s_alnum(*name))
        return "name must start with a letter or a digit";
    return NULL;
}

static json_t *s_on_create(manager_t *self, const jmsg_t *req)
{
    json_t *content = jmsg_content(req);
    json_t *jname = json_object_get(content, "name");
    json_t *conn = json_object_get(content, "connection");
    const char *name = jmsg_cstr(jname);
    if (jname && !json_is_null(jname)) {
        const char *bad_name = s_check_name(name);
        if (bad_name)
            return s_error("BadRequest", bad_name);
    }
    if (conn && !json_is_null(conn) && !json_is_object(conn))
        return s_error("BadRequest", "connection must be an object");
    reslimits_t limits = broker_default_limits(self->broker);
    const char *bad = s_parse_limits(json_object_get(content, "limits"), &limits);
    if (bad)
        return s_error("BadRequest", bad);
    int launched = json_is_true(json_object_get(content, "launched"));
    json_t *jpid = json_object_get(content, "launcher_pid");
    if (jpid && (!json_is_integer(jpid) || json_integer_value(jpid) <= 0 ||
                 json_integer_value(jpid) > INT_MAX || !launched))
        return s_error("BadRequest", "launcher_pid must be a positive pid, with launched");
    pid_t launcher = jpid ? (pid_t)json_integer_value(jpid) : 0;
    json_t *jcurve = json_object_get(content, "curve");
    if (jcurve && !json_is_boolean(jcurve))
        return s_error("BadRequest", "curve must be true or false");
    int created = 0;
    broker_error_t err = {0};
    json_t *info = broker_create(self->broker, name, json_is_object(conn) ? conn : NULL,
                                 json_is_true(jcurve), &limits, launched, launcher, &created,
                                 &err);
    if (!info)
        return s_error(err.ename, err.evalue);
    json_t *reply = s_ok_session(info);
    json_object_set_new(reply, "created", json_boolean(created));
    return reply;
}

/*  fork_request {session, name, limits}: NULL while the source's state is being saved (ask
 *  again once the broker settles). */
static json_t *s_on_fork(manager_t *self, const jmsg_t *req, const char *src)
{
    json_t *content = jmsg_content(req);
    const char *name = jmsg_cstr(json_object_get(content, "name"));
    const char *bad = s_check_name(name);
    if (bad)
        return s_error("BadRequest", bad);
    /* The fork's limits are its source's unless it asks otherwise. */
    reslimits_t limits;
    if (broker_limits_of(self->broker, src, &limits) < 0)
        limits = broker_default_limits(self->broker);
    bad = s_parse_limits(json_object_get(content, "limits"), &limits);
    if (bad)
        return s_error("BadRequest", bad);
    int pending;
    json_t *lost = NULL;
    broker_error_t err = {0};
    json_t *info = broker_fork(self->broker, src, name, &limits, &lost, &pending, &err);
    if (pending)
        return NULL;
    if (!info) {
        json_decref(lost);
        return s_error(err.ename, err.evalue);
    }
    json_t *reply = s_ok_session(info);
    json_object_set_new(reply, "not_copied", lost ? lost : json_array());
    return reply;
}

/*  The workspace file API. Returns the reply content; a get also sets *data (caller frees).
 *  NULL: the session's workspace image is still being made; ask again. */
static json_t *s_on_file(manager_t *self, const jmsg_t *req, const char *sess, void **data,
                         size_t *len)
{
    const char *type = jmsg_type(req);
    const char *path = jmsg_cstr(json_object_get(jmsg_content(req), "path"));
    char ws[PATH_MAX];
    uid_t uid;
    gid_t gid;
    broker_error_t err = {0};
    int rc_ws = broker_workspace(self->broker, sess, ws, sizeof ws, &uid, &gid, &err);
    if (rc_ws < 0)
        return s_error(err.ename, err.evalue);
    if (rc_ws > 0)
        return NULL;
    if (strcmp(type, "file_list_request") == 0) {
        int truncated;
        json_t *files = wsfile_list(ws, 10000, &truncated);
        return json_pack("{s:s, s:o, s:b}", "status", "ok", "files", files, "truncated", truncated);
    }
    if (!path)
        return s_error("BadRequest", "path must be a string without NUL");
    int rc = 0;
    size_t size = 0;
    if (strcmp(type, "file_put_request") == 0) {
        zframe_t *buf = zmsg_first(jmsg_buffers(req));
        if (!buf)
            return s_error("BadRequest", "the file's bytes go in the message's first buffer");
        size = zframe_size(buf);
        rc = size > self->max_file ? WSFILE_ETOOBIG
                                   : wsfile_put(ws, path, zframe_data(buf), size, uid, gid);
    } else if (strcmp(type, "file_get_request") == 0) {
        rc = wsfile_get(ws, path, self->max_file, data, &size);
        *len = size;
    } else {
        rc = wsfile_delete(ws, path);
    }
    if (rc < 0) {
        const char *ename = rc == WSFILE_ENOENT ? "NoSuchFile" : rc == WSFILE_ETOOBIG ? "TooLarge"
                            : rc == WSFILE_EIO ? "FileError" : "BadPath";
        char evalue[200];
        snprintf(evalue, sizeof evalue, "%s%s%s", wsfile_strerror(rc), rc == WSFILE_EIO ? ": " : "",
                 rc == WSFILE_EIO ? strerror(errno) : "");
        return s_error(ename, evalue);
    }
    return json_pack("{s:s, s:s, s:I}", "status", "ok", "path", path, "size", (json_int_t)size);
}

/*  Answer req, taking it; 0, or 1 when it must wait (req kept): a file request whose
 *  workspace image is being made, an info or list whose memory is being measured, a fork
 *  whose source's state is being saved. */
static int s_handle(manager_t *self, jmsg_t *req)
{
    const char *type = jmsg_type(req);
    const route_t *r = route_on(type, ROUTE_MANAGER);
    json_t *content;
    const char *sess = s_session_arg(req);
    if (!r) {
        content = s_error("BadRequest", "unknown manager request");
    } else if (strcmp(type, "create_request") == 0) {
        content = s_on_create(self, req);
    } else if (strcmp(type, "stats_request") == 0) {
        content = broker_stats(self->broker);
        json_object_set_new(content, "max_file", json_integer((json_int_t)self->max_file));
    } else if (strcmp(type, "list_request") == 0) {
        int pending;
        json_t *list = broker_list(self->broker, &pending);
        if (pending)
            return 1;
        content = json_pack("{s:s, s:o}", "status", "ok", "sessions", list);
    } else if (!sess) {
        content = s_error("BadRequest", "session must be a non-empty string");
    } else if (strncmp(type, "file_", 5) == 0) {
        void *data = NULL;
        size_t len = 0;
        content = s_on_file(self, req, sess, &data, &len);
        if (!content)
            return 1;
        if (data) {
            s_reply_data(self, req, content, data, len);
            free(data);
            jmsg_destroy(&req);
            return 0;
        }
    } else if (strcmp(type, "fork_request") == 0) {
        content = s_on_fork(self, req, sess);
        if (!content)
            return 1;
    } else if (strcmp(type, "rekey_request") == 0) {
        broker_error_t err = {0};
        json_t *info = broker_rekey(self->broker, sess, &err);
        content = info ? s_ok_session(info) : s_error(err.ename, err.evalue);
    } else if (strcmp(type, "info_request") == 0) {
        int pending;
        json_t *info = broker_info(self->broker, sess, &pending);
        if (pending)
            return 1;
        content = info ? s_ok_session(info) : s_error("NoSuchSession", "no session has that id or name");
    } else {
        content = broker_end(self->broker, sess) == 0
                      ? json_pack("{s:s}", "status", "ok")
                      : s_error("NoSuchSession", "no session has that id or name");
    }
    s_reply(self, req, content);
    jmsg_destroy(&req);
    return 0;
}

static int s_on_request(loop_t *loop, zsock_t *sock, void *arg);

/*  The gate's question under CURVE: the peer knew the public key (or its handshake would
 *  have failed) and holds the pair itself, as the kennel CLI does with kenneld.json's. */
static int s_admit(void *arg, int which, const gate_request_t *req, void **job, const char **why)
{
    (void)which;
    (void)job;
    manager_t *self = arg;
    if (!req->client_key || sodium_memcmp(req->client_key, self->curve_key, 32) != 0) {
        *why = "not kenneld's manager key";
        return 0;
    }
    return 1;
}

static int s_on_park_timer(loop_t *loop, int timer_id, void *arg);

/*  (Re)arm the one retry of the parked request, in ms. */
static void s_park_retry(manager_t *self, long long ms)
{
    loop_timer_end(self->loop, self->park_timer);
    self->park_timer = loop_timer(self->loop, ms, 1, s_on_park_timer, self);
    if (self->park_timer < 0) {
        LOG_E("out of memory");
        exit(1);
    }
}

/*  The broker's word that what the parked request waited for settled: try it on the next
 *  turn. */
static void s_on_settled(void *arg)
{
    manager_t *self = arg;
    if (!self->parked)
        return;
    s_park_retry(self, 0);
}

/*  Try the parked request again (the broker said it settled, or PARK_RETRY_MS
 *  passed); once answered, read the socket again. */
static int s_on_park_timer(loop_t *loop, int timer_id, void *arg)
{
    (void)timer_id;
    manager_t *self = arg;
    self->park_timer = -1; /* it fired its one time */
    if (!self->parked)
        return 0;
    if (s_handle(self, self->parked) == 1) {
        s_park_retry(self, PARK_RETRY_MS);
        return 0;
    }
    self->parked = NULL;
    loop_timer_end(loop, self->park_timer); /* one the broker's word armed meanwhile */
    self->park_timer = -1;
    if (loop_reader(loop, self->sock, s_on_request, self) < 0) {
        LOG_E("out of memory");
        exit(1);
    }
    return 0;
}

static int s_on_request(loop_t *loop, zsock_t *sock, void *arg)
{
    manager_t *self = arg;
    zmsg_t *z = NULL;
    jmsg_t *req = NULL;
    int rc = wire_recv(sock, wire_max_frames(self->wire), &z);
    if (rc == 0)
        rc = wire_decode(self->wire, &z, &req);
    if (rc != 0) {
        if (log_allow(&self->warn_limit, 5))
            LOG_W("manager: dropped a message: %s", wire_strerror(rc));
        return 0;
    }
    LOG_D("manager: <- %s", jmsg_type(req));
    if (s_handle(self, req) == 1) {
        /* Its session's workspace image is being made (tens of ms, on kenneld's worker
         * thread), or memory measured (on its meter): later requests wait in the socket, so
         * that a list after a put sees it, and answers keep their order. */
        self->parked = req;
        loop_reader_end(loop, sock);
        s_park_retry(self, PARK_RETRY_MS); /* or sooner: s_on_settled */
    }
    return 0;
}

manager_t *manager_new(loop_t *loop, broker_t *broker, const char *endpoint, const char *key,
                       size_t max_file, const wire_limits_t *limits, gate_t *gate,
                       const char *curve_secret)
{
    manager_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    self->broker = broker;
    self->park_timer = -1;
    util_uuid(self->session);
    /* A put carries a whole file: the wire's size limit grows with --max-file (it dropped a
     * put between 64 MiB and --max-file without a word). */
    wire_limits_t lim;
    if (limits)
        lim = *limits;
    else
        wire_limits_default(&lim);
    if (lim.max_msg_bytes < max_file + (1 << 20))
        lim.max_msg_bytes = max_file + (1 << 20);
    self->wire = wire_new(key, strlen(key), &lim);
    self->sock = zsock_new(ZMQ_ROUTER);
    if (!self->wire || !self->sock)
        goto fail;
    if (curve_secret) {
        char pub[41];
        if (!gate || zmq_curve_public(pub, curve_secret) < 0 ||
            !zmq_z85_decode(self->curve_key, pub) ||
            gate_guard(gate, self->sock, s_admit, NULL, NULL, self, 0) < 0) {
            errno = EINVAL;
            goto fail;
        }
        self->gate = gate;
        zsock_set_curve_server(self->sock, 1);
        zsock_set_curve_secretkey(self->sock, curve_secret);
    }
    zsock_set_linger(self->sock, 0);
    self->max_file = max_file;
    /* Requests are small but for file_put's bytes. */
    zsock_set_maxmsgsize(self->sock, (int)(max_file + (1 << 20)));
    /* A client that does not read its replies: at most this many wait in kenneld for it
     * (libzmq's 1000 held ~32 GB of file_get replies), the rest are dropped. */
    zsock_set_sndhwm(self->sock, MANAGER_SNDHWM);
    int port = zsock_bind(self->sock, "%s", endpoint);
    if (port < 0)
        goto fail;
    char *last = zsock_last_endpoint(self->sock); /* czmq: caller owns it */
    self->endpoint = last ? last : strdup(endpoint);
    if (!self->endpoint || loop_reader(loop, self->sock, s_on_request, self) < 0)
        goto fail;
    broker_on_settled(broker, s_on_settled, self);
    return self;
fail:;
    int saved = errno;
    manager_destroy(&self);
    errno = saved;
    return NULL;
}

void manager_destroy(manager_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    manager_t *self = *self_p;
    if (self->broker)
        broker_on_settled(self->broker, NULL, NULL);
    if (self->park_timer >= 0)
        loop_timer_end(self->loop, self->park_timer);
    jmsg_destroy(&self->parked);
    if (self->sock)
        loop_reader_end(self->loop, self->sock);
    gate_unguard(self->gate, self->sock);
    zsock_destroy(&self->sock);
    wire_destroy(&self->wire);
    free(self->endpoint);
    free(self);
    *self_p = NULL;
}

const char *manager_endpoint(const manager_t *self)
{
    return self->endpoint;
}
