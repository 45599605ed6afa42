/*  manager: a thin request/reply layer. Validation of arguments happens here, so the broker
 *  only ever sees well-typed values. */
#include "manager.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "cluster.h"
#include "config.h"
#include "log.h"
#include "replyq.h"
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
    cluster_t *cluster;   /* kenneld --cluster's node, or NULL */
    int gate_curve;       /* the socket is a CURVE server */
    const tenants_t *tenants; /* kenneld --tenants, or NULL */
    int scoped;           /* the tenant manager socket: every request is a caller's (s_caller) */
    char parked_caller[GATE_USER_ID_MAX]; /* the parked request's caller (User-Id) */
    replyq_t *replies;    /* replies a client's full pipe could not take yet */
    int replies_timer;    /* flushes replies while it holds any, or -1 */
    long long replies_wait_ms; /* its period now */
};

/*  The ZAP User-Id the gate gives a tenant manager socket's callers. */
#define CALLER_OPERATOR "operator"
#define CALLER_TENANT "tenant:"

static void s_on_settled(void *arg);

void manager_set_cluster(manager_t *self, cluster_t *cluster)
{
    self->cluster = cluster;
    cluster_on_resolved(cluster, s_on_settled, self);
}

/*  Under --cluster a reply carries the connection itself: the client is on another machine,
 *  where the file's path means nothing. */
static void s_with_connection(const manager_t *self, json_t *info)
{
    const char *path = json_string_value(json_object_get(info, "connection_file"));
    json_t *conn = self->cluster && path ? json_load_file(path, 0, NULL) : NULL;
    if (conn) {
        json_object_set_new(info, "connection", conn);
        json_object_set_new(info, "node", json_string(cluster_node(self->cluster)));
    }
}

#define MANAGER_SNDHWM 8   /* replies in libzmq's pipe to one client */
/* Replies kenneld holds for one client whose pipe is full, beyond the pipe's: a client may
 * pipeline this many requests and read their replies when it likes. Past either bound it
 * does not read them, and the next is dropped (the bytes bound: at least one reply). */
#define MANAGER_HELD_REPLIES 256
#define MANAGER_HELD_BYTES (8u << 20)
#define MANAGER_HELD_TOTAL (64u << 20) /* and for all clients together */
#define MANAGER_FLUSH_MS 5      /* how soon held replies are tried again */
#define MANAGER_FLUSH_MAX_MS 100 /* ... at the slowest, while no client reads */
#define PARK_RETRY_MS 1000 /* in case a word from the broker was missed; it should not be */

/*  replyq's send: *msg_p to the peer its first frame names, never blocking (the socket is
 *  ZMQ_ROUTER_MANDATORY: a full pipe is EAGAIN on the first frame, not a silent drop; libzmq
 *  counts whole messages, so a later frame is not refused). Frames go without a copy. */
static int s_send_now(void *arg, zmsg_t **msg_p)
{
    manager_t *self = arg;
    int rc = 0;
    size_t n = zmsg_size(*msg_p), i = 0;
    for (zframe_t *f = zmsg_first(*msg_p); f; f = zmsg_next(*msg_p), i++) {
        int flags = ZFRAME_REUSE | ZFRAME_DONTWAIT | (i + 1 < n ? ZFRAME_MORE : 0);
        if (zframe_send(&f, self->sock, flags) < 0) {
            rc = i == 0 && errno == EAGAIN ? 1 : -1; /* else: no such peer (gone) */
            break;
        }
    }
    if (rc != 1)
        zmsg_destroy(msg_p);
    /* Any send, refused ones too, may have taken the socket's wake-up (libzmq processes
     * its commands then): the loop must look again. */
    loop_reader_touch(self->loop, self->sock);
    return rc;
}

static int s_on_replies_timer(loop_t *loop, int timer_id, void *arg)
{
    manager_t *self = arg;
    size_t before = replyq_held(self->replies);
    size_t left = replyq_flush(self->replies);
    if (left == 0) {
        loop_timer_end(loop, timer_id);
        self->replies_timer = -1;
        self->replies_wait_ms = MANAGER_FLUSH_MS;
        return 0;
    }
    /* Nothing went: its clients are not reading; ask less often (5 ms doubling to 100). */
    long long wait = left < before ? MANAGER_FLUSH_MS : self->replies_wait_ms * 2;
    self->replies_wait_ms = wait < MANAGER_FLUSH_MAX_MS ? wait : MANAGER_FLUSH_MAX_MS;
    loop_timer_reset(loop, timer_id, self->replies_wait_ms);
    return 0;
}

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
    if (!z)
        return;
    size_t dropped = replyq_dropped(self->replies);
    replyq_put(self->replies, &z); /* or dropped: over its bounds, or its client is gone */
    if (replyq_dropped(self->replies) > dropped && log_allow(&self->warn_limit, 5))
        LOG_W("manager: a client that does not read its replies lost one (%zu held for "
              "clients; %d replies or %u MiB at most each, %u MiB in all)",
              replyq_held(self->replies), MANAGER_HELD_REPLIES, MANAGER_HELD_BYTES >> 20,
              MANAGER_HELD_TOTAL >> 20);
    if (!replyq_held(self->replies))
        return;
    if (self->replies_timer < 0) {
        self->replies_wait_ms = MANAGER_FLUSH_MS;
        self->replies_timer = loop_timer(self->loop, MANAGER_FLUSH_MS, 0, s_on_replies_timer, self);
        if (self->replies_timer < 0)
            PLOG_W("manager: cannot arm the timer that sends held replies");
    } else if (self->replies_wait_ms > MANAGER_FLUSH_MS) {
        /* A client that asks again may be reading again: back to the short wait. */
        self->replies_wait_ms = MANAGER_FLUSH_MS;
        loop_timer_reset(self->loop, self->replies_timer, MANAGER_FLUSH_MS);
    }
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

/*  The tenant a new session named name belongs to: the caller's, or for an operator the
 *  tenant its name starts with ("TENANT.…", as kennel-gateway names its tenants' kernels),
 *  or none. */
static const tenant_t *s_owner_of(const manager_t *self, const tenant_t *caller,
                                  const char *name)
{
    if (caller)
        return caller;
    return self->tenants && name ? tenants_of_name(self->tenants, name) : NULL;
}

/*  Whether s is shaped like a session id: a UUID's 8-4-4-4-12 hex digits. */
static int s_id_shaped(const char *s)
{
    if (strlen(s) != 36)
        return 0;
    for (int i = 0; i < 36; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !isxdigit((unsigned char)s[i]))
            return 0;
    }
    return 1;
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
    /* Requests name a session by id or by name: a name shaped like an id would make a new
     * session where another's id was meant (a tenant saying another tenant's id got a
     * session of its own "named" that id). */
    if (s_id_shaped(name))
        return "name may not have a session id's shape (8-4-4-4-12 hex digits)";
    return NULL;
}

/*  A tenant's names are its own: "work" is TENANT.work (what kennel-gateway calls that
 *  tenant's kernel "work"), and two tenants' "work" are two sessions. Unnamed, it is
 *  TENANT.k-…, as the gateway names them. *name becomes the name to use (for an operator,
 *  itself, NULL included), or full. NULL, or the error: the prefixed name is too long, or
 *  the name is another tenant's (it starts with that tenant's name and a dot). */
#define TENANT_NAME_BUF (TENANTS_NAME_MAX + 2 + 129)
static json_t *s_tenant_name(const tenants_t *tenants, const tenant_t *caller,
                             const char **name, char full[TENANT_NAME_BUF])
{
    if (!caller)
        return NULL;
    size_t n = strlen(caller->name);
    const char *dot = *name ? strchr(*name, '.') : NULL;
    if (dot && (size_t)(dot - *name) <= TENANTS_NAME_MAX) {
        /* "bob.work" from alice would be alice.bob.work, not bob's work: a tenant that
         * names another's session gets told so, not a session of its own of that name. */
        char prefix[TENANTS_NAME_MAX + 1];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(dot - *name), *name);
        const tenant_t *other = tenants_find(tenants, prefix);
        if (other && other != caller)
            return s_error("BadRequest", "a name that starts with another tenant's name and "
                                         "a dot is that tenant's session's");
    }
    if (!*name) {
        char id[40];
        snprintf(full, TENANT_NAME_BUF, "%s.k-%.8s", caller->name, util_uuid(id));
    } else if (strncmp(*name, caller->name, n) == 0 && (*name)[n] == '.') {
        snprintf(full, TENANT_NAME_BUF, "%s", *name);
    } else if (n + 1 + strlen(*name) > 128) {
        return s_error("BadRequest", "name, with the tenant's prefix, must be at most 128 "
                                     "characters");
    } else {
        snprintf(full, TENANT_NAME_BUF, "%s.%s", caller->name, *name);
    }
    *name = full;
    return NULL;
}

/*  Over owner's quota with one more session of these limits: the error, else NULL. */
static json_t *s_over_quota(manager_t *self, const tenant_t *owner, const reslimits_t *limits)
{
    if (!owner)
        return NULL;
    tenants_usage_t used = broker_usage(self->broker, owner->name);
    tenants_usage_t asked = {1, limits->cg.memory_bytes, limits->cg.cpus};
    char why[256];
    return tenants_check(owner, &used, &asked, why, sizeof why) < 0
               ? s_error("QuotaExceeded", why)
               : NULL;
}

static json_t *s_on_create(manager_t *self, const jmsg_t *req, const tenant_t *caller)
{
    json_t *content = jmsg_content(req);
    json_t *jname = json_object_get(content, "name");
    json_t *conn = json_object_get(content, "connection");
    const char *name = jmsg_cstr(jname);
    /* A session's id finds it, as its name does (`kennel exec ID`, an SDK Session(ID)); a
     * new session is never named like one (s_check_name), and a tenant finds only its own. */
    int by_id = name && s_id_shaped(name);
    if (by_id) {
        const char *of = broker_tenant(self->broker, name);
        if (!of || (caller && strcmp(of, caller->name) != 0))
            return s_error("NoSuchSession", "no session has that id (a new session's name may "
                                            "not have a session id's shape)");
    } else if (jname && !json_is_null(jname)) {
        const char *bad_name = s_check_name(name);
        if (bad_name)
            return s_error("BadRequest", bad_name);
    }
    if (conn && !json_is_null(conn) && !json_is_object(conn))
        return s_error("BadRequest", "connection must be an object");
    /* kenneld binds a client's ipc paths as root, removing a stale socket there first: a
     * path a tenant chose (or swapped after the check) would have root make or remove files
     * where the tenant may not. A tenant's own ports on 127.0.0.1 are fine. */
    const char *ctransport = jmsg_cstr(json_object_get(conn, "transport"));
    if (caller && json_is_object(conn) && ctransport && strcmp(ctransport, "tcp") != 0)
        return s_error("BadRequest", "a tenant's connection must be tcp: kenneld binds ipc "
                                     "paths as root");
    reslimits_t limits = broker_default_limits(self->broker);
    const char *bad = s_parse_limits(json_object_get(content, "limits"), &limits);
    if (bad)
        return s_error("BadRequest", bad);
    char full[TENANT_NAME_BUF];
    json_t *too_long = by_id ? NULL : s_tenant_name(self->tenants, caller, &name, full);
    if (too_long)
        return too_long;
    const tenant_t *owner = s_owner_of(self, caller, name);
    const char *existing = name ? broker_tenant(self->broker, name) : NULL;
    if (existing && !by_id && strcmp(existing, owner ? owner->name : "") != 0)
        /* An operator's session named like a tenant's, made before the tenants file named
         * that tenant: not the tenant's to take. */
        return s_error("BadRequest", "a session of that name belongs to another tenant");
    json_t *over = existing ? NULL : s_over_quota(self, owner, &limits);
    if (over)
        return over;
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
    /* kennel --cluster: {"gen": G} the catalog's generation; with "from" and "id", the session
     * moves here from that node's directory (it died, or drains). */
    json_t *jcl = json_object_get(content, "cluster");
    long long gen = 0;
    if (jcl) {
        json_t *jg = json_object_get(jcl, "gen");
        const char *from = jmsg_cstr(json_object_get(jcl, "from"));
        const char *id = jmsg_cstr(json_object_get(jcl, "id"));
        if (!self->cluster || !json_is_object(jcl) || !name || !json_is_integer(jg) ||
            (gen = json_integer_value(jg)) <= 0 || (!from != !id))
            return s_error("BadRequest", "cluster must be {gen, [from, id]} with a name, to a "
                                         "kenneld --cluster");
        int pend = 0;
        json_t *have = broker_info(self->broker, name, &pend);
        json_decref(have);
        if (from && id && !have && !pend) {
            char why[512];
            json_t *info = cluster_adopt(self->cluster, name, gen, from, id, why, sizeof why);
            if (!info)
                return s_error("CheckpointUnavailable", why);
            s_with_connection(self, info);
            json_t *reply = s_ok_session(info);
            json_object_set_new(reply, "created", json_false());
            json_object_set_new(reply, "moved_from", json_string(from));
            return reply;
        }
    }
    json_t *info = broker_create(self->broker, name, owner ? owner->name : NULL,
                                 json_is_object(conn) ? conn : NULL,
                                 json_is_true(jcurve), &limits, launched, launcher, &created,
                                 &err);
    if (!info)
        return s_error(err.ename, err.evalue);
    if (self->cluster)
        cluster_track(self->cluster, name, gen);
    s_with_connection(self, info);
    json_t *reply = s_ok_session(info);
    json_object_set_new(reply, "created", json_boolean(created));
    return reply;
}

/*  fork_request {session, name, limits}: NULL while the source's state is being saved (ask
 *  again once the broker settles). */
static json_t *s_on_fork(manager_t *self, const jmsg_t *req, const char *src,
                         const tenant_t *caller)
{
    json_t *content = jmsg_content(req);
    const char *name = jmsg_cstr(json_object_get(content, "name"));
    const char *bad = s_check_name(name);
    if (bad)
        return s_error("BadRequest", bad);
    /* The fork is its source's tenant's, named and counted as that tenant's new session. */
    char full[TENANT_NAME_BUF];
    json_t *too_long = s_tenant_name(self->tenants, caller, &name, full);
    if (too_long)
        return too_long;
    /* The fork's limits are its source's unless it asks otherwise. */
    reslimits_t limits;
    if (broker_limits_of(self->broker, src, &limits) < 0)
        limits = broker_default_limits(self->broker);
    bad = s_parse_limits(json_object_get(content, "limits"), &limits);
    if (bad)
        return s_error("BadRequest", bad);
    const char *owner_name = broker_tenant(self->broker, src);
    const tenant_t *owner = self->tenants && owner_name && owner_name[0]
                                ? tenants_find(self->tenants, owner_name)
                                : NULL;
    /* (Asked again once the source's state is in, the fork exists: it was counted then.) */
    json_t *over = broker_tenant(self->broker, name) ? NULL : s_over_quota(self, owner, &limits);
    if (over)
        return over;
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

/*  Under --cluster, a session this node does not hold may be another's: 1 and *content, a
 *  Redirect naming that node's manager (NULL while the catalog is being asked); 0 when the
 *  catalog names no other live node (the request goes on, to NoSuchSession). */
static int s_redirect(manager_t *self, const char *sess, json_t **content)
{
    json_t *where = NULL;
    *content = NULL;
    if (cluster_resolve(self->cluster, sess, &where) == 1)
        return 1;
    const char *node = json_string_value(json_object_get(where, "node"));
    if (!node || strcmp(node, cluster_node(self->cluster)) == 0) {
        json_decref(where);
        return 0;
    }
    char evalue[512];
    snprintf(evalue, sizeof evalue, "session %s is on node %s", sess, node);
    *content = s_error("Redirect", evalue);
    json_object_set_new(*content, "node", json_string(node));
    json_object_set(*content, "manager", json_object_get(where, "manager"));
    json_decref(where);
    return 1;
}

/*  Who sent a request on the tenant manager socket, from the User-Id the gate gave its
 *  connection: 1 and *t (NULL for an operator), or 0: no one the tenants file names now. */
static int s_caller(const manager_t *self, const char *user_id, const tenant_t **t)
{
    *t = NULL;
    if (!self->scoped)
        return 1;
    if (strcmp(user_id, CALLER_OPERATOR) == 0)
        return 1;
    size_t n = strlen(CALLER_TENANT);
    if (strncmp(user_id, CALLER_TENANT, n) == 0)
        *t = tenants_find(self->tenants, user_id + n);
    return *t != NULL;
}

/*  The session a tenant's request names: its own by name ("work", "TENANT.work") or id;
 *  another tenant's, an operator's or none at all read alike: NULL. An operator names any.
 *  buf holds the prefixed name. */
static const char *s_scope(manager_t *self, const tenant_t *t, const char *sess, char *buf,
                           size_t len)
{
    if (!t)
        return sess;
    const char *owner;
    if (snprintf(buf, len, "%s.%s", t->name, sess) < (int)len &&
        (owner = broker_tenant(self->broker, buf)) && strcmp(owner, t->name) == 0)
        return buf;
    owner = broker_tenant(self->broker, sess);
    return owner && strcmp(owner, t->name) == 0 ? sess : NULL;
}

/*  A tenant's own numbers and quotas, for its stats. New reference. */
static json_t *s_tenant_stats(manager_t *self, const tenant_t *t)
{
    tenants_usage_t u = broker_usage(self->broker, t->name);
    json_t *q = json_object();
    if (t->max_sessions >= 0)
        json_object_set_new(q, "sessions", json_integer(t->max_sessions));
    if (t->max_memory_bytes)
        json_object_set_new(q, "memory", json_integer((json_int_t)t->max_memory_bytes));
    if (t->max_cpus > 0)
        json_object_set_new(q, "cpu", json_real(t->max_cpus));
    return json_pack("{s:s, s:I, s:I, s:f, s:o}", "name", t->name, "sessions",
                     (json_int_t)u.sessions, "memory", (json_int_t)u.memory_bytes, "cpu", u.cpus,
                     "quotas", q);
}

/*  Answer req, taking it; 0, or 1 when it must wait (req kept): a file request whose
 *  workspace image is being made, an info or list whose memory is being measured, a fork
 *  whose source's state is being saved. caller: the connection's User-Id on the tenant
 *  manager socket ("" elsewhere). */
static int s_handle(manager_t *self, jmsg_t *req, const char *caller)
{
    const char *type = jmsg_type(req);
    const route_t *r = route_on(type, ROUTE_MANAGER);
    json_t *content;
    const tenant_t *t = NULL;
    char scoped[TENANTS_NAME_MAX + 2 + 256];
    const char *sess = s_session_arg(req);
    if (!s_caller(self, caller, &t)) {
        /* The gate admitted it as a tenant the file no longer names: cannot happen while
         * the file is read once, but never serve a request as no one. */
        content = s_error("Unauthorized", "not a tenant of this kenneld");
    } else if (!r) {
        content = s_error("BadRequest", "unknown manager request");
    } else if (strcmp(type, "create_request") == 0) {
        content = s_on_create(self, req, t);
    } else if (strcmp(type, "stats_request") == 0) {
        content = broker_stats(self->broker);
        json_object_set_new(content, "max_file", json_integer((json_int_t)self->max_file));
        if (t) { /* its own sessions, not everyone's */
            tenants_usage_t u = broker_usage(self->broker, t->name);
            json_object_set_new(content, "sessions", json_integer((json_int_t)u.sessions));
            json_object_set_new(content, "tenant", s_tenant_stats(self, t));
        }
    } else if (strcmp(type, "list_request") == 0) {
        int pending;
        json_t *list = broker_list(self->broker, &pending);
        if (pending)
            return 1;
        if (t) {
            json_t *own = json_array();
            size_t i;
            json_t *v;
            json_array_foreach(list, i, v) {
                const char *vt = json_string_value(json_object_get(v, "tenant"));
                if (vt && strcmp(vt, t->name) == 0)
                    json_array_append(own, v);
            }
            json_decref(list);
            list = own;
        }
        content = json_pack("{s:s, s:o}", "status", "ok", "sessions", list);
    } else if (strcmp(type, "drain_request") == 0) {
        json_t *on = json_object_get(jmsg_content(req), "on");
        if (t) {
            content = s_error("Unauthorized", "drain_request is an operator's");
        } else if (!self->cluster || !json_is_boolean(on)) {
            content = s_error("BadRequest", "drain_request takes {on: true|false}, to a "
                                            "kenneld --cluster");
        } else {
            cluster_drain(self->cluster, json_is_true(on));
            content = json_pack("{s:s}", "status", "ok");
        }
    } else if (sess && !(sess = s_scope(self, t, sess, scoped, sizeof scoped))) {
        content = s_error("NoSuchSession", "no session has that id or name");
    } else if (!sess) {
        content = s_error("BadRequest", "session must be a non-empty string");
    } else if (self->cluster && !broker_has(self->broker, sess) && s_redirect(self, sess, &content)) {
        if (!content)
            return 1; /* the catalog is being asked, off the loop */
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
        content = s_on_fork(self, req, sess, t);
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
        if (info)
            s_with_connection(self, info);
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

/*  The gate's question on the tenant manager socket: who the caller is, by its uid on ipc
 *  (libzmq gives SO_PEERCRED as "HOST:uid:gid:pid") or its CURVE client key on tcp. The
 *  answer goes with each of its messages as the User-Id (s_caller). Anyone else is
 *  refused before a frame of theirs is read. */
static int s_admit_scoped(void *arg, int which, const gate_request_t *req, void **job,
                          const char **why)
{
    (void)which;
    (void)job;
    manager_t *self = arg;
    const tenant_t *t = NULL;
    tenants_who_t who = TENANTS_UNKNOWN;
    if (req->client_key) {
        who = tenants_by_key(self->tenants, req->client_key, &t);
    } else if (strcmp(req->mechanism, "NULL") == 0 && !self->gate_curve) {
        const char *colon = strchr(req->address, ':');
        char *end = NULL;
        unsigned long uid = colon ? strtoul(colon + 1, &end, 10) : 0;
        if (colon && end != colon + 1 && *end == ':')
            who = tenants_by_uid(self->tenants, (uid_t)uid, &t);
    }
    if (who == TENANTS_UNKNOWN) {
        if (log_allow(&self->warn_limit, 5))
            LOG_W("tenant manager: refused %s (%s): no tenant of the tenants file", req->address,
                  req->mechanism);
        *why = "not a tenant of this kenneld";
        return 0;
    }
    snprintf(req->user_id, GATE_USER_ID_MAX, "%s%s", t ? CALLER_TENANT : CALLER_OPERATOR,
             t ? t->name : "");
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
    if (s_handle(self, self->parked, self->parked_caller) == 1) {
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
    /* The gate's User-Id for this connection, which libzmq gives each frame from its peer
     * (not the routing id ROUTER adds). */
    char caller[GATE_USER_ID_MAX] = "";
    for (zframe_t *f = rc == 0 ? zmsg_first(z) : NULL; f && !caller[0]; f = zmsg_next(z)) {
        const char *u = zframe_meta(f, "User-Id");
        if (u)
            snprintf(caller, sizeof caller, "%s", u);
    }
    if (rc == 0)
        rc = wire_decode(self->wire, &z, &req);
    if (rc != 0) {
        if (log_allow(&self->warn_limit, 5))
            LOG_W("manager: dropped a message: %s", wire_strerror(rc));
        return 0;
    }
    LOG_D("manager: <- %s", jmsg_type(req));
    if (s_handle(self, req, caller) == 1) {
        snprintf(self->parked_caller, sizeof self->parked_caller, "%s", caller);
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
                       const char *curve_secret, const tenants_t *tenants, int scoped)
{
    if (scoped && (!tenants || !gate || (strncmp(endpoint, "ipc://", 6) != 0 && !curve_secret))) {
        errno = EINVAL;
        return NULL;
    }
    manager_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->tenants = tenants;
    self->scoped = scoped;
    self->loop = loop;
    self->broker = broker;
    self->park_timer = -1;
    self->replies_timer = -1;
    self->replies_wait_ms = MANAGER_FLUSH_MS;
    self->replies = replyq_new(MANAGER_HELD_REPLIES, MANAGER_HELD_BYTES, MANAGER_HELD_TOTAL,
                               s_send_now, self);
    if (!self->replies) {
        free(self);
        return NULL;
    }
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
            gate_guard(gate, self->sock, scoped ? s_admit_scoped : s_admit, NULL, NULL, self,
                       0) < 0) {
            errno = EINVAL;
            goto fail;
        }
        self->gate = gate;
        self->gate_curve = 1;
        zsock_set_curve_server(self->sock, 1);
        zsock_set_curve_secretkey(self->sock, curve_secret);
    } else if (scoped) {
        if (gate_guard(gate, self->sock, s_admit_scoped, NULL, NULL, self, 0) < 0)
            goto fail;
        self->gate = gate;
    }
    zsock_set_linger(self->sock, 0);
    self->max_file = max_file;
    /* Requests are small but for file_put's bytes. */
    zsock_set_maxmsgsize(self->sock, (int)(max_file + (1 << 20)));
    /* A client that does not read its replies: at most this many wait in libzmq's pipe to
     * it (libzmq's 1000 held ~32 GB of file_get replies); replyq holds a bounded few more. */
    zsock_set_sndhwm(self->sock, MANAGER_SNDHWM);
    zsock_set_router_mandatory(self->sock, 1); /* a full pipe says so: replyq.h */
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
    if (self->replies_timer >= 0)
        loop_timer_end(self->loop, self->replies_timer);
    replyq_destroy(&self->replies);
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
