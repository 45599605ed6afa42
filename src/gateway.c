/*  kennel-gateway: Jupyter Server's kernel REST and WebSocket API (what `--gateway-url`
 *  front ends and agent frameworks speak) in front of kenneld, on libwebsockets.
 *
 *  Two processes when started as root: this one keeps root only to read kenneld.json and
 *  sessions' connection files for its child (the monitor), and the child, which binds,
 *  loads the TLS pair, drops to --user, and only then parses HTTP, WebSocket and TLS. To
 *  kenneld the child is a client like the CLI: the manager socket and each session's
 *  ZeroMQ sockets, whose descriptors libwebsockets polls with its own (adopted as raw
 *  files). Request routing and the WebSocket codecs are sans-IO, in gwproto. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <czmq.h>
#include <jansson.h>
#include <libwebsockets.h>
#include <openssl/crypto.h>
#include <sodium.h>

#include "gwproto.h"
#include "gwqueue.h"
#include "jmsg.h"
#include "jvalid.h"
#include "log.h"
#include "util.h"
#include "wire.h"

#define MGR_TIMEOUT_MS 10000
#define MAX_BODY (64u << 10)  /* a REST request's body */
#define MAX_HELD 64           /* a WebSocket's messages held until its kernel is ready */
#define MAX_REPLAYS 16        /* replay buffers per kernel */
#define PRIV_MAX (128u << 10) /* a file the monitor reads */
#define MAX_JSESSIONS 256     /* Jupyter sessions (POST /api/sessions) per tenant */
#define MAX_JSESSION_FIELD 4096 /* bytes of a session's path, name or type */

/* ---------------------------------------------------------------------------------- */
/* Options                                                                            */

static struct {
    char state_dir[4096];
    char listen_addr[256];
    int port;
    const char *tokens, *cert, *key, *user, *cors;
    unsigned max_header; /* bytes of a request's headers */
    size_t max_frame;    /* bytes of one WebSocket message */
    int max_conns;       /* WebSockets per tenant */
    int idle_s;          /* a WebSocket with no traffic is closed after this */
    int request_s;       /* a request's headers and body must arrive within this */
    size_t replay_bytes; /* per dropped client */
    size_t max_pending;  /* bytes waiting for one WebSocket before it is dropped */
    int replay_s;        /* how long a dropped client's messages are kept */
    int answer_s;        /* a kernel kenneld never answers: its WebSockets closed after this */
} opt = {.user = "nobody",
         .max_header = 8192,
         .max_frame = 32u << 20,
         .max_conns = 256,
         .idle_s = 3600,
         .request_s = 10,
         .replay_bytes = 32u << 20,
         .replay_s = 120,
         .answer_s = 30,
         .max_pending = 64u << 20};

/* ---------------------------------------------------------------------------------- */
/* Types                                                                              */

typedef struct kern kern_t;
typedef struct conn conn_t;

typedef enum {
    MP_LIST = 1,
    MP_SESSIONS,
    MP_CREATE,
    MP_GET,
    MP_DELETE,
    MP_END,
    MP_INTERRUPT,
    MP_RESTART,
    MP_ATTACH,
    MP_METRICS,
    MP_SPOST_HAVE, /* POST /api/sessions: is the kernel of the path's session still there? */
    MP_SPOST_KID,  /* ... with kernel.id: is it the tenant's? */
    MP_SPOST_NEW,  /* ... the path's kennel session, made or found */
    MP_SGET,
    MP_SDELETE,
    MP_SPATCH_OLD, /* PATCH of a kernel listed as a session without an entry: is it there? */
    MP_SPATCH_KID, /* PATCH to kernel.id */
    MP_SPATCH_NEW, /* PATCH to kernel.name: a fresh kernel */
    MP_SPATCH_INFO /* PATCH of path, name or type only */
} mp_kind_t;

typedef struct {
    char msg_id[40];
    mp_kind_t kind;
    conn_t *conn; /* NULL once the connection is gone */
    long long deadline_ms;
    char jsess[40]; /* the Jupyter session a sessions call is about */
} mpend_t;

/*  A Jupyter session (POST /api/sessions): what a front end calls a notebook's tie to its
 *  kernel. Kept by the gateway, in memory; the kernel is a kennel session. */
typedef struct {
    char id[40];
    char tenant[40];
    char kernel[40];
    char spec[16]; /* the kernelspec name it asked for; "" for the kernel's own */
    char *path, *name, *type; /* as the client gave them; name may be NULL */
} jsess_t;

typedef struct {
    kern_t *kern; /* NULL: the manager socket */
    int channel;
} watch_t;

struct kern {
    char id[40];
    char name[160]; /* the kennel session's name: TENANT.NAME */
    char tenant[40];
    char spec[16]; /* the kernelspec name a client asked for */
    char own[40];  /* the gateway's own Jupyter session id with this kernel */
    zsock_t *sock[GWPROTO_NCHANNELS];
    char ep[GWPROTO_NCHANNELS][PATH_MAX + 32]; /* what each socket is connected to */
    struct lws *watch_wsi[GWPROTO_NCHANNELS];
    watch_t watch[GWPROTO_NCHANNELS];
    wire_t *wire;
    int ready; /* iopub has delivered: clients' messages go through */
    long long nudged_ms;
    long long waiting_ms; /* since when clients have waited for it to be ready (0: none) */
    zlistx_t *conns;  /* conn_t *, not owned */
    zhashx_t *replay; /* client session id -> gwqueue_t * */
    char state[16];   /* Jupyter execution_state as iopub last said */
    long long unused_since_ms;
    int queued; /* execute requests sent, not answered */
    int follow; /* kenneld restarted: its connection file is to be read again (s_kern_follow) */
    conn_t *restart_conn;
    char restart_id[40];
};

struct conn {
    struct lws *wsi;
    int is_ws;
    char tenant[40];
    /* HTTP */
    int method; /* 'G', 'P' (POST), 'D', 'O', 'A' (PATCH) */
    gwproto_route_t route;
    char *body;
    size_t body_len;
    int body_too_big;
    mpend_t *pending;
    int status;
    unsigned char *resp; /* LWS_PRE + resp_len */
    size_t resp_len;
    const char *ctype;
    char location[80]; /* a 201's Location: the new resource's path */
    int responded;
    /* WebSocket */
    gwproto_ws_mode_t mode;
    kern_t *kern;
    char kernel_id[GWPROTO_ID_MAX + 1];
    char session_id[80]; /* from the URL, else the first header's session */
    unsigned char *rx;
    size_t rx_len, rx_cap;
    gwqueue_t out;
    gwqueue_t held; /* decoded messages waiting for the kernel to be ready */
    int close_code;
    char close_reason[100];
    int counted; /* counted in its tenant's connections */
};

static struct {
    struct lws_context *ctx;
    struct lws_vhost *vh;
    json_t *tokens;       /* token key -> tenant */
    json_t *tenants;      /* tenant -> true: the tenants the tokens name */
    json_t *tenant_conns; /* tenant -> WebSockets open */
    zsock_t *mgr;
    wire_t *mgr_wire;
    char mgr_session[40];
    struct lws *mgr_wsi;
    int mgr_stale; /* the last s_mgr_connect failed: the sweep tries again */
    char mgr_digest[65]; /* kenneld.json's digest when s_mgr_connect last read it: another
                          * one is a kenneld that restarted (s_mgr_moved) */
    watch_t mgr_watch;
    zhashx_t *mpend;      /* msg_id -> mpend_t (owned) */
    zhashx_t *kerns;      /* id -> kern_t (owned) */
    zhashx_t *exec_start; /* execute msg_id -> start time in µs (malloc'd) */
    zhashx_t *jsess;      /* Jupyter session id -> jsess_t (owned) */
    int monitor_fd;       /* -1: read files directly */
    lws_sorted_usec_list_t sul;
    volatile sig_atomic_t stop;
    /* metrics */
    unsigned long long cells_ok, cells_error, cells_aborted, ws_total, ws_refused, frames_refused,
        http_requests, auth_failed, replayed, replay_dropped;
    unsigned long long rtt_buckets[12], rtt_count;
    double rtt_sum_s;
} g = {.monitor_fd = -1};

static const double s_rtt_le[12] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                    0.05,   0.1,   0.25,  0.5,   1.0,  5.0};

/* ---------------------------------------------------------------------------------- */
/* Privileged reads: kenneld.json and connection files                                */

static pid_t s_child_pid;
static void s_forward_signal(int sig)
{
    if (s_child_pid > 0)
        kill(s_child_pid, sig);
}

static int s_read_state_file(const char *rel, char *out, size_t cap, size_t *len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", opt.state_dir, rel);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n, got = 0;
    while ((n = read(fd, out + got, cap - (size_t)got)) > 0 && (size_t)(got += n) < cap) {
    }
    close(fd);
    if (n < 0 || (size_t)got >= cap)
        return -1;
    *len = (size_t)got;
    return 0;
}

/*  Replace the len bytes at buf (room for PRIV_MAX) by their BLAKE2b-256 digest in hex;
 *  the digest's length. What the serving child compares to tell a restarted kenneld. */
static size_t s_digest_hex(char *buf, size_t len)
{
    unsigned char d[32];
    crypto_generichash(d, sizeof d, (const unsigned char *)buf, len, NULL, 0);
    sodium_memzero(buf, len);
    sodium_bin2hex(buf, 2 * sizeof d + 1, d, sizeof d);
    return 2 * sizeof d;
}

/*  The answer to one of the three requests a gateway makes of the state directory: "M"
 *  (kenneld.json), "C<uuid>" (that session's connection file) and "H" (kenneld.json's
 *  digest in hex, never its key). Into buf (room for PRIV_MAX): 0 and *len, or -1 for any
 *  other request or a file that cannot be read. The monitor answers with it, and so does a
 *  gateway that has no monitor. */
static int s_answer(const char *req, char *buf, size_t *len)
{
    char rel[128];
    int hash = strcmp(req, "H") == 0;
    if (hash || strcmp(req, "M") == 0)
        snprintf(rel, sizeof rel, "kenneld.json");
    else if (req[0] == 'C' && gwproto_is_uuid(req + 1))
        snprintf(rel, sizeof rel, "sessions/%s/connection.json", req + 1);
    else
        return -1;
    if (s_read_state_file(rel, buf, PRIV_MAX, len) < 0)
        return -1;
    if (hash)
        *len = s_digest_hex(buf, *len);
    return 0;
}

/*  The monitor's side: answer requests (s_answer) until the child hangs up. It parses
 *  nothing but those: a child that was taken over can read the files a gateway needs, and
 *  no others. */
static int s_monitor(int fd)
{
    static char buf[PRIV_MAX + 1];
    for (;;) {
        char req[64];
        ssize_t n = recv(fd, req, sizeof req - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        req[n] = '\0';
        size_t len = 0;
        buf[0] = strlen(req) == (size_t)n && s_answer(req, buf + 1, &len) == 0 ? '1' : '0';
        if (buf[0] == '0')
            len = 0;
        if (send(fd, buf, len + 1, MSG_NOSIGNAL) < 0 && errno != EINTR)
            break;
    }
    int status = 0;
    while (waitpid(s_child_pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/*  The answer to req (s_answer), from the monitor when there is one, else read here. Into
 *  buf (room for PRIV_MAX + 1): 0 and *len, or -1. */
static int s_priv_ask(const char *req, char *buf, size_t *len)
{
    if (g.monitor_fd < 0)
        return s_answer(req, buf, len);
    if (send(g.monitor_fd, req, strlen(req), MSG_NOSIGNAL) < 0)
        return -1;
    ssize_t n;
    while ((n = recv(g.monitor_fd, buf, PRIV_MAX + 1, 0)) < 0 && errno == EINTR) {
    }
    if (n < 1 || buf[0] != '1')
        return -1;
    *len = (size_t)n - 1;
    memmove(buf, buf + 1, *len);
    return 0;
}

/*  A state file as JSON (new reference), through the monitor or directly. NULL on failure. */
static json_t *s_priv_json(const char *req)
{
    static char buf[PRIV_MAX + 2];
    size_t len = 0;
    if (s_priv_ask(req, buf, &len) < 0)
        return NULL;
    json_t *j = json_loadb(buf, len, 0, NULL);
    sodium_memzero(buf, len);
    return json_is_object(j) ? j : (json_decref(j), NULL);
}

/*  kenneld.json's digest in hex (65 bytes with its NUL); "" when the file cannot be read. */
static void s_priv_digest(char out[65])
{
    static char buf[PRIV_MAX + 2];
    size_t len = 0;
    out[0] = '\0';
    if (s_priv_ask("H", buf, &len) < 0 || len != 64)
        return;
    memcpy(out, buf, 64);
    out[64] = '\0';
}

/* ---------------------------------------------------------------------------------- */
/* ZeroMQ sockets on libwebsockets' poll                                              */

static void s_drain_kern(kern_t *k);
static void s_drain_chan(kern_t *k, int ch);
static void s_drain_mgr(void);

/*  Watch a ZeroMQ socket's descriptor (a dup: libwebsockets closes what it adopted, and the
 *  original is libzmq's). libzmq's descriptor signals an edge, so every handler drains its
 *  socket until a receive finds nothing (the manager's: until ZMQ_EVENTS says no more), and
 *  every send is followed by a drain of that socket. */
static struct lws *s_watch(zsock_t *sock, watch_t *w)
{
    int fd = dup(zsock_fd(sock));
    if (fd < 0)
        return NULL;
    util_set_cloexec(fd, 1);
    lws_sock_file_fd_type u;
    u.filefd = fd;
    struct lws *wsi =
        lws_adopt_descriptor_vhost(g.vh, LWS_ADOPT_RAW_FILE_DESC, u, "kennel-zmq", NULL);
    if (!wsi) {
        close(fd);
        return NULL;
    }
    lws_set_opaque_user_data(wsi, w);
    return wsi;
}

static void s_unwatch(struct lws **wsi_p)
{
    if (!*wsi_p)
        return;
    lws_set_opaque_user_data(*wsi_p, NULL);
    lws_set_timeout(*wsi_p, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
    *wsi_p = NULL;
}

static int s_on_zmq(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
    (void)user;
    (void)in;
    (void)len;
    if (reason == LWS_CALLBACK_RAW_RX_FILE) {
        watch_t *w = lws_get_opaque_user_data(wsi);
        if (w && w->kern)
            s_drain_chan(w->kern, w->channel); /* each socket has its own descriptor */
        else if (w)
            s_drain_mgr();
    }
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Responses                                                                          */

static void s_respond(conn_t *c, int status, const char *ctype, const char *body, size_t len)
{
    if (c->responded)
        return;
    free(c->resp);
    c->resp = malloc(LWS_PRE + len + 1);
    if (!c->resp) {
        len = 0;
        status = 500;
        c->resp = malloc(LWS_PRE + 1);
    }
    if (c->resp && len)
        memcpy(c->resp + LWS_PRE, body, len);
    c->resp_len = c->resp ? len : 0;
    c->status = status;
    c->ctype = ctype;
    c->responded = 1;
    lws_callback_on_writable(c->wsi);
}

static void s_respond_json(conn_t *c, int status, json_t *j /* stolen */)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) {
        s_respond(c, 500, "application/json", "{\"message\":\"out of memory\"}", 27);
        return;
    }
    s_respond(c, status, "application/json", s, strlen(s));
    free(s);
}

/*  201 Created with the new resource's model, and a Location header naming it under
 *  COLLECTION (/api/kernels, /api/sessions), as Jupyter Server answers a POST. */
static void s_respond_created(conn_t *c, const char *collection, json_t *model /* stolen */)
{
    const char *id = json_string_value(json_object_get(model, "id"));
    if (id)
        snprintf(c->location, sizeof c->location, "%s/%s", collection, id);
    s_respond_json(c, 201, model);
}

static void s_respond_error(conn_t *c, int status, const char *message)
{
    s_respond_json(c, status, json_pack("{s:s, s:s}", "message", message, "reason", message));
}

/* ---------------------------------------------------------------------------------- */
/* The manager                                                                        */

static int s_mgr_connect(void)
{
    json_t *info = s_priv_json("M");
    json_t *m = json_object_get(info, "manager");
    const char *ep = json_string_value(json_object_get(m, "endpoint"));
    const char *key = json_string_value(json_object_get(m, "key"));
    if (!ep || !key) {
        LOG_E("cannot read %s/kenneld.json (is kenneld running?)", opt.state_dir);
        json_decref(info);
        return -1;
    }
    if (g.monitor_fd >= 0 && strncmp(ep, "ipc://", 6) == 0) {
        LOG_E("kenneld's manager is %s, in the state directory the unprivileged gateway cannot "
              "enter: start kenneld with --manager tcp://127.0.0.1:PORT",
              ep);
        json_decref(info);
        return -1;
    }
    s_priv_digest(g.mgr_digest);
    s_unwatch(&g.mgr_wsi);
    zsock_destroy(&g.mgr);
    wire_destroy(&g.mgr_wire);
    g.mgr = zsock_new(ZMQ_DEALER);
    g.mgr_wire = wire_new(key, strlen(key), NULL);
    int rc = -1;
    if (g.mgr && g.mgr_wire) {
        zsock_set_linger(g.mgr, 0);
        if (zsock_connect(g.mgr, "%s", ep) == 0) {
            g.mgr_watch.kern = NULL;
            g.mgr_wsi = s_watch(g.mgr, &g.mgr_watch);
            rc = g.mgr_wsi ? 0 : -1;
        }
    }
    json_decref(info);
    return rc;
}

/*  Whether kenneld.json is another than the one the manager socket was made from: a kenneld
 *  that restarted (its new key would leave every call unanswered, and a session it moved
 *  would not be followed). Its digest only, once a second: the serving child is never sent
 *  the key to compare. 0 while there is no kenneld.json. */
static int s_mgr_moved(void)
{
    char now[65];
    s_priv_digest(now);
    return now[0] && strcmp(now, g.mgr_digest) != 0;
}

/*  Send a manager request for conn (may be NULL) of kind, for the Jupyter session jsess (or
 *  NULL); content stolen. 0 or -1. The reply may be handled before this returns (what came
 *  is drained at once): everything its handler needs is in the pending entry by then. */
static int s_mgr_call_for(conn_t *c, mp_kind_t kind, const char *msg_type, json_t *content,
                          const char *jsess)
{
    jmsg_t *m = jmsg_new(msg_type, g.mgr_session);
    if (!m || !g.mgr) {
        json_decref(content);
        jmsg_destroy(&m);
        return -1;
    }
    jmsg_set_json(m, JMSG_CONTENT, content);
    mpend_t *p = calloc(1, sizeof *p);
    zmsg_t *z = wire_encode(g.mgr_wire, m);
    if (!p || !z || zmsg_send(&z, g.mgr) < 0) {
        free(p);
        zmsg_destroy(&z);
        jmsg_destroy(&m);
        return -1;
    }
    snprintf(p->msg_id, sizeof p->msg_id, "%s", jmsg_id(m));
    jmsg_destroy(&m);
    p->kind = kind;
    p->conn = c;
    if (jsess)
        snprintf(p->jsess, sizeof p->jsess, "%s", jsess);
    p->deadline_ms = util_now_ms() + MGR_TIMEOUT_MS;
    if (c) {
        c->pending = p;
        /* libwebsockets' own request timeout must not end the connection before the
         * manager's: the client is owed an answer (a 504 at worst). */
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, MGR_TIMEOUT_MS / 1000 + 5);
    }
    zhashx_insert(g.mpend, p->msg_id, p);
    s_drain_mgr();
    return 0;
}

static int s_mgr_call(conn_t *c, mp_kind_t kind, const char *msg_type, json_t *content)
{
    return s_mgr_call_for(c, kind, msg_type, content, NULL);
}

static int s_mgr_call_session(conn_t *c, mp_kind_t kind, const char *msg_type, const char *id)
{
    return s_mgr_call(c, kind, msg_type, json_pack("{s:s}", "session", id));
}

/*  The tenant a session name belongs to is its prefix before the first '.'. */
static int s_owned(const char *tenant, const char *name)
{
    size_t n = strlen(tenant);
    return name && strncmp(name, tenant, n) == 0 && name[n] == '.';
}

static const char *s_exec_state(const char *kennel_state)
{
    if (!kennel_state)
        return "unknown";
    if (!strcmp(kennel_state, "busy"))
        return "busy";
    if (!strcmp(kennel_state, "starting") || !strcmp(kennel_state, "restoring"))
        return "starting";
    if (!strcmp(kennel_state, "dead") || !strcmp(kennel_state, "ended"))
        return "dead";
    return "idle";
}

/*  A kernel model as Jupyter Server gives it, from a manager INFO. New reference. */
static json_t *s_model(const json_t *info)
{
    const char *id = json_string_value(json_object_get(info, "id"));
    const char *name = json_string_value(json_object_get(info, "name"));
    kern_t *k = id ? zhashx_lookup(g.kerns, id) : NULL;
    const char *dot = name ? strchr(name, '.') : NULL;
    char now[UTIL_ISO_LEN];
    util_iso_now(now);
    return json_pack(
        "{s:s, s:s, s:s, s:s, s:i, s:{s:s, s:s, s:O*, s:O*}}", "id", id ? id : "", "name",
        k && k->spec[0] ? k->spec : "kennel", "last_activity", now, "execution_state",
        s_exec_state(json_string_value(json_object_get(info, "state"))), "connections",
        k ? (int)zlistx_size(k->conns) : 0, "kennel", "session", dot ? dot + 1 : "", "state",
        json_string_value(json_object_get(info, "state"))
            ? json_string_value(json_object_get(info, "state"))
            : "",
        "cells", json_object_get(info, "cells"), "last_outcome",
        json_object_get(info, "last_outcome"));
}

static kern_t *s_kern_get(const char *id, const char *name, const char *tenant);
static void s_attach(conn_t *c, kern_t *k);
static void s_ws_close(conn_t *c, int code, const char *reason);
static void s_kern_destroy(kern_t **k_p);
static int s_kern_send(kern_t *k, int ch, jmsg_t **m_p);
static void s_metrics(conn_t *c, json_t *sessions);
static int s_forward(kern_t *k, gwproto_channel_t ch, jmsg_t **m_p);

static void s_on_jsess_reply(mpend_t *p, conn_t *c, int owned, const json_t *info,
                             const json_t *content);
static json_t *s_jsess_list(const conn_t *c, const json_t *sessions);

static void s_on_mgr_reply(mpend_t *p, jmsg_t *rep)
{
    json_t *content = jmsg_content(rep);
    int ok = content && !strcmp(json_string_value(json_object_get(content, "status")) ?: "", "ok");
    conn_t *c = p->conn;
    if (!c)
        return;
    c->pending = NULL;
    if (c->is_ws) /* back from the manager call's timeout to the idle one */
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, opt.idle_s);
    json_t *info = json_object_get(content, "session");
    const char *name = json_string_value(json_object_get(info, "name"));
    const char *id = json_string_value(json_object_get(info, "id"));
    int owned = ok && s_owned(c->tenant, name) && id;
    switch (p->kind) {
    case MP_SESSIONS:
        if (!ok)
            s_respond_error(c, 503, "kenneld refused the request");
        else
            s_respond_json(c, 200, s_jsess_list(c, json_object_get(content, "sessions")));
        break;
    case MP_LIST: {
        json_t *out = json_array();
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(content, "sessions"), i, s)
        {
            if (s_owned(c->tenant, json_string_value(json_object_get(s, "name"))))
                json_array_append_new(out, s_model(s));
        }
        if (!ok)
            s_respond_error(c, 503, "kenneld refused the request");
        else
            s_respond_json(c, 200, out), out = NULL;
        json_decref(out);
        break;
    }
    case MP_METRICS: s_metrics(c, ok ? json_object_get(content, "sessions") : NULL); break;
    case MP_CREATE:
        if (!owned) {
            const char *e = json_string_value(json_object_get(content, "evalue"));
            s_respond_error(c, 503, e ? e : "kenneld could not create the session");
            break;
        }
        {
            kern_t *k = s_kern_get(id, name, c->tenant);
            if (k && c->body) {
                json_t *b = json_loads(c->body, 0, NULL);
                const char *spec = json_string_value(json_object_get(b, "name"));
                snprintf(k->spec, sizeof k->spec, "%s", spec ? spec : "kennel");
                json_decref(b);
            }
        }
        s_respond_created(c, "/api/kernels", s_model(info));
        break;
    case MP_GET:
        if (!owned)
            s_respond_error(c, 404, "no such kernel");
        else
            s_respond_json(c, 200, s_model(info));
        break;
    case MP_DELETE:
        if (!owned) {
            s_respond_error(c, 404, "no such kernel");
        } else {
            zhashx_delete(g.kerns, id); /* its WebSockets are closed: "kernel ended" */
            if (s_mgr_call_session(c, MP_END, "end_request", id) < 0)
                s_respond_error(c, 503, "kenneld is not reachable");
        }
        break;
    case MP_END:
        if (ok)
            s_respond(c, 204, "application/json", "", 0);
        else
            s_respond_error(c, 404, "no such kernel");
        break;
    case MP_INTERRUPT:
    case MP_RESTART: {
        if (!owned) {
            s_respond_error(c, 404, "no such kernel");
            break;
        }
        kern_t *k = s_kern_get(id, name, c->tenant);
        jmsg_t *m =
            k ? jmsg_new(p->kind == MP_INTERRUPT ? "interrupt_request" : "shutdown_request", k->own)
              : NULL;
        if (m && p->kind == MP_RESTART) {
            jmsg_set_json(m, JMSG_CONTENT, json_pack("{s:b}", "restart", 1));
            snprintf(k->restart_id, sizeof k->restart_id, "%s", jmsg_id(m));
        }
        if (m && p->kind == MP_RESTART) {
            /* Before the send: sending drains the kernel's sockets, and the reply may be in. */
            k->restart_conn = c;
            c->kern = k;
        }
        if (!m || s_kern_send(k, GWPROTO_CONTROL, &m) < 0) {
            if (k && k->restart_conn == c) {
                k->restart_conn = NULL;
                c->kern = NULL;
            }
            s_respond_error(c, 503, "the kernel is not reachable");
            break;
        }
        if (p->kind == MP_INTERRUPT)
            s_respond(c, 204, "application/json", "", 0);
        break;
    }
    case MP_ATTACH:
        if (!owned) {
            s_ws_close(c, LWS_CLOSE_STATUS_POLICY_VIOLATION, "no such kernel");
            break;
        }
        {
            kern_t *k = s_kern_get(id, name, c->tenant);
            if (!k)
                s_ws_close(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "the kernel is not reachable");
            else
                s_attach(c, k);
        }
        break;
    default: s_on_jsess_reply(p, c, owned, info, content); break;
    }
}

static void s_mgr_fail(mpend_t *p)
{
    conn_t *c = p->conn;
    if (!c)
        return;
    c->pending = NULL;
    if (c->is_ws)
        s_ws_close(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "kenneld did not answer");
    else
        s_respond_error(c, 504, "kenneld did not answer");
}

static void s_drain_mgr(void)
{
    while (g.mgr && (zsock_events(g.mgr) & ZMQ_POLLIN)) {
        zmsg_t *z = zmsg_recv(g.mgr);
        if (!z)
            break;
        jmsg_t *rep = NULL;
        if (wire_decode(g.mgr_wire, &z, &rep) < 0)
            continue;
        json_t *parent = jmsg_json(rep, JMSG_PARENT);
        const char *pid = json_string_value(json_object_get(parent, "msg_id"));
        mpend_t *p = pid ? zhashx_lookup(g.mpend, pid) : NULL;
        if (p) {
            char id[40];
            snprintf(id, sizeof id, "%s", p->msg_id); /* the key must outlive the item */
            s_on_mgr_reply(p, rep);
            zhashx_delete(g.mpend, id);
        }
        jmsg_destroy(&rep);
    }
}

/* ---------------------------------------------------------------------------------- */
/* Jupyter sessions: /api/sessions, a table of path -> kernel per tenant                */

static void s_jsess_destroy(jsess_t **s_p)
{
    jsess_t *s = *s_p;
    if (!s)
        return;
    free(s->path);
    free(s->name);
    free(s->type);
    free(s);
    *s_p = NULL;
}

/*  zhashx's destructor for g.jsess. */
static void s_jsess_free(void **item)
{
    s_jsess_destroy((jsess_t **)item);
}

static void s_jsess_drop(jsess_t *s)
{
    char key[40];
    snprintf(key, sizeof key, "%s", s->id); /* the key must outlive the item */
    zhashx_delete(g.jsess, key);
}

static jsess_t *s_jsess_get(const char *tenant, const char *id)
{
    jsess_t *s = zhashx_lookup(g.jsess, id);
    return s && !strcmp(s->tenant, tenant) ? s : NULL;
}

static jsess_t *s_jsess_by_path(const char *tenant, const char *path)
{
    for (jsess_t *s = zhashx_first(g.jsess); s; s = zhashx_next(g.jsess))
        if (!strcmp(s->tenant, tenant) && !strcmp(s->path, path))
            return s;
    return NULL;
}

/*  1 when some entry of tenant has kernel (a kernel listed through one is not listed again
 *  as a session of its own). */
static int s_jsess_has_kernel(const char *tenant, const char *kernel)
{
    for (jsess_t *s = zhashx_first(g.jsess); s; s = zhashx_next(g.jsess))
        if (!strcmp(s->tenant, tenant) && !strcmp(s->kernel, kernel))
            return 1;
    return 0;
}

static size_t s_jsess_count(const char *tenant)
{
    size_t n = 0;
    for (jsess_t *s = zhashx_first(g.jsess); s; s = zhashx_next(g.jsess))
        n += !strcmp(s->tenant, tenant);
    return n;
}

/*  Forget tenant's entries whose kernel is kernel (it ended) or, with keep, whose kernel is
 *  not a key of keep (the kernels kenneld still has). */
static void s_jsess_forget(const char *tenant, const char *kernel, const json_t *keep)
{
    zlistx_t *gone = zlistx_new();
    for (jsess_t *s = zhashx_first(g.jsess); s; s = zhashx_next(g.jsess))
        if (!strcmp(s->tenant, tenant) &&
            (kernel ? !strcmp(s->kernel, kernel) : !json_object_get(keep, s->kernel)))
            zlistx_add_end(gone, s->id);
    for (const char *id = zlistx_first(gone); id; id = zlistx_next(gone)) {
        char key[40];
        snprintf(key, sizeof key, "%s", id); /* the key must outlive the item */
        zhashx_delete(g.jsess, key);
    }
    zlistx_destroy(&gone);
}

/*  A Jupyter session model: {id, path, name, type, kernel} with kernel the kernel model
 *  from a manager INFO. New reference. */
static json_t *s_jsess_model(const char *id, const char *path, const char *name,
                             const char *type, const char *spec, const json_t *info)
{
    json_t *k = s_model(info);
    if (spec && spec[0])
        json_object_set_new(k, "name", json_string(spec));
    return json_pack("{s:s, s:s, s:s?, s:s, s:o}", "id", id, "path", path, "name", name, "type",
                     type, "kernel", k);
}

/*  A kernel without an entry, as a session: its id is the kernel's, its path and name the
 *  kennel session's name (without the tenant), as GET /api/sessions always listed them. */
static json_t *s_jsess_model_bare(const json_t *info)
{
    const char *nm = json_string_value(json_object_get(info, "name"));
    const char *dot = nm ? strchr(nm, '.') : NULL;
    const char *id = json_string_value(json_object_get(info, "id"));
    return s_jsess_model(id ? id : "", dot ? dot + 1 : "", dot ? dot + 1 : "", "notebook", NULL,
                         info);
}

static json_t *s_jsess_model_of(const jsess_t *s, const json_t *info)
{
    return s_jsess_model(s->id, s->path, s->name, s->type, s->spec, info);
}

/*  A POST or PATCH body, checked. Fields are NULL when absent (or null). */
typedef struct {
    json_t *json; /* owned */
    const char *path, *name, *type, *kernel_id, *kernel_name;
    int has_name; /* name was given, possibly as null */
} sbody_t;

/*  One optional string field; -1 when it is of another type or too long. */
static int s_sbody_str(json_t *obj, const char *key, const char **out)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v) || json_string_length(v) > MAX_JSESSION_FIELD ||
        strlen(json_string_value(v)) != json_string_length(v))
        return -1;
    *out = json_string_value(v);
    return 0;
}

/*  Parse and check c's body for POST (path and type required) or PATCH. NULL when good,
 *  else the message of a 400 (501 for a kernelspec that is not served: *status says). */
static const char *s_sbody_parse(const conn_t *c, int is_post, sbody_t *b, int *status)
{
    memset(b, 0, sizeof *b);
    *status = 400;
    b->json = c->body_len ? json_loadb(c->body, c->body_len, 0, NULL) : NULL;
    if (!json_is_object(b->json))
        return "the body is not a JSON object";
    json_t *kernel = json_object_get(b->json, "kernel");
    if (s_sbody_str(b->json, "path", &b->path) < 0)
        return "path: a string of at most 4096 bytes";
    if (s_sbody_str(b->json, "type", &b->type) < 0)
        return "type: a string of at most 4096 bytes";
    if (s_sbody_str(b->json, "name", &b->name) < 0)
        return "name: a string of at most 4096 bytes";
    b->has_name = json_object_get(b->json, "name") != NULL;
    if (kernel && !json_is_null(kernel) && !json_is_object(kernel))
        return "kernel: an object with a name or an id";
    if (s_sbody_str(kernel, "id", &b->kernel_id) < 0 ||
        s_sbody_str(kernel, "name", &b->kernel_name) < 0)
        return "kernel: an object with a name or an id";
    if (is_post && !b->path)
        return "Missing field in JSON data: path";
    if (is_post && !b->type)
        return "Missing field in JSON data: type";
    if (b->kernel_id && !gwproto_is_uuid(b->kernel_id))
        return "No such kernel";
    if (!b->kernel_id && b->kernel_name && strcmp(b->kernel_name, "kennel") &&
        strcmp(b->kernel_name, "python3")) {
        *status = 501; /* as Jupyter Server answers a kernel it does not have */
        return "no such kernel spec";
    }
    return NULL;
}

static int s_sbody_error(conn_t *c, sbody_t *b, int is_post)
{
    int status;
    const char *err = s_sbody_parse(c, is_post, b, &status);
    if (err) {
        s_respond_error(c, status, err);
        json_decref(b->json);
        b->json = NULL;
        return -1;
    }
    return 0;
}

/*  A sessions call to the manager: an info_request about kernel, or (kernel NULL) a
 *  create_request of name; p->jsess is jsess_id. */
static void s_jsess_call(conn_t *c, mp_kind_t kind, const char *jsess_id, const char *kernel,
                         const char *name)
{
    int rc = kernel ? s_mgr_call_for(c, kind, "info_request",
                                     json_pack("{s:s}", "session", kernel), jsess_id)
                    : s_mgr_call_for(c, kind, "create_request",
                                     json_pack("{s:s}", "name", name), jsess_id);
    if (rc < 0)
        s_respond_error(c, 503, "kenneld is not reachable");
}

/*  POST /api/sessions: the path's session if the tenant has one whose kernel is there, else
 *  a new one, on kernel.id or on the kennel session the path names. */
static void s_jsess_post(conn_t *c)
{
    sbody_t b;
    if (s_sbody_error(c, &b, 1) < 0)
        return;
    jsess_t *s = s_jsess_by_path(c->tenant, b.path);
    if (s) {
        s_jsess_call(c, MP_SPOST_HAVE, s->id, s->kernel, NULL);
    } else if (s_jsess_count(c->tenant) >= MAX_JSESSIONS) {
        s_respond_error(c, 503, "too many sessions");
    } else if (b.kernel_id) {
        s_jsess_call(c, MP_SPOST_KID, NULL, b.kernel_id, NULL);
    } else {
        char n[GWPROTO_PATH_NAME_MAX + 1], name[160];
        gwproto_path_session_name(b.path, strlen(b.path), n);
        snprintf(name, sizeof name, "%s.%s", c->tenant, n);
        s_jsess_call(c, MP_SPOST_NEW, NULL, NULL, name);
    }
    json_decref(b.json);
}

static jsess_t *s_jsess_new(const conn_t *c, const sbody_t *b, const char *kernel)
{
    jsess_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    util_uuid(s->id);
    snprintf(s->tenant, sizeof s->tenant, "%s", c->tenant);
    snprintf(s->kernel, sizeof s->kernel, "%s", kernel);
    snprintf(s->spec, sizeof s->spec, "%s", b->kernel_id ? "" : b->kernel_name ?: "");
    s->path = strdup(b->path);
    s->type = strdup(b->type);
    s->name = b->name ? strdup(b->name) : NULL;
    if (!s->path || !s->type || (b->name && !s->name)) {
        s_jsess_destroy(&s);
        return NULL;
    }
    zhashx_insert(g.jsess, s->id, s);
    return s;
}

/*  Apply a PATCH body's path, name and type to s, and its kernel (when not NULL). */
static int s_jsess_apply(jsess_t *s, const sbody_t *b, const char *kernel, const char *spec)
{
    char *path = b->path ? strdup(b->path) : NULL, *type = b->type ? strdup(b->type) : NULL;
    char *name = b->name ? strdup(b->name) : NULL;
    if ((b->path && !path) || (b->type && !type) || (b->name && !name)) {
        free(path);
        free(type);
        free(name);
        return -1;
    }
    if (path)
        free(s->path), s->path = path;
    if (type)
        free(s->type), s->type = type;
    if (b->has_name)
        free(s->name), s->name = name;
    if (kernel) {
        snprintf(s->kernel, sizeof s->kernel, "%s", kernel);
        snprintf(s->spec, sizeof s->spec, "%s", spec ? spec : "");
    }
    return 0;
}

/*  PATCH once s is an entry: to kernel.id, to a fresh kernel of kernel.name, or the path,
 *  name and type only. */
static void s_jsess_patch(conn_t *c, jsess_t *s)
{
    sbody_t b;
    if (s_sbody_error(c, &b, 0) < 0)
        return;
    if (b.kernel_id && strcmp(b.kernel_id, s->kernel)) {
        s_jsess_call(c, MP_SPATCH_KID, s->id, b.kernel_id, NULL);
    } else if (!b.kernel_id && b.kernel_name) {
        /* Jupyter Server starts a new kernel for the session, and ends the old one. */
        char u[40], name[160];
        util_uuid(u);
        snprintf(name, sizeof name, "%s.k-%.8s%.4s", c->tenant, u, u + 9);
        s_jsess_call(c, MP_SPATCH_NEW, s->id, NULL, name);
    } else {
        s_jsess_call(c, MP_SPATCH_INFO, s->id, s->kernel, NULL);
    }
    json_decref(b.json);
}

static void s_jsess_dispatch(conn_t *c, const char *id)
{
    jsess_t *s = s_jsess_get(c->tenant, id);
    /* Without an entry, id may be a kernel's that GET /api/sessions listed on its own. */
    const char *kernel = s ? s->kernel : s_jsess_has_kernel(c->tenant, id) ? NULL : id;
    if (!kernel)
        return s_respond_error(c, 404, "no such session");
    if (c->method == 'G' || c->method == 'D')
        return s_jsess_call(c, c->method == 'G' ? MP_SGET : MP_SDELETE, s ? s->id : NULL, kernel,
                            NULL);
    if (c->method == 'A') {
        sbody_t b;
        if (s_sbody_error(c, &b, 0) < 0)
            return;
        json_decref(b.json);
        if (s)
            s_jsess_patch(c, s);
        else
            s_jsess_call(c, MP_SPATCH_OLD, NULL, kernel, NULL);
        return;
    }
    s_respond_error(c, 405, "method not allowed");
}

/*  End a kernel a session no longer uses (PATCH to another), as Jupyter Server does. */
static void s_jsess_end_kernel(const char *tenant, const char *kernel)
{
    char id[40];
    snprintf(id, sizeof id, "%s", kernel);
    if (s_jsess_has_kernel(tenant, id))
        return; /* another session of the tenant still uses it */
    zhashx_delete(g.kerns, id);
    s_mgr_call_session(NULL, MP_END, "end_request", id);
}

/*  A manager reply to a sessions call. info: the session kenneld answered about, owned: it
 *  is there and c's tenant's. */
static void s_on_jsess_reply(mpend_t *p, conn_t *c, int owned, const json_t *info,
                             const json_t *content)
{
    const char *kid = json_string_value(json_object_get(info, "id"));
    jsess_t *s = p->jsess[0] ? s_jsess_get(c->tenant, p->jsess) : NULL;
    if (p->jsess[0] && !s)
        return s_respond_error(c, 404, "no such session"); /* deleted meanwhile */
    sbody_t b = {0};
    int status;
    if (p->kind == MP_SPOST_HAVE || p->kind == MP_SPOST_KID || p->kind == MP_SPOST_NEW ||
        p->kind >= MP_SPATCH_KID) {
        if (s_sbody_parse(c, p->kind <= MP_SPOST_NEW, &b, &status)) {
            json_decref(b.json);
            return s_respond_error(c, 500, "the body changed"); /* not reached */
        }
    }
    switch (p->kind) {
    case MP_SPOST_HAVE:
        if (owned) {
            s_respond_created(c, "/api/sessions", s_jsess_model_of(s, info));
        } else { /* its kernel ended: the path gets a new session */
            s_jsess_drop(s);
            s_jsess_post(c);
        }
        break;
    case MP_SPOST_KID:
    case MP_SPOST_NEW:
        if (!owned && p->kind == MP_SPOST_KID) {
            s_respond_error(c, 400, "No such kernel");
        } else if (!owned) {
            const char *e = json_string_value(json_object_get(content, "evalue"));
            s_respond_error(c, 503, e ? e : "kenneld could not create the session");
        } else if (!(s = s_jsess_by_path(c->tenant, b.path) ?: s_jsess_new(c, &b, kid))) {
            s_respond_error(c, 500, "out of memory");
        } else {
            s_respond_created(c, "/api/sessions", s_jsess_model_of(s, info));
        }
        break;
    case MP_SGET:
        if (owned)
            s_respond_json(c, 200, s ? s_jsess_model_of(s, info) : s_jsess_model_bare(info));
        else {
            if (s)
                s_jsess_drop(s);
            s_respond_error(c, 404, "no such session");
        }
        break;
    case MP_SDELETE:
        if (!owned) {
            if (s)
                s_jsess_drop(s);
            s_respond_error(c, 404, "no such session");
            break;
        }
        s_jsess_forget(c->tenant, kid, NULL);
        zhashx_delete(g.kerns, kid); /* its WebSockets are closed: "kernel ended" */
        if (s_mgr_call_session(c, MP_END, "end_request", kid) < 0)
            s_respond_error(c, 503, "kenneld is not reachable");
        break;
    case MP_SPATCH_OLD:
        if (!owned) {
            s_respond_error(c, 404, "no such session");
        } else {
            /* The bare kernel becomes an entry, under its own id, then the PATCH goes on. */
            json_t *bare = s_jsess_model_bare(info);
            sbody_t nb = {.path = json_string_value(json_object_get(bare, "path")),
                          .name = json_string_value(json_object_get(bare, "name")),
                          .type = "notebook"};
            s = s_jsess_count(c->tenant) < MAX_JSESSIONS ? s_jsess_new(c, &nb, kid) : NULL;
            json_decref(bare);
            if (!s) {
                s_respond_error(c, 503, "too many sessions");
                break;
            }
            zhashx_rename(g.jsess, s->id, kid);
            snprintf(s->id, sizeof s->id, "%s", kid);
            s_jsess_patch(c, s);
        }
        break;
    case MP_SPATCH_KID:
    case MP_SPATCH_NEW:
        if (!owned) {
            const char *e = json_string_value(json_object_get(content, "evalue"));
            if (p->kind == MP_SPATCH_KID)
                s_respond_error(c, 400, "No such kernel");
            else
                s_respond_error(c, 503, e ? e : "kenneld could not create the session");
            break;
        }
        {
            char old[40];
            snprintf(old, sizeof old, "%s", s->kernel);
            if (s_jsess_apply(s, &b, kid, p->kind == MP_SPATCH_NEW ? b.kernel_name : NULL) < 0) {
                s_respond_error(c, 500, "out of memory");
                break;
            }
            s_respond_json(c, 200, s_jsess_model_of(s, info));
            s_jsess_end_kernel(c->tenant, old);
        }
        break;
    case MP_SPATCH_INFO:
        if (!owned) {
            s_jsess_drop(s);
            s_respond_error(c, 404, "no such session");
        } else if (s_jsess_apply(s, &b, NULL, NULL) < 0) {
            s_respond_error(c, 500, "out of memory");
        } else {
            s_respond_json(c, 200, s_jsess_model_of(s, info));
        }
        break;
    default: break;
    }
    json_decref(b.json);
}

/*  GET /api/sessions: the tenant's entries whose kernels kenneld still has (the others are
 *  forgotten), then its kernels without an entry, each as a session of its own. */
static json_t *s_jsess_list(const conn_t *c, const json_t *sessions)
{
    json_t *out = json_array(), *live = json_object();
    size_t i;
    json_t *info;
    json_array_foreach(sessions, i, info)
    {
        const char *id = json_string_value(json_object_get(info, "id"));
        if (id && s_owned(c->tenant, json_string_value(json_object_get(info, "name"))))
            json_object_set(live, id, info);
    }
    s_jsess_forget(c->tenant, NULL, live);
    for (jsess_t *s = zhashx_first(g.jsess); s; s = zhashx_next(g.jsess))
        if (!strcmp(s->tenant, c->tenant))
            json_array_append_new(out, s_jsess_model_of(s, json_object_get(live, s->kernel)));
    const char *id;
    json_object_foreach(live, id, info)
    {
        if (!s_jsess_has_kernel(c->tenant, id))
            json_array_append_new(out, s_jsess_model_bare(info));
    }
    json_decref(live);
    return out;
}

/* ---------------------------------------------------------------------------------- */
/* Kernels: one Jupyter client (shell, control, stdin DEALERs, an iopub SUB) per kennel   */
/* session a WebSocket or a REST call needs, shared by all of that session's WebSockets.  */

static const char *s_kern_ports[GWPROTO_NCHANNELS] = {"shell_port", "control_port",
                                                       "stdin_port", "iopub_port"};

/*  Socket i's endpoint from a session's connection file (transport and ip checked). */
static void s_kern_endpoint(const json_t *conn, int i, char *ep, size_t len)
{
    const char *transport = json_string_value(json_object_get(conn, "transport"));
    const char *ip = json_string_value(json_object_get(conn, "ip"));
    int port = (int)json_integer_value(json_object_get(conn, s_kern_ports[i]));
    if (strcmp(transport, "ipc") == 0)
        snprintf(ep, len, "ipc://%s-%d", ip, port);
    else
        snprintf(ep, len, "tcp://%s:%d", ip, port);
}

/*  A kenneld that restarted serves a session on new ports when one of its own was taken
 *  meanwhile: connect k's sockets where its connection file says now. 0, or -1 when the file
 *  cannot be read or a socket not connected (the sweep tries again). */
static int s_kern_follow(kern_t *k)
{
    char req[64];
    snprintf(req, sizeof req, "C%s", k->id);
    json_t *conn = s_priv_json(req);
    const char *transport = json_string_value(json_object_get(conn, "transport"));
    int rc = -1;
    if (json_string_value(json_object_get(conn, "ip")) && transport &&
        (g.monitor_fd < 0 || strcmp(transport, "tcp") == 0)) {
        rc = 0;
        for (int i = 0; i < GWPROTO_NCHANNELS; i++) {
            char ep[sizeof k->ep[i]];
            s_kern_endpoint(conn, i, ep, sizeof ep);
            if (strcmp(ep, k->ep[i]) == 0)
                continue;
            LOG_I("session=%s: its %s moved (%s -> %s); following", k->id, s_kern_ports[i],
                  k->ep[i], ep);
            if (i == GWPROTO_SHELL && k->queued > 0) {
                /* Sent to the old port while kenneld restarted: gone with its connection. */
                LOG_W("session=%s: %d execute requests sent before the move are lost", k->id,
                      k->queued);
                k->queued = 0;
            }
            /* The new endpoint first: a DEALER without any would block the next send. */
            if (zsock_connect(k->sock[i], "%s", ep) < 0) {
                LOG_W("session=%s: cannot connect to %s", k->id, ep);
                rc = -1;
                continue;
            }
            (void)zsock_disconnect(k->sock[i], "%s", k->ep[i]);
            snprintf(k->ep[i], sizeof k->ep[i], "%s", ep);
        }
    }
    json_decref(conn);
    return rc;
}

static kern_t *s_kern_get(const char *id, const char *name, const char *tenant)
{
    kern_t *k = zhashx_lookup(g.kerns, id);
    if (k)
        return strcmp(k->tenant, tenant) == 0 ? k : NULL;
    char req[64];
    snprintf(req, sizeof req, "C%s", id);
    json_t *conn = s_priv_json(req);
    const char *transport = json_string_value(json_object_get(conn, "transport"));
    const char *ip = json_string_value(json_object_get(conn, "ip"));
    const char *key = json_string_value(json_object_get(conn, "key"));
    if (!transport || !ip || !key || (g.monitor_fd >= 0 && strcmp(transport, "tcp") != 0)) {
        LOG_W("session=%s: no usable connection file (kenneld --transport tcp is needed "
              "when the gateway drops privileges)",
              id);
        json_decref(conn);
        return NULL;
    }
    k = calloc(1, sizeof *k);
    if (!k)
        goto fail;
    snprintf(k->id, sizeof k->id, "%s", id);
    snprintf(k->name, sizeof k->name, "%s", name);
    snprintf(k->tenant, sizeof k->tenant, "%s", tenant);
    snprintf(k->state, sizeof k->state, "unknown");
    util_uuid(k->own);
    k->conns = zlistx_new();
    k->replay = zhashx_new();
    wire_limits_t lim;
    wire_limits_default(&lim);
    lim.max_msg_bytes = (1u << 30);
    /* The gateway reads a kernel's header, two strings of its parent (s_parent_str) and the
     * content of two kinds of message (s_content_str); the rest goes to WebSockets as the
     * bytes that came. Parsing all four parts with jansson was two thirds of its
     * instructions a cell. */
    lim.raw_parts = (1u << JMSG_PARENT) | (1u << JMSG_METADATA) | (1u << JMSG_CONTENT);
    k->wire = wire_new(key, strlen(key), &lim);
    if (!k->conns || !k->replay || !k->wire)
        goto fail;
    for (int i = 0; i < GWPROTO_NCHANNELS; i++) {
        k->sock[i] = zsock_new(i == GWPROTO_IOPUB ? ZMQ_SUB : ZMQ_DEALER);
        if (!k->sock[i])
            goto fail;
        zsock_set_linger(k->sock[i], 0);
        zsock_set_rcvtimeo(k->sock[i], 0); /* s_drain_chan */
        if (i == GWPROTO_IOPUB)
            zsock_set_subscribe(k->sock[i], "");
        else
            zsock_set_identity(k->sock[i], k->own);
        s_kern_endpoint(conn, i, k->ep[i], sizeof k->ep[i]);
        int rc = zsock_connect(k->sock[i], "%s", k->ep[i]);
        k->watch[i].kern = k;
        k->watch[i].channel = i;
        if (rc < 0 || !(k->watch_wsi[i] = s_watch(k->sock[i], &k->watch[i])))
            goto fail;
    }
    json_decref(conn);
    zhashx_insert(g.kerns, k->id, k);
    return k;
fail:
    json_decref(conn);
    s_kern_destroy(&k);
    return NULL;
}

static void s_kern_destroy(kern_t **k_p)
{
    kern_t *k = *k_p;
    if (!k)
        return;
    if (k->conns) {
        for (conn_t *c = zlistx_first(k->conns); c; c = zlistx_next(k->conns)) {
            c->kern = NULL;
            s_ws_close(c, LWS_CLOSE_STATUS_GOINGAWAY, "kernel ended");
        }
        zlistx_destroy(&k->conns);
    }
    if (k->restart_conn) {
        k->restart_conn->kern = NULL;
        s_respond_error(k->restart_conn, 404, "kernel ended");
    }
    if (k->replay) {
        for (gwqueue_t *q = zhashx_first(k->replay); q; q = zhashx_next(k->replay)) {
            gwqueue_clear(q);
            free(q);
        }
        zhashx_destroy(&k->replay);
    }
    for (int i = 0; i < GWPROTO_NCHANNELS; i++) {
        s_unwatch(&k->watch_wsi[i]);
        zsock_destroy(&k->sock[i]);
    }
    wire_destroy(&k->wire);
    free(k);
    *k_p = NULL;
}

/*  zhashx's destructor for plain malloc'd items (it is handed the item's address). */
static void s_free_item(void **item)
{
    free(*item);
    *item = NULL;
}

/*  zhashx's destructor for g.kerns. */
static void s_kern_free(void **item)
{
    s_kern_destroy((kern_t **)item);
}

static int s_kern_send(kern_t *k, int ch, jmsg_t **m_p)
{
    zmsg_t *z = wire_encode(k->wire, *m_p);
    jmsg_destroy(m_p);
    int rc = z && zmsg_send(&z, k->sock[ch]) == 0 ? 0 : -1;
    zmsg_destroy(&z);
    s_drain_chan(k, ch); /* a send may take that socket's wake-up: only that one's */
    return rc;
}

/*  Ask the kernel for kernel_info until iopub delivers: a SUB that just connected misses
 *  what is published before its subscription reaches kenneld (Jupyter Server's "nudge"). */
static void s_nudge(kern_t *k)
{
    k->nudged_ms = util_now_ms();
    jmsg_t *m = jmsg_new("kernel_info_request", k->own);
    if (m)
        s_kern_send(k, GWPROTO_SHELL, &m);
}

static void s_ws_queue(conn_t *c, gwproto_channel_t ch, const jmsg_t *m)
{
    if (!c->wsi || c->close_code)
        return;
    unsigned char *buf;
    size_t len;
    int bin;
    if (gwproto_encode(c->mode, ch, m, LWS_PRE, &buf, &len, &bin) < 0)
        return;
    gwqueue_push_frame(&c->out, buf, len, bin);
    if (c->out.bytes > opt.max_pending) {
        /* A client that reads slower than its kernel writes is dropped, not buffered without
         * end; what follows is kept for its return like any dropped client's. */
        s_ws_close(c, LWS_CLOSE_STATUS_POLICY_VIOLATION, "client too slow");
        return;
    }
    lws_callback_on_writable(c->wsi);
}

static size_t s_msg_bytes(const jmsg_t *m)
{
    size_t total = 0, n;
    for (int i = 0; i < JMSG_NPARTS; i++)
        if (jmsg_raw(m, (jmsg_part_t)i, &n))
            total += n;
    zmsg_t *b = jmsg_buffers(m);
    return total + (b ? zmsg_content_size(b) : 0);
}

/*  Keep a copy of m for each dropped client it concerns: iopub for all, a reply for the one
 *  it answers. */
static void s_replay_keep(kern_t *k, const jmsg_t *m, gwproto_channel_t ch, const char *psess)
{
    for (gwqueue_t *q = zhashx_first(k->replay); q; q = zhashx_next(k->replay)) {
        const char *key = zhashx_cursor(k->replay);
        if (ch != GWPROTO_IOPUB && (!psess || strcmp(psess, key) != 0))
            continue;
        jmsg_t *copy = jmsg_new_empty();
        if (!copy)
            continue;
        int ok = 1;
        for (int i = 0; i < JMSG_NPARTS && ok; i++) {
            size_t n;
            const void *raw = jmsg_raw(m, (jmsg_part_t)i, &n);
            ok = raw ? jmsg_set_raw_unparsed(copy, (jmsg_part_t)i, raw, n) == 0 : 1;
        }
        zmsg_t *b = jmsg_buffers(m);
        for (zframe_t *f = b ? zmsg_first(b) : NULL; f && ok; f = zmsg_next(b))
            ok = zmsg_addmem(jmsg_buffers(copy), zframe_data(f), zframe_size(f)) == 0;
        if (!ok) {
            jmsg_destroy(&copy);
            continue;
        }
        gwqueue_push_msg(q, &copy, ch, s_msg_bytes(m));
        size_t before = q->dropped;
        gwqueue_trim(q, opt.replay_bytes);
        g.replay_dropped += q->dropped - before;
    }
}

/*  Send a client's message on to its kernel, timing execute requests for the metrics. */
static int s_forward(kern_t *k, gwproto_channel_t ch, jmsg_t **m_p)
{
    if (ch == GWPROTO_SHELL && !strcmp(jmsg_type(*m_p), "execute_request") &&
        zhashx_size(g.exec_start) < 100000) {
        long long *t0 = malloc(sizeof *t0);
        if (t0) {
            *t0 = lws_now_usecs();
            zhashx_update(g.exec_start, jmsg_id(*m_p), t0);
        }
        k->queued++;
    }
    return s_kern_send(k, ch, m_p);
}

/*  The string member key of m's content, which wire kept unparsed, into out ("" when there
 *  is none). Only the short members of a large content are parsed (jmsg_set_raw). */
static void s_content_str(const jmsg_t *m, const char *key, char *out, size_t out_len)
{
    size_t n;
    const void *raw = jmsg_raw(m, JMSG_CONTENT, &n);
    jmsg_t *tmp = raw ? jmsg_new_empty() : NULL;
    const char *v = tmp && jmsg_set_raw(tmp, JMSG_CONTENT, raw, n) == 0
                        ? jmsg_cstr(json_object_get(jmsg_content(tmp), key))
                        : NULL;
    snprintf(out, out_len, "%s", v ? v : "");
    jmsg_destroy(&tmp);
}

typedef struct {
    const char *data;
    const char *key; /* with its quotes */
    size_t key_len;
    char *out;
    size_t out_len;
    int found;
} member_find_t;

static int s_member_find(void *arg, size_t key_at, size_t key_len, size_t value_at,
                         size_t value_len)
{
    member_find_t *f = arg;
    if (key_len != f->key_len || memcmp(f->data + key_at, f->key, key_len) != 0)
        return 0;
    /* The last member of a key stands, as in jansson's parse. */
    const char *v = f->data + value_at;
    f->found = 0;
    if (value_len >= 2 && v[0] == '"' && !memchr(v, '\\', value_len) &&
        value_len - 2 < f->out_len) {
        memcpy(f->out, v + 1, value_len - 2); /* no escapes: the bytes are the string */
        f->out[value_len - 2] = '\0';
        f->found = 1;
    } else if (value_len >= 2 && v[0] == '"') {
        json_t *s = json_loadb(v, value_len, JSON_DECODE_ANY | JMSG_JSON_LOAD_FLAGS, NULL);
        const char *c = jmsg_cstr(s);
        if (c && strlen(c) < f->out_len) {
            memcpy(f->out, c, strlen(c) + 1);
            f->found = 1;
        }
        json_decref(s);
    }
    return 0;
}

/*  The string member key of m's parent header, which wire kept unparsed, into out: out, or
 *  NULL when there is none (or it holds a NUL, or is out_len bytes or more). A walk of the
 *  bytes (jvalid) rather than a jansson parse of the whole part, ~10x the instructions. */
static const char *s_parent_str(const jmsg_t *m, const char *key, char *out, size_t out_len)
{
    size_t n, values;
    char quoted[32];
    member_find_t f = {jmsg_raw(m, JMSG_PARENT, &n), quoted, 0, out, out_len, 0};
    f.key_len = (size_t)snprintf(quoted, sizeof quoted, "\"%s\"", key);
    if (!f.data || jvalid_members(f.data, n, &values, s_member_find, &f, JVALID_UTF8_CHECKED) < 0)
        return NULL;
    return f.found ? out : NULL;
}

static void s_on_kernel_msg(kern_t *k, gwproto_channel_t ch, jmsg_t *m)
{
    char psess_buf[256], pid_buf[256];
    const char *psess = s_parent_str(m, "session", psess_buf, sizeof psess_buf);
    const char *pid = s_parent_str(m, "msg_id", pid_buf, sizeof pid_buf);
    const char *type = jmsg_type(m);
    if (ch == GWPROTO_IOPUB && !k->ready) {
        k->ready = 1;
        for (conn_t *c = zlistx_first(k->conns); c; c = zlistx_next(k->conns)) {
            gwqueue_item_t *it;
            while ((it = gwqueue_pop(&c->held))) {
                s_forward(k, it->channel, &it->msg);
                gwqueue_item_free(&it);
            }
        }
    }
    if (ch == GWPROTO_IOPUB && !strcmp(type, "status")) {
        char st[16];
        s_content_str(m, "execution_state", st, sizeof st);
        if (st[0])
            snprintf(k->state, sizeof k->state, "%s", st);
    }
    if (psess && !strcmp(psess, k->own)) {
        /* The gateway's own requests: the nudge, and a REST restart's reply. */
        if (ch == GWPROTO_CONTROL && pid && !strcmp(pid, k->restart_id) && k->restart_conn) {
            conn_t *c = k->restart_conn;
            k->restart_conn = NULL;
            c->kern = NULL;
            json_t *info =
                json_pack("{s:s, s:s, s:s}", "id", k->id, "name", k->name, "state", "idle");
            s_respond_json(c, 200, s_model(info));
            json_decref(info);
        }
        return;
    }
    if (ch == GWPROTO_SHELL && !strcmp(type, "execute_reply")) {
        char st[16];
        s_content_str(m, "status", st, sizeof st);
        if (!strcmp(st, "ok"))
            g.cells_ok++;
        else if (!strcmp(st, "aborted"))
            g.cells_aborted++;
        else
            g.cells_error++;
        if (k->queued > 0)
            k->queued--;
        long long *t0 = pid ? zhashx_lookup(g.exec_start, pid) : NULL;
        if (t0) {
            double s = (double)(lws_now_usecs() - *t0) / 1e6;
            g.rtt_count++;
            g.rtt_sum_s += s;
            for (int i = 0; i < 12; i++)
                if (s <= s_rtt_le[i])
                    g.rtt_buckets[i]++;
            zhashx_delete(g.exec_start, pid);
        }
    }
    for (conn_t *c = zlistx_first(k->conns); c; c = zlistx_next(k->conns))
        if (ch == GWPROTO_IOPUB || (psess && !strcmp(psess, c->session_id)))
            s_ws_queue(c, ch, m);
    s_replay_keep(k, m, ch, psess);
}

/*  Receive what channel ch of k has, until none is left. A kernel's sockets have a receive
 *  timeout of 0: the receive that finds nothing is the check (one look at libzmq's mailbox:
 *  a poll and a getpid), where a ZMQ_EVENTS before every message made it one more each. */
static void s_drain_chan(kern_t *k, int ch)
{
    zmsg_t *z;
    while (k->sock[ch] && (z = zmsg_recv(k->sock[ch]))) {
        jmsg_t *m = NULL;
        int rc = wire_decode(k->wire, &z, &m);
        if (rc < 0) {
            LOG_W("session=%s: a %s message kennel-gateway cannot read: %s", k->id,
                  gwproto_channel_name(ch), wire_strerror(rc));
            continue;
        }
        s_on_kernel_msg(k, ch, m);
        jmsg_destroy(&m);
    }
}

static char s_serving_user[64]; /* who serves: --user, or who started the gateway */

/*  Clients waiting on a kernel that kenneld never answers are told why and closed, rather
 *  than left hanging: the usual cause is a kenneld that cuts this gateway's user (started
 *  without --admit-user naming it), and otherwise a kenneld that is gone or stuck. */
static void s_check_answering(kern_t *k, long long now)
{
    if (k->ready || !zlistx_size(k->conns)) {
        k->waiting_ms = 0;
        return;
    }
    if (!k->waiting_ms) {
        k->waiting_ms = now;
        return;
    }
    if (now - k->waiting_ms < (long long)opt.answer_s * 1000)
        return;
    LOG_W("session=%s: kenneld has not answered this gateway in %d s; its WebSockets are "
          "closed. If kenneld runs as another user, start it with --admit-user %s.",
          k->id, opt.answer_s, s_serving_user);
    for (conn_t *c = zlistx_first(k->conns); c; c = zlistx_next(k->conns))
        s_ws_close(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION,
                   "kenneld does not answer this gateway (is it started with --admit-user?)");
    k->waiting_ms = 0;
}

/*  All of k's channels (the sweep's backstop). */
static void s_drain_kern(kern_t *k)
{
    for (int ch = 0; ch < GWPROTO_NCHANNELS; ch++)
        s_drain_chan(k, ch);
}

/* ---------------------------------------------------------------------------------- */
/* WebSockets                                                                         */

static void s_ws_close(conn_t *c, int code, const char *reason)
{
    if (!c->wsi || c->close_code)
        return;
    c->close_code = code;
    snprintf(c->close_reason, sizeof c->close_reason, "%s", reason);
    lws_callback_on_writable(c->wsi);
    /* The close frame goes out when the socket takes it; a client that reads nothing (the
     * one dropped as too slow) never lets it, so it is hung up on after a few seconds. */
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, 5);
}

static void s_attach(conn_t *c, kern_t *k)
{
    c->kern = k;
    zlistx_add_end(k->conns, c);
    gwqueue_t *q = c->session_id[0] ? zhashx_lookup(k->replay, c->session_id) : NULL;
    if (q) {
        /* The messages this client missed, in the order they came, before anything new. */
        gwqueue_item_t *it;
        while ((it = gwqueue_pop(q))) {
            s_ws_queue(c, it->channel, it->msg);
            g.replayed++;
            gwqueue_item_free(&it);
        }
        free(q);
        zhashx_delete(k->replay, c->session_id);
    }
    if (!k->ready) {
        s_nudge(k);
        return;
    }
    gwqueue_item_t *it;
    while ((it = gwqueue_pop(&c->held))) {
        s_forward(k, it->channel, &it->msg);
        gwqueue_item_free(&it);
    }
}

static void s_detach(conn_t *c)
{
    kern_t *k = c->kern;
    if (!k)
        return;
    c->kern = NULL;
    void *h = zlistx_find(k->conns, c);
    if (h)
        zlistx_delete(k->conns, h);
    if (!c->session_id[0] || zhashx_lookup(k->replay, c->session_id) ||
        zhashx_size(k->replay) >= MAX_REPLAYS)
        return;
    for (conn_t *o = zlistx_first(k->conns); o; o = zlistx_next(k->conns))
        if (!strcmp(o->session_id, c->session_id))
            return; /* another WebSocket of the same client is still there */
    gwqueue_t *q = calloc(1, sizeof *q);
    if (q) {
        q->since_ms = util_now_ms();
        zhashx_insert(k->replay, c->session_id, q);
    }
}

static void s_ws_message(conn_t *c, const unsigned char *data, size_t len, int is_binary)
{
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, opt.idle_s);
    gwproto_channel_t ch;
    jmsg_t *m = NULL;
    int rc = gwproto_decode(c->mode, is_binary, data, len, 64, &ch, &m);
    if (rc < 0) {
        g.frames_refused++;
        s_ws_close(c,
                   rc == GWPROTO_ECHANNEL ? LWS_CLOSE_STATUS_POLICY_VIOLATION
                                          : LWS_CLOSE_STATUS_INVALID_PAYLOAD,
                   gwproto_strerror(rc));
        return;
    }
    const char *sess = jmsg_cstr(json_object_get(jmsg_header(m), "session"));
    if (!c->session_id[0] && sess)
        snprintf(c->session_id, sizeof c->session_id, "%s", sess);
    kern_t *k = c->kern;
    if (!k || !k->ready) {
        if (c->held.count >= MAX_HELD) {
            jmsg_destroy(&m);
            s_ws_close(c, LWS_CLOSE_STATUS_POLICY_VIOLATION, "too many messages before ready");
            return;
        }
        gwqueue_push_msg(&c->held, &m, ch, len);
        return;
    }
    if (s_forward(k, ch, &m) < 0)
        s_ws_close(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "the kernel is not reachable");
}

/* ---------------------------------------------------------------------------------- */
/* HTTP                                                                               */

static int s_header(struct lws *wsi, enum lws_token_indexes t, char *buf, int len)
{
    int n = lws_hdr_total_length(wsi, t);
    if (n <= 0 || n >= len)
        return -1;
    return lws_hdr_copy(wsi, buf, len, t) < 0 ? -1 : n;
}

/*  The tenant of the request's token into tenant: 1, 0 without a token, -1 with a wrong one. */
static int s_auth(struct lws *wsi, char *tenant, size_t tenant_len)
{
    char buf[512];
    const char *tok = NULL;
    if (s_header(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, buf, sizeof buf) > 0) {
        if (!strncasecmp(buf, "token ", 6))
            tok = buf + 6;
        else if (!strncasecmp(buf, "bearer ", 7))
            tok = buf + 7;
        else
            return -1;
    } else {
        tok = lws_get_urlarg_by_name(wsi, "token=", buf, sizeof buf);
    }
    if (!tok)
        return 0;
    while (*tok == ' ')
        tok++;
    char key[GWPROTO_TOKEN_KEY_LEN];
    gwproto_token_key(tok, strlen(tok), key);
    sodium_memzero(buf, sizeof buf);
    const char *t = json_string_value(json_object_get(g.tokens, key));
    if (!t)
        return -1;
    snprintf(tenant, tenant_len, "%s", t);
    return 1;
}

static int s_method(struct lws *wsi)
{
    if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI))
        return 'G';
    if (lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI))
        return 'P';
    if (lws_hdr_total_length(wsi, WSI_TOKEN_DELETE_URI))
        return 'D';
    if (lws_hdr_total_length(wsi, WSI_TOKEN_OPTIONS_URI))
        return 'O';
    if (lws_hdr_total_length(wsi, WSI_TOKEN_PATCH_URI))
        return 'A';
    return 0;
}

/*  A request from a browser page of another origin is refused unless --cors-origin names
 *  it; as in Jupyter Server, an Origin naming the gateway's own host (what a WebSocket
 *  client library sends by default) is the same origin. */
static int s_origin_ok(struct lws *wsi)
{
    char o[256], host[256];
    if (s_header(wsi, WSI_TOKEN_ORIGIN, o, sizeof o) < 0)
        return 1;
    if (opt.cors && (!strcmp(opt.cors, "*") || !strcmp(opt.cors, o)))
        return 1;
    const char *sep = strstr(o, "://");
    return sep && s_header(wsi, WSI_TOKEN_HOST, host, sizeof host) > 0 && !strcmp(sep + 3, host);
}

/*  The kernelspec's resources, as Jupyter Server serves them from a kernelspec's directory
 *  (its logo-* files, kernel.js and kernel.css): read from kennel's kernelspec directory once,
 *  at start, and served from memory, so the serving process needs no path into the
 *  filesystem. A file that is not there is not listed. */
static struct {
    const char *file, *key, *ctype;
    char *data;
    size_t len;
} s_res[] = {{"logo-32x32.png", "logo-32x32", "image/png", NULL, 0},
             {"logo-64x64.png", "logo-64x64", "image/png", NULL, 0},
             {"logo-svg.svg", "logo-svg", "image/svg+xml", NULL, 0},
             {"kernel.js", "kernel.js", "application/javascript", NULL, 0},
             {"kernel.css", "kernel.css", "text/css", NULL, 0}};
#define NRES (sizeof s_res / sizeof *s_res)

static void s_load_resources(const char *dir)
{
    for (size_t i = 0; i < NRES; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, s_res[i].file);
        s_res[i].data = util_read_file(path, 1u << 20, &s_res[i].len);
    }
}

static json_t *s_spec(const char *name)
{
    json_t *res = json_object();
    for (size_t i = 0; i < NRES; i++)
        if (s_res[i].data)
            json_object_set_new(res, s_res[i].key,
                                json_sprintf("/kernelspecs/%s/%s", name, s_res[i].file));
    return json_pack("{s:s, s:{s:[], s:s, s:s, s:s, s:{}, s:{}}, s:o}", "name", name, "spec",
                     "argv", "display_name", "Python 3 (kennel)", "language", "python",
                     "interrupt_mode", "message", "env", "metadata", "resources", res);
}

static void s_spec_file(conn_t *c, const char *spec, const char *file)
{
    for (size_t i = 0; i < NRES && (!strcmp(spec, "kennel") || !strcmp(spec, "python3")); i++)
        if (s_res[i].data && !strcmp(s_res[i].file, file))
            return s_respond(c, 200, s_res[i].ctype, s_res[i].data, s_res[i].len);
    s_respond_error(c, 404, "no such kernel spec resource");
}

/*  The session name a POST /api/kernels body asks for: env.KERNEL_SESSION_NAME (or
 *  KERNEL_KENNEL_SESSION), else a fresh one. Writes TENANT.NAME into out; -1 when invalid. */
static int s_session_name(const conn_t *c, json_t *body, char *out, size_t out_len)
{
    json_t *env = json_object_get(body, "env");
    const char *n = jmsg_cstr(json_object_get(env, "KERNEL_SESSION_NAME"));
    if (!n)
        n = jmsg_cstr(json_object_get(env, "KERNEL_KENNEL_SESSION"));
    char fresh[40];
    if (!n) {
        char u[40];
        util_uuid(u);
        snprintf(fresh, sizeof fresh, "k-%.8s%.4s", u, u + 9);
        n = fresh;
    }
    if (!gwproto_is_session_name(n))
        return -1;
    snprintf(out, out_len, "%s.%s", c->tenant, n);
    return 0;
}

static void s_dispatch(conn_t *c)
{
    g.http_requests++;
    const gwproto_route_t *r = &c->route;
    int m = c->method;
    switch (r->kind) {
    case GWPROTO_R_API:
        if (m == 'G')
            return s_respond_json(
                c, 200, json_pack("{s:s, s:s}", "version", "2.0.0", "kennel", KENNEL_VERSION));
        break;
    case GWPROTO_R_KERNELSPECS:
        if (m == 'G')
            return s_respond_json(c, 200,
                                  json_pack("{s:s, s:{s:o, s:o}}", "default", "kennel",
                                            "kernelspecs", "kennel", s_spec("kennel"), "python3",
                                            s_spec("python3")));
        break;
    case GWPROTO_R_KERNELSPEC:
        if (m == 'G') {
            if (!strcmp(r->id, "kennel") || !strcmp(r->id, "python3"))
                return s_respond_json(c, 200, s_spec(r->id));
            return s_respond_error(c, 404, "no such kernel spec");
        }
        break;
    case GWPROTO_R_KERNELS:
        if (m == 'G') {
            if (s_mgr_call(c, MP_LIST, "list_request", json_object()) < 0)
                s_respond_error(c, 503, "kenneld is not reachable");
            return;
        }
        if (m == 'P') {
            json_t *body = c->body_len ? json_loadb(c->body, c->body_len, 0, NULL) : json_object();
            if (!json_is_object(body)) {
                json_decref(body);
                return s_respond_error(c, 400, "the body is not a JSON object");
            }
            const char *spec = json_string_value(json_object_get(body, "name"));
            char name[160];
            if (spec && strcmp(spec, "kennel") && strcmp(spec, "python3")) {
                json_decref(body);
                return s_respond_error(c, 404, "no such kernel spec");
            }
            if (s_session_name(c, body, name, sizeof name) < 0) {
                json_decref(body);
                return s_respond_error(c, 400, "KERNEL_SESSION_NAME: 1 to 64 of A-Z a-z 0-9 . _ -");
            }
            json_decref(body);
            if (s_mgr_call(c, MP_CREATE, "create_request", json_pack("{s:s}", "name", name)) < 0)
                s_respond_error(c, 503, "kenneld is not reachable");
            return;
        }
        break;
    case GWPROTO_R_KERNEL:
        if (m == 'G' || m == 'D') {
            if (s_mgr_call_session(c, m == 'G' ? MP_GET : MP_DELETE, "info_request", r->id) < 0)
                s_respond_error(c, 503, "kenneld is not reachable");
            return;
        }
        break;
    case GWPROTO_R_INTERRUPT:
    case GWPROTO_R_RESTART:
        if (m == 'P') {
            if (s_mgr_call_session(c, r->kind == GWPROTO_R_INTERRUPT ? MP_INTERRUPT : MP_RESTART,
                                   "info_request", r->id) < 0)
                s_respond_error(c, 503, "kenneld is not reachable");
            return;
        }
        break;
    case GWPROTO_R_CHANNELS: return s_respond_error(c, 400, "a WebSocket upgrade is needed");
    case GWPROTO_R_SESSIONS:
        if (m == 'G') {
            if (s_mgr_call(c, MP_SESSIONS, "list_request", json_object()) < 0)
                s_respond_error(c, 503, "kenneld is not reachable");
            return;
        }
        if (m == 'P')
            return s_jsess_post(c);
        break;
    case GWPROTO_R_SESSION: return s_jsess_dispatch(c, r->id);
    case GWPROTO_R_METRICS:
        if (m == 'G') {
            if (s_mgr_call(c, MP_METRICS, "list_request", json_object()) < 0)
                s_metrics(c, NULL);
            return;
        }
        break;
    case GWPROTO_R_SPECFILE:
        if (m == 'G')
            return s_spec_file(c, r->id, r->file);
        break;
    case GWPROTO_R_NOTFOUND: return s_respond_error(c, 404, "not found");
    }
    s_respond_error(c, 405, "method not allowed");
}

/* ---------------------------------------------------------------------------------- */
/* Metrics                                                                            */

static void s_metrics(conn_t *c, json_t *sessions)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    char line[1024];
#define OUT(...)                                                                                   \
    do {                                                                                           \
        int n_ = snprintf(line, sizeof line, __VA_ARGS__);                                         \
        util_append(&buf, &len, &cap, line, (size_t)n_);                                           \
    } while (0)
    static const char *states[] = {"starting", "idle",      "busy", "saving",
                                   "evicted",  "restoring", "dead"};
    OUT("# HELP kennel_gateway_sessions Sessions of the tenants the tokens name, by kennel "
        "state.\n"
        "# TYPE kennel_gateway_sessions gauge\n");
    for (size_t s = 0; s < sizeof states / sizeof *states; s++) {
        int n = 0;
        size_t i;
        json_t *v;
        json_array_foreach(sessions, i, v)
        {
            const char *nm = json_string_value(json_object_get(v, "name"));
            const char *dot = nm ? strchr(nm, '.') : NULL;
            const char *st = json_string_value(json_object_get(v, "state"));
            if (!dot || !st || strcmp(st, states[s]))
                continue;
            char tn[40];
            snprintf(tn, sizeof tn, "%.*s", (int)(dot - nm), nm);
            if (json_object_get(g.tenants, tn))
                n++;
        }
        OUT("kennel_gateway_sessions{state=\"%s\"} %d\n", states[s], n);
    }
    OUT("# HELP kennel_gateway_cells_total Cells answered through the gateway, by outcome.\n"
        "# TYPE kennel_gateway_cells_total counter\n"
        "kennel_gateway_cells_total{outcome=\"ok\"} %llu\n"
        "kennel_gateway_cells_total{outcome=\"error\"} %llu\n"
        "kennel_gateway_cells_total{outcome=\"aborted\"} %llu\n",
        g.cells_ok, g.cells_error, g.cells_aborted);
    size_t queued = 0, out_bytes = 0, replay_msgs = 0, websockets = 0;
    for (kern_t *k = zhashx_first(g.kerns); k; k = zhashx_next(g.kerns)) {
        queued += (size_t)k->queued;
        websockets += zlistx_size(k->conns);
        for (conn_t *o = zlistx_first(k->conns); o; o = zlistx_next(k->conns))
            out_bytes += o->out.bytes;
        for (gwqueue_t *q = zhashx_first(k->replay); q; q = zhashx_next(k->replay))
            replay_msgs += q->count;
    }
    OUT("# HELP kennel_gateway_queue_length What waits: execute requests for replies, "
        "bytes for WebSockets, messages for dropped clients.\n"
        "# TYPE kennel_gateway_queue_length gauge\n"
        "kennel_gateway_queue_length{queue=\"execute\"} %zu\n"
        "kennel_gateway_queue_length{queue=\"websocket_bytes\"} %zu\n"
        "kennel_gateway_queue_length{queue=\"replay_messages\"} %zu\n",
        queued, out_bytes, replay_msgs);
    OUT("# TYPE kennel_gateway_websockets gauge\nkennel_gateway_websockets %zu\n", websockets);
    OUT("# TYPE kennel_gateway_websockets_total counter\nkennel_gateway_websockets_total %llu\n",
        g.ws_total);
    OUT("# TYPE kennel_gateway_refused_total counter\n"
        "kennel_gateway_refused_total{what=\"auth\"} %llu\n"
        "kennel_gateway_refused_total{what=\"websocket\"} %llu\n"
        "kennel_gateway_refused_total{what=\"frame\"} %llu\n",
        g.auth_failed, g.ws_refused, g.frames_refused);
    OUT("# TYPE kennel_gateway_replayed_messages_total counter\n"
        "kennel_gateway_replayed_messages_total %llu\n"
        "# TYPE kennel_gateway_replay_dropped_total counter\n"
        "kennel_gateway_replay_dropped_total %llu\n",
        g.replayed, g.replay_dropped);
    OUT("# HELP kennel_gateway_execute_roundtrip_seconds From an execute_request leaving the "
        "gateway to its execute_reply coming back.\n"
        "# TYPE kennel_gateway_execute_roundtrip_seconds histogram\n");
    for (int i = 0; i < 12; i++)
        OUT("kennel_gateway_execute_roundtrip_seconds_bucket{le=\"%g\"} %llu\n", s_rtt_le[i],
            g.rtt_buckets[i]);
    OUT("kennel_gateway_execute_roundtrip_seconds_bucket{le=\"+Inf\"} %llu\n"
        "kennel_gateway_execute_roundtrip_seconds_sum %.6f\n"
        "kennel_gateway_execute_roundtrip_seconds_count %llu\n",
        g.rtt_count, g.rtt_sum_s, g.rtt_count);
#undef OUT
    s_respond(c, 200, "text/plain; version=0.0.4", buf ? buf : "", len);
    free(buf);
}

/* ---------------------------------------------------------------------------------- */
/* libwebsockets' callback for HTTP and both WebSocket framings                       */

static int s_write_response(struct lws *wsi, conn_t *c)
{
    unsigned char hb[LWS_PRE + 1024], *start = hb + LWS_PRE, *p = start, *end = hb + sizeof hb - 1;
    /* A 204 has a status line and no content headers: RFC 9110 forbids its Content-Length. */
    if (c->status == 204 ? lws_add_http_header_status(wsi, 204, &p, end)
                         : lws_add_http_common_headers(wsi, (unsigned)c->status, c->ctype,
                                                       c->resp_len, &p, end))
        return -1;
    if (c->status == 401 &&
        lws_add_http_header_by_name(wsi, (const unsigned char *)"WWW-Authenticate:",
                                    (const unsigned char *)"token", 5, &p, end))
        return -1;
    if (c->status == 201 && c->location[0] &&
        lws_add_http_header_by_name(wsi, (const unsigned char *)"Location:",
                                    (const unsigned char *)c->location, (int)strlen(c->location),
                                    &p, end))
        return -1;
    if (opt.cors) {
        static const char *const h[][2] = {
            {"Access-Control-Allow-Origin:", NULL},
            {"Access-Control-Allow-Headers:", "Authorization, Content-Type"},
            {"Access-Control-Allow-Methods:", "GET, POST, PATCH, DELETE, OPTIONS"}};
        for (int i = 0; i < 3; i++) {
            const char *v = h[i][1] ? h[i][1] : opt.cors;
            if (lws_add_http_header_by_name(wsi, (const unsigned char *)h[i][0],
                                            (const unsigned char *)v, (int)strlen(v), &p, end))
                return -1;
        }
    }
    if (lws_finalize_write_http_header(wsi, start, &p, end))
        return -1;
    if (c->resp_len &&
        lws_write(wsi, c->resp + LWS_PRE, c->resp_len, LWS_WRITE_HTTP_FINAL) != (int)c->resp_len)
        return -1;
    free(c->resp);
    c->resp = NULL;
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

static void s_conn_free(conn_t *c)
{
    if (c->pending)
        c->pending->conn = NULL;
    if (c->kern && c->kern->restart_conn == c)
        c->kern->restart_conn = NULL;
    else
        s_detach(c);
    if (c->counted) {
        json_t *n = json_object_get(g.tenant_conns, c->tenant);
        json_integer_set(n, json_integer_value(n) - 1);
    }
    gwqueue_clear(&c->out);
    gwqueue_clear(&c->held);
    free(c->rx);
    free(c->body);
    free(c->resp);
    free(c);
}

/*  A connection's state hangs on its wsi's opaque pointer, not in libwebsockets' per-session
 *  data: that is freed and made anew when an upgrade binds the WebSocket to another protocol
 *  (the v1 subprotocol), and the connection must outlive that. */
static conn_t *s_conn_new(struct lws *wsi)
{
    conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->wsi = wsi;
    lws_set_opaque_user_data(wsi, c);
    return c;
}

static int s_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                      size_t len)
{
    conn_t *c = lws_get_opaque_user_data(wsi);
    switch (reason) {
    case LWS_CALLBACK_HTTP: {
        if (!c && !(c = s_conn_new(wsi)))
            return -1;
        c->responded = 0;
        c->location[0] = '\0';
        free(c->body);
        c->body = NULL;
        c->body_len = 0;
        c->method = s_method(wsi);
        gwproto_route(in ? in : "", &c->route);
        if (c->method == 'O') {
            if (opt.cors && s_origin_ok(wsi))
                s_respond(c, 204, "text/plain", "", 0);
            else
                s_respond_error(c, 403, "cross-origin requests are not allowed");
            return 0;
        }
        if (!s_origin_ok(wsi)) {
            s_respond_error(c, 403, "cross-origin requests are not allowed");
            return 0;
        }
        int a = s_auth(wsi, c->tenant, sizeof c->tenant);
        if (a <= 0) {
            g.auth_failed++;
            s_respond_error(c, a == 0 ? 401 : 403, a == 0 ? "a token is needed" : "bad token");
            return 0;
        }
        if ((c->method == 'P' || c->method == 'A') &&
            lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0) {
            char cl[32];
            if (s_header(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH, cl, sizeof cl) > 0 && atol(cl) > 0)
                return 0; /* the body comes next */
        }
        s_dispatch(c);
        return 0;
    }
    case LWS_CALLBACK_HTTP_BODY:
        if (!c)
            return -1;
        if (c->body_len + len > MAX_BODY) {
            c->body_too_big = 1;
            return 0;
        }
        {
            char *b = realloc(c->body, c->body_len + len + 1);
            if (!b)
                return -1;
            memcpy(b + c->body_len, in, len);
            c->body = b;
            c->body_len += len;
            b[c->body_len] = '\0';
        }
        return 0;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        if (!c)
            return -1;
        if (c->body_too_big)
            s_respond_error(c, 413, "the body is too large");
        else
            s_dispatch(c);
        return 0;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        if (c && c->responded && c->resp)
            return s_write_response(wsi, c);
        return 0;
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: {
        if (!c && !(c = s_conn_new(wsi)))
            return -1;
        char uri[512];
        gwproto_route_t r;
        if (s_header(wsi, WSI_TOKEN_GET_URI, uri, sizeof uri) < 0)
            uri[0] = '\0';
        gwproto_route(uri, &r);
        int a = s_auth(wsi, c->tenant, sizeof c->tenant);
        int status = 0;
        if (a <= 0) {
            g.auth_failed++;
            status = a == 0 ? 401 : 403;
        } else if (!s_origin_ok(wsi)) {
            status = 403;
        } else if (r.kind != GWPROTO_R_CHANNELS) {
            status = 404;
        } else {
            json_t *n = json_object_get(g.tenant_conns, c->tenant);
            if (json_integer_value(n) >= opt.max_conns)
                status = 429;
        }
        if (status) {
            g.ws_refused++;
            lws_return_http_status(wsi, (unsigned)status, NULL);
            return 1;
        }
        snprintf(c->kernel_id, sizeof c->kernel_id, "%s", r.id);
        char sid[80];
        const char *s = lws_get_urlarg_by_name(wsi, "session_id=", sid, sizeof sid);
        if (s)
            snprintf(c->session_id, sizeof c->session_id, "%s", s);
        return 0;
    }
    case LWS_CALLBACK_ESTABLISHED: {
        if (!c)
            return -1;
        const struct lws_protocols *pr = lws_get_protocol(wsi);
        c->is_ws = 1;
        c->mode = pr && pr->id == 1 ? GWPROTO_WS_V1 : GWPROTO_WS_JSON;
        json_t *n = json_object_get(g.tenant_conns, c->tenant);
        if (!n)
            json_object_set_new(g.tenant_conns, c->tenant, n = json_integer(0));
        json_integer_set(n, json_integer_value(n) + 1);
        c->counted = 1;
        g.ws_total++;
        lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, opt.idle_s);
        kern_t *k = zhashx_lookup(g.kerns, c->kernel_id);
        if (k && strcmp(k->tenant, c->tenant) == 0)
            s_attach(c, k);
        else if (s_mgr_call_session(c, MP_ATTACH, "info_request", c->kernel_id) < 0)
            s_ws_close(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "kenneld is not reachable");
        return 0;
    }
    case LWS_CALLBACK_RECEIVE: {
        if (!c || c->close_code)
            return 0;
        int last = lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi);
        int bin = lws_frame_is_binary(wsi);
        if (c->rx_len + len > opt.max_frame) {
            g.frames_refused++;
            lws_close_reason(wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE,
                             (unsigned char *)"message too big", 15);
            return -1;
        }
        if (last && c->rx_len == 0) {
            s_ws_message(c, in, len, bin);
            return 0;
        }
        if (c->rx_len + len > c->rx_cap) {
            size_t cap = c->rx_cap ? c->rx_cap : 4096;
            while (cap < c->rx_len + len)
                cap *= 2;
            unsigned char *b = realloc(c->rx, cap);
            if (!b)
                return -1;
            c->rx = b;
            c->rx_cap = cap;
        }
        memcpy(c->rx + c->rx_len, in, len);
        c->rx_len += len;
        if (last) {
            s_ws_message(c, c->rx, c->rx_len, bin);
            c->rx_len = 0;
        }
        return 0;
    }
    case LWS_CALLBACK_SERVER_WRITEABLE: {
        if (!c)
            return 0;
        if (c->close_code) {
            lws_close_reason(wsi, (enum lws_close_status)c->close_code,
                             (unsigned char *)c->close_reason, strlen(c->close_reason));
            return -1;
        }
        /* A cell's messages come in bursts (busy, input, result, reply, idle): write while
         * the socket takes them whole rather than one a turn of the loop, a few at most so
         * that other WebSockets get their turn. */
        for (int i = 0; i < 16 && c->out.head; i++) {
            /* Both checks: lws_send_pipe_choked() asks the socket only, and a write lws
             * partly buffered must be done before the next frame, or the frames mix. */
            if (i > 0 && (lws_partial_buffered(wsi) || lws_send_pipe_choked(wsi)))
                break;
            gwqueue_item_t *it = gwqueue_pop(&c->out);
            int n = lws_write(wsi, it->buf + LWS_PRE, it->len,
                              it->is_binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT);
            size_t want = it->len;
            gwqueue_item_free(&it);
            if (n < (int)want)
                return -1;
        }
        lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, opt.idle_s);
        if (c->out.head)
            lws_callback_on_writable(wsi);
        return 0;
    }
    case LWS_CALLBACK_CLOSED:
    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_WSI_DESTROY:
        if (c) {
            lws_set_opaque_user_data(wsi, NULL);
            s_conn_free(c);
        }
        return 0;
    default: break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

/* ---------------------------------------------------------------------------------- */
/* The sweep: once a second, what no event would do                                  */

static void s_sweep(lws_sorted_usec_list_t *sul)
{
    long long now = util_now_ms();
    s_drain_mgr();
    /* Manager calls kenneld never answered (within 10 s): fail them. */
    zlistx_t *late = zlistx_new();
    for (mpend_t *p = zhashx_first(g.mpend); p; p = zhashx_next(g.mpend))
        if (p->deadline_ms < now)
            zlistx_add_end(late, p->msg_id);
    for (const char *id = zlistx_first(late); id; id = zlistx_next(late)) {
        char key[40];
        snprintf(key, sizeof key, "%s", id); /* the key must outlive the item */
        s_mgr_fail(zhashx_lookup(g.mpend, key));
        zhashx_delete(g.mpend, key);
    }
    /* A kenneld that restarted has a new key (its kenneld.json, another digest); one that is
     * starting has no kenneld.json yet: try again each sweep until the file reads. */
    int moved = !g.mgr_stale && s_mgr_moved();
    if (moved)
        LOG_I("kenneld.json changed (kenneld restarted): connecting to its manager again");
    if (g.mgr_stale || moved) {
        g.mgr_stale = s_mgr_connect() < 0;
        if (!g.mgr_stale) {
            /* Calls made on the socket just replaced can never be answered: failed now,
             * not after their 10 s. */
            for (mpend_t *p = zhashx_first(g.mpend); p; p = zhashx_next(g.mpend))
                s_mgr_fail(p);
            zhashx_purge(g.mpend);
            /* Each kernel is asked again (its session may be served on new ports, or not
             * at all: --answer-timeout then closes its WebSockets); what clients send
             * meanwhile is held until it answers. */
            for (kern_t *k = zhashx_first(g.kerns); k; k = zhashx_next(g.kerns)) {
                k->follow = 1;
                k->ready = 0;
                k->waiting_ms = 0;
            }
        }
    }
    for (kern_t *k = zhashx_first(g.kerns); k && !g.mgr_stale; k = zhashx_next(g.kerns))
        if (k->follow && s_kern_follow(k) == 0)
            k->follow = 0;
    zlistx_destroy(&late);
    zlistx_t *idle = zlistx_new();
    for (kern_t *k = zhashx_first(g.kerns); k; k = zhashx_next(g.kerns)) {
        s_drain_kern(k);
        if (!k->ready && zlistx_size(k->conns) && now - k->nudged_ms > 200)
            s_nudge(k);
        s_check_answering(k, now);
        zlistx_t *expired = zlistx_new();
        for (gwqueue_t *q = zhashx_first(k->replay); q; q = zhashx_next(k->replay))
            if (now - q->since_ms > (long long)opt.replay_s * 1000)
                zlistx_add_end(expired, (void *)zhashx_cursor(k->replay));
        for (const char *kk = zlistx_first(expired); kk; kk = zlistx_next(expired)) {
            char key[80];
            snprintf(key, sizeof key, "%s", kk);
            gwqueue_t *q = zhashx_lookup(k->replay, key);
            g.replay_dropped += q->count;
            gwqueue_clear(q);
            free(q);
            zhashx_delete(k->replay, key);
        }
        zlistx_destroy(&expired);
        if (zlistx_size(k->conns) || zhashx_size(k->replay) || k->restart_conn)
            k->unused_since_ms = 0;
        else if (!k->unused_since_ms)
            k->unused_since_ms = now;
        else if (now - k->unused_since_ms > 60000)
            zlistx_add_end(idle, k->id);
    }
    for (const char *id = zlistx_first(idle); id; id = zlistx_next(idle)) {
        char key[40];
        snprintf(key, sizeof key, "%s", id);
        zhashx_delete(g.kerns, key);
    }
    zlistx_destroy(&idle);
    lws_sul_schedule(g.ctx, 0, sul, s_sweep, LWS_US_PER_SEC);
}

/* ---------------------------------------------------------------------------------- */
/* Start-up                                                                           */

static void s_on_signal(int sig)
{
    (void)sig;
    g.stop = 1;
    if (g.ctx)
        lws_cancel_service(g.ctx);
}

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: kennel-gateway --state-dir DIR --listen ADDR:PORT --tokens FILE\n"
            "                      [--cert FILE --key FILE] [--user USER] [--cors-origin ORIGIN]\n"
            "                      [--max-header BYTES] [--max-frame BYTES] [--max-conns N]\n"
            "                      [--idle SECONDS] [--request-timeout SECONDS]\n"
            "                      [--replay-bytes BYTES] [--replay-seconds SECONDS]\n"
            "                      [--max-pending BYTES] [--answer-timeout SECONDS]\n"
            "                      [--log-level LEVEL]\n"
            "The Jupyter Server kernel API (REST and WebSocket) in front of kenneld: see "
            "docs/gateway.md.\n");
}

static int s_parse_args(int argc, char **argv)
{
    static const struct option opts[] = {{"state-dir", required_argument, NULL, 's'},
                                         {"listen", required_argument, NULL, 'l'},
                                         {"tokens", required_argument, NULL, 't'},
                                         {"cert", required_argument, NULL, 'c'},
                                         {"key", required_argument, NULL, 'k'},
                                         {"user", required_argument, NULL, 'u'},
                                         {"cors-origin", required_argument, NULL, 'o'},
                                         {"max-header", required_argument, NULL, 'H'},
                                         {"max-frame", required_argument, NULL, 'F'},
                                         {"max-conns", required_argument, NULL, 'C'},
                                         {"idle", required_argument, NULL, 'i'},
                                         {"request-timeout", required_argument, NULL, 'r'},
                                         {"replay-bytes", required_argument, NULL, 'B'},
                                         {"replay-seconds", required_argument, NULL, 'S'},
                                         {"max-pending", required_argument, NULL, 'P'},
                                         {"answer-timeout", required_argument, NULL, 'A'},
                                         {"log-level", required_argument, NULL, 'L'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c, level = LOG_LEVEL_INFO;
    const char *listen = NULL;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        long v = 0;
        if (strchr("HFCirBSPA", c)) {
            char *end;
            v = strtol(optarg, &end, 10);
            if (*end || v <= 0) {
                fprintf(stderr, "kennel-gateway: %s is not a positive number\n", optarg);
                return -1;
            }
        }
        switch (c) {
        case 's': snprintf(opt.state_dir, sizeof opt.state_dir, "%s", optarg); break;
        case 'l': listen = optarg; break;
        case 't': opt.tokens = optarg; break;
        case 'c': opt.cert = optarg; break;
        case 'k': opt.key = optarg; break;
        case 'u': opt.user = optarg; break;
        case 'o': opt.cors = optarg; break;
        case 'H':
            if (v < 1024 || v > 65535) {
                fprintf(stderr, "kennel-gateway: --max-header is 1024 to 65535\n");
                return -1;
            }
            opt.max_header = (unsigned)v;
            break;
        case 'F': opt.max_frame = (size_t)v; break;
        case 'C': opt.max_conns = (int)v; break;
        case 'i': opt.idle_s = (int)v; break;
        case 'r': opt.request_s = (int)v; break;
        case 'B': opt.replay_bytes = (size_t)v; break;
        case 'S': opt.replay_s = (int)v; break;
        case 'P': opt.max_pending = (size_t)v; break;
        case 'A': opt.answer_s = (int)v; break;
        case 'L':
            if ((level = log_level_parse(optarg)) < 0) {
                fprintf(stderr, "kennel-gateway: --log-level is error, warn, info or debug\n");
                return -1;
            }
            break;
        case 'h': s_usage(stdout); exit(0);
        default: s_usage(stderr); return -1;
        }
    }
    log_init("kennel-gateway", (log_level_t)level);
    if (!opt.cert != !opt.key) {
        fprintf(stderr, "kennel-gateway: --cert and --key go together (a PEM certificate and "
                        "its private key)\n");
        return -1;
    }
    if (!opt.state_dir[0] || !listen || !opt.tokens || optind != argc) {
        s_usage(stderr);
        return -1;
    }
    const char *colon = strrchr(listen, ':');
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || *end || port < 1 || port > 65535 ||
        (size_t)(colon - listen) >= sizeof opt.listen_addr) {
        fprintf(stderr, "kennel-gateway: --listen wants ADDR:PORT\n");
        return -1;
    }
    snprintf(opt.listen_addr, sizeof opt.listen_addr, "%.*s", (int)(colon - listen), listen);
    opt.port = (int)port;
    return 0;
}

/*  The tokens file must be a regular file only its owner can read or write. */
static json_t *s_load_tokens(void)
{
    int fd = open(opt.tokens, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        fprintf(stderr, "kennel-gateway: %s: %s\n", opt.tokens, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
        fprintf(stderr, "kennel-gateway: %s must be a regular file of mode 0600 (it is %04o)\n",
                opt.tokens, (unsigned)(st.st_mode & 07777));
        close(fd);
        return NULL;
    }
    close(fd);
    size_t len;
    char *text = util_read_file(opt.tokens, 1u << 20, &len);
    if (!text) {
        fprintf(stderr, "kennel-gateway: %s: %s\n", opt.tokens, strerror(errno));
        return NULL;
    }
    char err[128];
    json_t *t = gwproto_tokens_parse(text, len, err, sizeof err);
    sodium_memzero(text, len);
    free(text);
    if (!t)
        fprintf(stderr, "kennel-gateway: %s: %s\n", opt.tokens, err);
    else if (json_object_size(t) == 0) {
        fprintf(stderr, "kennel-gateway: %s holds no token\n", opt.tokens);
        json_decref(t);
        t = NULL;
    }
    return t;
}

/*  Make an empty directory this process's whole filesystem, then remove it, as sshd's
 *  privilege-separated child is kept in an empty /run/sshd: what the serving process needs
 *  from files (kenneld.json, a session's connection.json) it asks its parent for, and
 *  everything else it read before this (its tokens, the kernelspec's files, the TLS pair).
 *  A taken-over gateway then sees no file at all, and cannot make one (a removed directory
 *  takes no new entries, even from root). */
static int s_enter_empty_root(void)
{
    /* Where root can make a directory: systemd's RuntimeDirectory=, /run, /tmp (a read-only
     * root filesystem may have only one of them). */
    const char *bases[] = {getenv("RUNTIME_DIRECTORY"), "/run", "/tmp"};
    for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
        char dir[PATH_MAX];
        if (!bases[i] || bases[i][0] != '/' ||
            snprintf(dir, sizeof dir, "%s/kennel-gateway-root-XXXXXX", bases[i]) >=
                (int)sizeof dir ||
            !mkdtemp(dir))
            continue;
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int rc = fd >= 0 && rmdir(dir) == 0 && fchdir(fd) == 0 && chroot(".") == 0 &&
                         chdir("/") == 0
                     ? 0
                     : -1;
        if (rc < 0) {
            PLOG_E("entering the empty root %s", dir);
            rmdir(dir);
        }
        if (fd >= 0)
            close(fd);
        return rc;
    }
    LOG_E("cannot make an empty root directory in $RUNTIME_DIRECTORY, /run or /tmp");
    return -1;
}

/*  Become --user for good: groups, then gid, then uid (after setuid there is no right left
 *  to change the others), then no_new_privs so nothing exec'd could regain any. */
static int s_drop(const struct passwd *pw)
{
    if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0) {
        PLOG_E("dropping to %s", pw->pw_name);
        return -1;
    }
    if (setuid(0) == 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        LOG_E("privileges could not be dropped for good");
        return -1;
    }
    /* A parent-death signal is cleared by the credential change: set it now. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    return 0;
}

static const struct lws_protocols s_protocols[] = {
    {"kennel-gateway", s_callback, 0, 0, 0, NULL, 0},
    {"v1.kernel.websocket.jupyter.org", s_callback, 0, 0, 1, NULL, 0},
    {"kennel-zmq", s_on_zmq, 0, 0, 2, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0}};

int main(int argc, char **argv)
{
    if (s_parse_args(argc, argv) < 0)
        return 2;
    if (sodium_init() < 0)
        return 1;
    g.tokens = s_load_tokens();
    if (!g.tokens)
        return 2;
    s_load_resources(KENNEL_SPEC_DIR);
    struct passwd *pw = NULL;
    int privileged = geteuid() == 0;
    if (privileged && !(pw = getpwnam(opt.user))) {
        fprintf(stderr, "kennel-gateway: no user %s\n", opt.user);
        return 2;
    }
    struct passwd *me = privileged ? pw : getpwuid(getuid());
    if (me)
        snprintf(s_serving_user, sizeof s_serving_user, "%s", me->pw_name);
    else
        snprintf(s_serving_user, sizeof s_serving_user, "%d", (int)getuid());
    if (privileged && pw->pw_uid == 0) {
        fprintf(stderr, "kennel-gateway: --user must not be root\n");
        return 2;
    }
    if (privileged) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
            perror("kennel-gateway: socketpair");
            return 1;
        }
        s_child_pid = fork();
        if (s_child_pid < 0) {
            perror("kennel-gateway: fork");
            return 1;
        }
        if (s_child_pid > 0) {
            close(sv[1]);
            json_decref(g.tokens);
            struct sigaction sa = {.sa_handler = s_forward_signal};
            sigaction(SIGTERM, &sa, NULL);
            sigaction(SIGINT, &sa, NULL);
            sigaction(SIGHUP, &sa, NULL);
            return s_monitor(sv[0]);
        }
        close(sv[0]);
        g.monitor_fd = sv[1];
        prctl(PR_SET_PDEATHSIG, SIGTERM);
    }
    struct sigaction sa = {.sa_handler = s_on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    lws_set_log_level(LLL_ERR, NULL);

    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = opt.port;
    info.iface = opt.listen_addr;
    info.protocols = s_protocols;
    info.max_http_header_data = (unsigned short)opt.max_header;
    info.timeout_secs = (unsigned)opt.request_s;
    info.keepalive_timeout = opt.request_s;
    info.alpn = "http/1.1";
    info.uid = (uid_t)-1;
    info.gid = (gid_t)-1;
    info.options = LWS_SERVER_OPTION_VALIDATE_UTF8 | LWS_SERVER_OPTION_DISABLE_IPV6;
    if (opt.cert) {
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = opt.cert;
        info.ssl_private_key_filepath = opt.key;
    }
    /* Binding and reading the key pair are the last things done with root's rights. */
    g.ctx = lws_create_context(&info);
    if (!g.ctx) {
        LOG_E("cannot serve on %s:%d%s", opt.listen_addr, opt.port,
              opt.cert ? " with that certificate and key" : "");
        return 1;
    }
    g.vh = lws_get_vhost_by_name(g.ctx, "default");
    /* libcrypto (message signatures) reads the system's OpenSSL configuration now, while
     * there is a filesystem: without TLS its first use would come after the chroot. */
    if (!OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, NULL)) {
        LOG_E("cannot initialise libcrypto");
        return 1;
    }
    if (privileged && (s_enter_empty_root() < 0 || s_drop(pw) < 0))
        return 1;
    /* From here on this process parses what the network sends. */
    zsys_handler_set(NULL);
    zsys_init();
    util_uuid(g.mgr_session);
    g.mpend = zhashx_new();
    zhashx_set_destructor(g.mpend, s_free_item);
    g.kerns = zhashx_new();
    zhashx_set_destructor(g.kerns, s_kern_free);
    g.exec_start = zhashx_new();
    zhashx_set_destructor(g.exec_start, s_free_item);
    g.jsess = zhashx_new();
    zhashx_set_destructor(g.jsess, s_jsess_free);
    g.tenant_conns = json_object();
    g.tenants = json_object();
    const char *tk;
    json_t *tv;
    json_object_foreach(g.tokens, tk, tv)
        json_object_set_new(g.tenants, json_string_value(tv), json_true());
    if (!g.vh || s_mgr_connect() < 0)
        return 1;
    LOG_I("serving %s://%s:%d for %zu token(s)", opt.cert ? "https" : "http", opt.listen_addr,
          opt.port, json_object_size(g.tokens));
    if (privileged)
        LOG_I("running as %s (uid %d): kenneld must admit it (kenneld --admit-user %s)",
              opt.user, (int)getuid(), opt.user);
    lws_sul_schedule(g.ctx, 0, &g.sul, s_sweep, LWS_US_PER_SEC);
    while (!g.stop && lws_service(g.ctx, 0) >= 0) {
    }
    LOG_I("stopping");
    zhashx_destroy(&g.kerns);
    s_unwatch(&g.mgr_wsi);
    lws_context_destroy(g.ctx);
    zhashx_destroy(&g.mpend);
    zhashx_destroy(&g.exec_start);
    zhashx_destroy(&g.jsess);
    zsock_destroy(&g.mgr);
    wire_destroy(&g.mgr_wire);
    json_decref(g.tokens);
    json_decref(g.tenant_conns);
    json_decref(g.tenants);
    return 0;
}
