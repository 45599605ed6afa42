/*  kennel: the command-line client of kenneld. Talks to the manager socket for session
 *  lifecycle (new, ls, info, rm), acts as an ordinary Jupyter client for `exec`, as a
 *  kernelspec launcher for `kernel -f`, and as an MCP server over stdio for `mcp` (its
 *  protocol logic in src/mcp.c). Every command takes --state-dir DIR. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <czmq.h>
#include <sodium.h>

#include "catalog.h"
#include "client.h"
#include "config.h"
#include "jvalid.h"
#include "mcp.h"
#include "securemem.h"
#include "statedir.h"
#include "termsafe.h"
#include "util.h"

#define CALL_TIMEOUT_MS s_call_timeout_ms()
#define LAUNCHER_WAIT_S 30 /* a launcher waits this long for a stopped kenneld (default) */
#define LAUNCHER_POLL_TIMEOUT_MS 2000 /* one status poll of the launcher's */
#define LAUNCHER_TURN_MS 200           /* how often it checks its front end and kenneld */
#define LAUNCHER_ASK_MS 5000           /* how often it asks the manager, given a dir watch */

static const char s_usage[] =
    "usage: kennel [--state-dir DIR] [--cluster URL --cluster-key FILE] COMMAND [ARGS]\n"
    "  new [--name N] [--memory SIZE] [--pids N] [--cpu N] [--tmp SIZE] [--disk SIZE|0]\n"
    "      [--timeout S] [--idle S] [--network none] [--curve] [--budget-cpu S]\n"
    "      [--budget-wall S] [--budget-cells N] [--budget-output SIZE] [--count K]\n"
    "                          create a session (or find the one named N); print its connection file\n"
    "                          (--curve: its sockets are CURVE servers; the file holds the keys;\n"
    "                          --count: K sessions, named N-1 ... N-K if named, a file a line)\n"
    "  fork SRC DST [kennel new's limits]  a new session DST holding a copy of session SRC's\n"
    "                          namespace and workspace files (limits: SRC's unless given);\n"
    "                          print its connection file, and on stderr what was not copied\n"
    "  ls                      list sessions\n"
    "  info N                  one session's details as JSON\n"
    "  rm N                    end a session\n"
    "  rekey N                 new CURVE keys for session N: the old ones are refused and\n"
    "                          their connections cut; print its connection file\n"
    "  stats                   kenneld's sandbox layers, the walls it lost, default limits\n"
    "                          and session count\n"
    "  runtime [--json]        the kernels' Python packages and versions, and the runtime\n"
    "                          digest that kernel_info_reply and execute_reply carry\n"
    "  runs [N] [--since T] [--json]  the last N run records (default 20), since T (seconds,\n"
    "                          or N with s, m, h or d ago, or an ISO UTC date or date-time)\n"
    "  put N LOCAL [REMOTE]    copy a file into session N's workspace (REMOTE: path in it)\n"
    "  get N REMOTE [LOCAL]    copy a file out of session N's workspace\n"
    "  files N                 list the files in session N's workspace\n"
    "  exec N CODE|- [--out DIR]  run CODE (or stdin) in session N, creating it if needed;\n"
    "                          prints streams and results, saves images, PDFs and HTML to\n"
    "                          DIR (default .) as out-N.EXT; exits 1 when the cell fails\n"
    "  exec --attach N [--out DIR]  show session N's running cell (else its last) from its\n"
    "                          start and wait for its end; Ctrl-C leaves it running\n"
    "  kernel -f FILE          kernelspec launcher: serve a session on FILE's ports and key\n"
    "  mcp --session N [kennel new's limits] [--max-request SIZE] [--max-result SIZE]\n"
    "                          a Model Context Protocol server on stdin and stdout whose tools\n"
    "                          (run_python, upload_file, download_file, list_files, restart)\n"
    "                          use session N, made on first use\n"
    "  kernelspec install [--user | --prefix P]   install the 'kennel' Jupyter kernelspec\n"
    "  drain NODE, undrain NODE  (--cluster) stop placing sessions on NODE and move its\n"
    "                          sessions off it (each revives elsewhere on its next request)\n"
    "With --cluster redis://HOST:PORT (or $KENNEL_CLUSTER) and --cluster-key FILE (or\n"
    "$KENNEL_CLUSTER_KEY), commands go to each session's node (docs/cluster.md).\n"
    "The state directory is --state-dir, else $KENNEL_STATE_DIR, else ~/.local/state/kennel.\n"
    "$KENNEL_CALL_TIMEOUT: seconds a command waits for kenneld's answer, or for a session's\n"
    "kernel to be ready (default 30).\n";

/*  Whole seconds from the environment variable name, lo to hi; def when unset, or when set
 *  to anything else (said on stderr the first time, through *said). */
static int s_env_seconds(const char *name, long lo, long hi, int def, int *said)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (*end || n < lo || n > hi) {
        if (!(*said)++)
            fprintf(stderr, "kennel: %s=%s is not %ld-%ld seconds; using %d\n", name, v, lo, hi,
                    def);
        return def;
    }
    return (int)n;
}

/*  How long a call waits for kenneld's answer, or a kernel to be ready: $KENNEL_CALL_TIMEOUT
 *  seconds, else 30. */
static int s_call_timeout_ms(void)
{
    static int said;
    return 1000 * s_env_seconds("KENNEL_CALL_TIMEOUT", 1, 3600, 30, &said);
}

static char s_state_dir[PATH_MAX];
static json_t *s_target; /* kennel --cluster: the node whose manager calls go to; NULL: local */

/*  What a kernel sends (streams, results, tracebacks, the names of the files a cell made) is
 *  untrusted: written raw to a terminal, it could set the window title, write the clipboard
 *  (OSC 52), clear the screen or move the cursor over what kennel printed. So text for a
 *  terminal goes through termsafe (colours pass, other sequences and controls are shown
 *  escaped); text for a pipe or a file is written byte for byte, as scripts expect. stdout
 *  and stderr are judged each on its own; each has its termsafe state, as a sequence may be
 *  split over two messages. */
static struct {
    int is_tty; /* -1 until asked */
    termsafe_t safe;
} s_untrusted[2] = {{-1, {{0}, 0}}, {-1, {{0}, 0}}};

#define UNTRUSTED_SLICE 4096 /* bytes filtered at a time, into a buffer on the stack */

/*  Write kernel text to f (stdout or stderr), filtered when f is a terminal. */
static void s_put_untrusted(FILE *f, const char *text)
{
    int i = f == stderr;
    assert(f == stdout || f == stderr);
    if (s_untrusted[i].is_tty < 0)
        s_untrusted[i].is_tty = isatty(fileno(f));
    if (!s_untrusted[i].is_tty) {
        fputs(text, f);
        return;
    }
    char out[TERMSAFE_OUT_MAX(UNTRUSTED_SLICE)];
    for (size_t left = strlen(text), n; left; left -= n, text += n) {
        n = left < UNTRUSTED_SLICE ? left : UNTRUSTED_SLICE;
        fwrite(out, 1, termsafe_feed(&s_untrusted[i].safe, text, n, out), f);
    }
}

/*  The end of the kernel's text: what termsafe still holds (an unfinished sequence) is
 *  written, escaped. */
static void s_end_untrusted(void)
{
    char out[TERMSAFE_OUT_MAX(0)];
    for (int i = 0; i < 2; i++) {
        FILE *f = i ? stderr : stdout;
        if (s_untrusted[i].is_tty > 0) {
            fwrite(out, 1, termsafe_finish(&s_untrusted[i].safe, out), f);
            fflush(f);
        }
    }
}

/*  One manager request (content stolen), with an optional buffer each way (see
 *  client_manager_call_data). The reply when its status is ok; otherwise the reason is
 *  printed and NULL returned. */
static void s_target_node(const json_t *rec);
static int s_redirects; /* Redirects followed: at most 2 (a node's word against a loop) */

static json_t *s_call_data(const char *type, json_t *content, const void *in, size_t in_len,
                           void **out, size_t *out_len)
{
    char err[512];
    if (!content) { /* json_pack refused an argument: a string that is not UTF-8 */
        fprintf(stderr, "kennel: names and paths must be UTF-8 text\n");
        return NULL;
    }
    json_t *content_copy = s_target ? json_deep_copy(content) : NULL; /* for a redirect */
    json_t *reply = s_target ? client_manager_call_at(s_target, type, content, in, in_len, out,
                                                      out_len, CALL_TIMEOUT_MS, err, sizeof err)
                             : client_manager_call_data(s_state_dir, type, content, in, in_len,
                                                        out, out_len, CALL_TIMEOUT_MS, err,
                                                        sizeof err);
    if (!reply) {
        fprintf(stderr, "kennel: %s\n", err);
        json_decref(content_copy);
        return NULL;
    }
    const char *status = json_string_value(json_object_get(reply, "status"));
    const char *moved = json_string_value(json_object_get(reply, "manager"));
    if (s_target && s_redirects < 2 && status && strcmp(status, "error") == 0 && moved &&
        strncmp(moved, "tcp://", 6) == 0 &&
        strcmp(json_string_value(json_object_get(reply, "ename")) ?: "", "Redirect") == 0) {
        /* The node says the session is another's (the catalog moved it since we read it). */
        s_redirects++;
        json_t *rec = json_pack("{s:s}", "manager", moved);
        s_target_node(rec);
        json_decref(rec);
        json_decref(reply);
        return s_call_data(type, content_copy, in, in_len, out, out_len);
    }
    json_decref(content_copy);
    if (!status || strcmp(status, "ok") != 0) {
        fprintf(stderr, "kennel: %s: %s\n",
                json_string_value(json_object_get(reply, "ename")) ?: "Error",
                json_string_value(json_object_get(reply, "evalue")) ?: "request failed");
        json_decref(reply);
        if (out) {
            free(*out);
            *out = NULL;
        }
        return NULL;
    }
    return reply;
}

static json_t *s_call(const char *type, json_t *content)
{
    return s_call_data(type, content, NULL, 0, NULL, NULL);
}

/*  One of kenneld's limits as stats_request shows it (path: "max_file", or "limits" then
 *  "max_message"), or 0 when kenneld cannot say. */
static size_t s_kenneld_limit(const char *outer, const char *inner)
{
    json_t *r = s_call("stats_request", json_object());
    json_t *v = json_object_get(r, outer);
    if (inner)
        v = json_object_get(v, inner);
    size_t n = json_is_integer(v) && json_integer_value(v) > 0 ? (size_t)json_integer_value(v) : 0;
    json_decref(r);
    return n;
}

static json_t *s_create(const char *name)
{
    return s_call("create_request", name ? json_pack("{s:s}", "name", name) : json_object());
}

/* ---- kennel --cluster: the catalog names each session's node; calls go to that node ------- */

static char s_cluster[256];  /* --cluster or $KENNEL_CLUSTER: redis://HOST:PORT; "" when none */
static char s_cluster_key[PATH_MAX]; /* --cluster-key or $KENNEL_CLUSTER_KEY */
static json_t *s_keys;       /* that file's {key, curve_publickey, curve_secretkey} */

#define CLUSTER_REDIS_MS 1000 /* Redis unreachable: `kennel new` fails within this */

static catalog_t *s_catalog(void)
{
    char err[512];
    catalog_t *cat = catalog_connect(s_cluster, CLUSTER_REDIS_MS, err, sizeof err);
    if (!cat)
        fprintf(stderr, "kennel: %s\n", err);
    return cat;
}

static int s_load_keys(void)
{
    if (!s_cluster_key[0]) {
        fprintf(stderr, "kennel: --cluster needs the nodes' manager keys: --cluster-key FILE or "
                        "KENNEL_CLUSTER_KEY (the nodes' SHARED/cluster-key.json)\n");
        return -1;
    }
    json_error_t jerr;
    s_keys = json_load_file(s_cluster_key, 0, &jerr);
    if (!json_is_string(json_object_get(s_keys, "key"))) {
        fprintf(stderr, "kennel: %s is not a cluster key file: %s\n", s_cluster_key,
                s_keys ? "no key" : jerr.text);
        json_decref(s_keys);
        s_keys = NULL;
        return -1;
    }
    return 0;
}

/*  Manager calls go to this node's manager from now on. */
static void s_target_node(const json_t *rec)
{
    json_decref(s_target);
    s_target = json_pack("{s:s, s:O, s:O, s:O}", "endpoint",
                         json_string_value(json_object_get(rec, "manager")), "key",
                         json_object_get(s_keys, "key"), "curve_publickey",
                         json_object_get(s_keys, "curve_publickey"), "curve_secretkey",
                         json_object_get(s_keys, "curve_secretkey"));
}

static json_t *s_nodes(catalog_t *cat)
{
    int bad = 0;
    json_t *nodes = catalog_nodes(cat, &bad);
    if (!nodes)
        fprintf(stderr, "kennel: %s\n", catalog_error(cat));
    else if (bad)
        fprintf(stderr, "kennel: warning: %d malformed node record(s) in the catalog, skipped\n",
                bad);
    return nodes;
}

static const json_t *s_node_named(const json_t *nodes, const char *name)
{
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n)
        if (strcmp(json_string_value(json_object_get(n, "node")), name) == 0)
            return n;
    return NULL;
}

/*  Of a and b, the node with more free memory (in steps of 256 MiB: a few pages more is no
 *  reason), then fewer sessions. */
static const json_t *s_better(const json_t *a, const json_t *b)
{
    long long ma = json_integer_value(json_object_get(a, "mem_free")) >> 28;
    long long mb = json_integer_value(json_object_get(b, "mem_free")) >> 28;
    if (ma != mb)
        return ma > mb ? a : b;
    return json_integer_value(json_object_get(a, "sessions")) <=
                   json_integer_value(json_object_get(b, "sessions"))
               ? a
               : b;
}

/*  Placement: the better of two random live nodes that take sessions (not drained, not
 *  avoid, below their --max-sessions). NULL when there is none. */
static const json_t *s_place(const json_t *nodes, const char *avoid)
{
    const json_t *ok[256];
    size_t n = 0, i;
    json_t *r;
    json_array_foreach(nodes, i, r) {
        if (n == sizeof ok / sizeof ok[0] || json_is_true(json_object_get(r, "draining")) ||
            (avoid && strcmp(json_string_value(json_object_get(r, "node")), avoid) == 0) ||
            json_integer_value(json_object_get(r, "sessions")) >=
                json_integer_value(json_object_get(r, "max_sessions")))
            continue;
        ok[n++] = r;
    }
    if (n == 0)
        return NULL;
    const json_t *a = ok[randombytes_uniform((uint32_t)n)];
    const json_t *b = ok[randombytes_uniform((uint32_t)n)];
    return s_better(a, b);
}

#define CLUSTER_PROBE_MS 1500 /* a node's manager silent this long is taken for dead */

/*  The target's manager answers. */
static int s_probe(void)
{
    char err[256];
    json_t *r = client_manager_call_at(s_target, "stats_request", json_object(), NULL, 0, NULL,
                                       NULL, CLUSTER_PROBE_MS, err, sizeof err);
    json_decref(r);
    return r != NULL;
}

/*  Point manager calls at session name's node. A session on a live node is served there; one
 *  whose node is dead or drained (or whose entry is garbage) is claimed for another node,
 *  atomically, and revived there from its checkpoint in the shared directory. A name the
 *  catalog lacks is placed when create is set (content: create_request's, stolen), else it
 *  is NoSuchSession. *reply: the create_reply when this call created or moved the session.
 *  0, or -1 after printing why. */
static int s_cluster_route(const char *name, int create, json_t *content, json_t **reply)
{
    *reply = NULL;
    catalog_t *cat = s_catalog();
    json_t *nodes = cat ? s_nodes(cat) : NULL;
    int rc = -1;
    catalog_entry_t e;
    int found = nodes ? catalog_lookup(cat, name, &e) : -1;
    if (found < 0 && nodes)
        fprintf(stderr, "kennel: %s; it is repaired on the next kennel new\n", catalog_error(cat));
    if (found < 0 && !(create && nodes))
        goto done;
    const json_t *home = found == 1 ? s_node_named(nodes, e.node) : NULL;
    if (home && !json_is_true(json_object_get(home, "draining"))) {
        s_target_node(home);
        if (s_probe()) {
            rc = 0;
            goto done;
        }
        /* Its record lives, its manager does not answer: killed a moment ago. Its record
         * lapses within the heartbeat's TTL; then the session moves. */
        for (int tries = 0; home && tries < 24; tries++) {
            usleep(250 * 1000);
            json_decref(nodes);
            if (!(nodes = s_nodes(cat)))
                goto done;
            home = s_node_named(nodes, e.node);
        }
        if (home) {
            fprintf(stderr, "kennel: node %s does not answer, yet still heartbeats\n", e.node);
            goto done;
        }
    }
    if (found == 0 && !create) {
        fprintf(stderr, "kennel: NoSuchSession: the cluster has no session %s\n", name);
        goto done;
    }
    const json_t *to = s_place(nodes, found == 1 ? e.node : NULL);
    if (!to) {
        fprintf(stderr, "kennel: NoNode: no live node takes sessions (all drained, full, or "
                        "none joined %s)\n", s_cluster);
        goto done;
    }
    catalog_entry_t c;
    if (catalog_claim(cat, name, json_string_value(json_object_get(to, "node")),
                      found == 1 ? e.node : NULL, &c) < 0) {
        fprintf(stderr, "kennel: %s\n", catalog_error(cat));
        goto done;
    }
    const json_t *at = s_node_named(nodes, c.node);
    if (!at) {
        fprintf(stderr, "kennel: session %s's node %s is not live\n", name, c.node);
        goto done;
    }
    s_target_node(at);
    if (!c.placed) { /* another client placed or moved it first */
        rc = 0;
        goto done;
    }
    json_t *cl = json_pack("{s:I}", "gen", (json_int_t)c.gen);
    if (c.prev[0] && c.prev_id[0]) {
        json_object_set_new(cl, "from", json_string(c.prev));
        json_object_set_new(cl, "id", json_string(c.prev_id));
    }
    json_t *req = content ? content : json_object();
    content = NULL;
    json_object_set_new(req, "name", json_string(name));
    json_object_set_new(req, "cluster", cl);
    json_t *r = s_call("create_request", req);
    if (!r) {
        /* Not served anywhere: the entry goes, unless it names a checkpoint to revive (kept
         * for a later try, and for its operator). */
        if (!c.prev_id[0])
            (void)catalog_release(cat, name, c.gen);
        else
            (void)catalog_put_back(cat, name, c.gen, c.prev, c.prev_id);
        goto done;
    }
    const char *id = json_string_value(json_object_get(json_object_get(r, "session"), "id"));
    if (id && catalog_set_id(cat, name, c.gen, id) < 0)
        fprintf(stderr, "kennel: warning: %s\n", catalog_error(cat));
    if (c.prev[0] && c.prev_id[0])
        fprintf(stderr, "kennel: session %s moved from node %s to %s (its last checkpoint)\n",
                name, c.prev, c.node);
    *reply = r;
    rc = 0;
done:
    json_decref(content);
    json_decref(nodes);
    catalog_destroy(&cat);
    return rc;
}

/*  The connection in a cluster reply, written where this machine's client can read it
 *  (STATE/cluster/NAME.json, 0600): its path, or NULL. */
static const char *s_cluster_connection_file(const json_t *session, char *path, size_t len)
{
    json_t *conn = json_object_get(session, "connection");
    const char *name = json_string_value(json_object_get(session, "name"));
    char dir[PATH_MAX];
    if (!json_is_object(conn) || !name ||
        snprintf(dir, sizeof dir, "%s/cluster", s_state_dir) >= (int)sizeof dir ||
        snprintf(path, len, "%s/%s.json", dir, name) >= (int)len)
        return NULL;
    if ((mkdir(s_state_dir, 0700) < 0 && errno != EEXIST) ||
        (mkdir(dir, 0700) < 0 && errno != EEXIST) ||
        statedir_write_json(path, conn, 0) < 0) {
        fprintf(stderr, "kennel: cannot write %s: %s\n", path, strerror(errno));
        return NULL;
    }
    return path;
}

static int s_cluster_ls(void)
{
    catalog_t *cat = s_catalog();
    json_t *nodes = cat ? s_nodes(cat) : NULL;
    json_t *entries = nodes ? catalog_sessions(cat) : NULL;
    catalog_destroy(&cat);
    if (!entries) {
        json_decref(nodes);
        return 1;
    }
    printf("%-20s %-12s %-10s %-9s %6s  %s\n", "NAME", "NODE", "ID", "STATE", "CELLS", "LAST");
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n) {
        s_target_node(n);
        json_t *r = s_call("list_request", json_object());
        size_t j;
        json_t *s;
        json_array_foreach(json_object_get(r, "sessions"), j, s) {
            const char *name = json_string_value(json_object_get(s, "name"));
            printf("%-20s %-12s %-10.8s %-9s %6lld  %s\n", name,
                   json_string_value(json_object_get(n, "node")),
                   json_string_value(json_object_get(s, "id")),
                   json_string_value(json_object_get(s, "state")),
                   (long long)json_integer_value(json_object_get(s, "cells")),
                   json_string_value(json_object_get(s, "last_outcome")) ?: "");
            json_object_del(entries, name);
        }
        json_decref(r);
    }
    /* In the catalog, on no live node's list: a dead node's (revived on the next request)
     * or a drained one's. */
    const char *name;
    json_t *e;
    json_object_foreach(entries, name, e) {
        const char *node = json_string_value(json_object_get(e, "node"));
        printf("%-20s %-12s %-10.8s %-9s %6s  %s\n", name, node,
               json_string_value(json_object_get(e, "id")),
               s_node_named(nodes, node) ? "moving" : "node-gone", "-",
               "revived on another node by its next request");
    }
    json_decref(entries);
    json_decref(nodes);
    return 0;
}

/*  kennel drain NODE: no new sessions there; its sessions are saved and released, and each
 *  revives on another node with its next request. Waits (at most 60 s) until the node says
 *  it holds none. undrain: serve and place there again. */
static int s_cluster_drain(const char *node, int on)
{
    catalog_t *cat = s_catalog();
    json_t *nodes = cat ? s_nodes(cat) : NULL;
    const json_t *rec = nodes ? s_node_named(nodes, node) : NULL;
    int rc = 1;
    if (nodes && !rec)
        fprintf(stderr, "kennel: node %s is not live\n", node);
    if (!rec || catalog_drain(cat, node, on) < 0) {
        if (rec)
            fprintf(stderr, "kennel: %s\n", catalog_error(cat));
        goto done;
    }
    s_target_node(rec);
    json_t *r = s_call("drain_request", json_pack("{s:b}", "on", on));
    if (!r)
        goto done;
    json_decref(r);
    rc = 0;
    for (int tries = 0; on && tries < 120; tries++) {
        json_decref(nodes);
        nodes = s_nodes(cat);
        rec = nodes ? s_node_named(nodes, node) : NULL;
        if (!rec || json_is_true(json_object_get(rec, "drained")))
            break;
        usleep(500 * 1000);
    }
    if (on && rec && !json_is_true(json_object_get(rec, "drained"))) {
        fprintf(stderr, "kennel: node %s still holds sessions after 60 s (cells running?); "
                        "it goes on draining\n", node);
        rc = 1;
    } else if (on) {
        printf("node %s drained: its sessions revive on other nodes with their next request\n",
               node);
    }
done:
    json_decref(nodes);
    catalog_destroy(&cat);
    return rc;
}

/*  A finite number and nothing after it; -1 otherwise. */
static double s_number(const char *text)
{
    char *end;
    double v = strtod(text, &end);
    return end == text || *end || !isfinite(v) ? -1 : v;
}

/*  "512M", "2G", "1048576" → bytes; -1 when malformed. */
static double s_bytes(const char *text)
{
    char *end;
    double v = strtod(text, &end);
    if (!isfinite(v))
        return -1;
    double mult = 1;
    if (*end == 'K' || *end == 'k')
        mult = 1024.0, end++;
    else if (*end == 'M' || *end == 'm')
        mult = 1048576.0, end++;
    else if (*end == 'G' || *end == 'g')
        mult = 1073741824.0, end++;
    return (end == text || *end || v <= 0) ? -1 : v * mult;
}

#define NEW_MAX_COUNT 1000 /* sessions one `kennel new --count` makes, at most */

/*  kennel new's options into content ({"name", "limits"}, as create_request takes them), and
 *  its --count into *count (NULL: the command takes none); for kennel mcp (mcp not NULL),
 *  --session instead of --name, and its own bounds into *mcp. 0, or 2 after a usage error,
 *  said. */
static int s_session_options(int argc, char **argv, json_t *content, mcp_limits_t *mcp,
                             long *count)
{
    json_t *limits = json_object();
    static const struct option opts[] = {
        {"name", required_argument, NULL, 'n'}, {"memory", required_argument, NULL, 'm'},
        {"pids", required_argument, NULL, 'p'}, {"cpu", required_argument, NULL, 'c'},
        {"tmp", required_argument, NULL, 't'},  {"network", required_argument, NULL, 'N'},
        {"disk", required_argument, NULL, 'd'},
        {"timeout", required_argument, NULL, 'T'}, {"idle", required_argument, NULL, 'i'},
        {"session", required_argument, NULL, 's'}, {"max-request", required_argument, NULL, 'R'},
        {"max-result", required_argument, NULL, 'r'}, {"curve", no_argument, NULL, 'V'},
        {"budget-cpu", required_argument, NULL, 'U'}, {"budget-wall", required_argument, NULL, 'W'},
        {"budget-cells", required_argument, NULL, 'L'},
        {"budget-output", required_argument, NULL, 'O'}, {"count", required_argument, NULL, 'K'},
        {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, mcp ? "+" : "+n:", opts, NULL)) != -1) {
        /* --name is new's, --session and the bounds mcp's */
        if (c == (mcp ? 'n' : 's') || (!mcp && (c == 'R' || c == 'r'))) {
            fprintf(stderr, "kennel: %s takes no --%s\n", mcp ? "mcp" : "new",
                    c == 'n' ? "name" : c == 's' ? "session" : c == 'R' ? "max-request"
                                                                        : "max-result");
            goto bad;
        }
        if (c == 'V') {
            json_object_set_new(content, "curve", json_true());
            continue;
        }
        if (c == 'K') {
            char *end;
            long k = strtol(optarg, &end, 10);
            if (!count) {
                fprintf(stderr, "kennel: %s takes no --count\n", mcp ? "mcp" : "fork");
                goto bad;
            }
            if (*optarg == '\0' || *end || k < 1 || k > NEW_MAX_COUNT) {
                fprintf(stderr, "kennel: bad value for --count: %s (1 to %d)\n", optarg,
                        NEW_MAX_COUNT);
                goto bad;
            }
            *count = k;
            continue;
        }
        int is_name = c == 'n' || c == 's';
        double v = optarg && !is_name && c != 'N'
                       ? (c == 'p' || c == 'c' || c == 'T' || c == 'i' || c == 'U' ||
                                  c == 'W' || c == 'L'
                              ? s_number(optarg)
                              : s_bytes(optarg))
                       : 0;
        json_t *jname = is_name ? json_string(optarg) : NULL;
        if (is_name && !jname) {
            /* (json_string's NULL, once dropped without a word: an unnamed session) */
            fprintf(stderr, "kennel: the name must be UTF-8 text\n");
            goto bad;
        } else if (is_name)
            json_object_set_new(content, "name", jname);
        else if (c == 'N' && strcmp(optarg, "none") == 0)
            ; /* the only network a kernel has: none */
        else if ((c == 'd' || c == 'T' || c == 'i' || c == 'U' || c == 'W' || c == 'L' ||
                  c == 'O') &&
                 optarg && strcmp(optarg, "0") == 0)
            json_object_set_new(limits,
                                c == 'd'   ? "disk"
                                : c == 'T' ? "timeout"
                                : c == 'i' ? "idle"
                                : c == 'U' ? "budget_cpu"
                                : c == 'W' ? "budget_wall"
                                : c == 'L' ? "budget_cells"
                                           : "budget_output",
                                json_integer(0)); /* no cap, no deadline, never evicted, no
                                                   * budget */
        else if ((c == 'R' || c == 'r') && v >= 1 && v <= (double)(1u << 30))
            *(c == 'R' ? &mcp->max_request : &mcp->max_result) = (size_t)v;
        else if (c != 'N' && c != '?' && c != 'R' && c != 'r' && v > 0)
            json_object_set_new(limits,
                                c == 'm'   ? "memory"
                                : c == 'p' ? "pids"
                                : c == 'c' ? "cpu"
                                : c == 'T' ? "timeout"
                                : c == 'i' ? "idle"
                                : c == 'd' ? "disk"
                                : c == 'U' ? "budget_cpu"
                                : c == 'W' ? "budget_wall"
                                : c == 'L' ? "budget_cells"
                                : c == 'O' ? "budget_output"
                                           : "tmp",
                                json_real(v));
        else {
            const char *opt = "option";
            for (size_t o = 0; opts[o].name; o++)
                if (opts[o].val == c)
                    opt = opts[o].name;
            if (c == 'N')
                opt = "network (only none)";
            if (c != '?')
                fprintf(stderr, "kennel: bad value for --%s: %s%s\n", opt, optarg ? optarg : "",
                        c == 'R' || c == 'r' ? " (1 byte to 1G)" : "");
            goto bad;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kennel: %s takes no argument %s (a name goes after --%s)\n",
                mcp ? "mcp" : "new", argv[optind], mcp ? "session" : "name");
        goto bad;
    }
    if (json_object_size(limits))
        json_object_set_new(content, "limits", limits);
    else
        json_decref(limits);
    return 0;
bad: /* a usage error, said */
    json_decref(limits);
    return 2;
}

static int s_new_one(json_t *content);

static int s_cmd_new(int argc, char **argv)
{
    json_t *content = json_object();
    long count = 0;
    if (s_session_options(argc, argv, content, NULL, &count) != 0) {
        json_decref(content);
        return 2;
    }
    if (count == 0)
        return s_new_one(content);
    /* --count: the sessions one after another over this one process's connections, as a
     * service making sessions for its users would, without a process (and its linking, its
     * keys, its connections) each. */
    const char *base = json_string_value(json_object_get(content, "name"));
    int rc = 0;
    for (long i = 1; i <= count && rc == 0; i++) {
        json_t *one = json_deep_copy(content);
        char name[1024];
        if (base) {
            if (snprintf(name, sizeof name, "%s-%ld", base, i) >= (int)sizeof name) {
                fprintf(stderr, "kennel: the name is too long\n");
                json_decref(one);
                rc = 2;
                break;
            }
            json_object_set_new(one, "name", json_string(name));
        }
        rc = one ? s_new_one(one) : 1;
        fflush(stdout); /* each file as it is made */
    }
    json_decref(content);
    return rc;
}

/*  Create (or find) one session of content (taken); print its connection file. */
static int s_new_one(json_t *content)
{
    json_t *r = NULL;
    if (s_cluster[0]) {
        /* A cluster's sessions are found by name from any machine: one is always named. */
        char made[48];
        if (!json_is_string(json_object_get(content, "name"))) {
            snprintf(made, sizeof made, "s-");
            util_uuid(made + 2);
            made[10] = '\0';
            json_object_set_new(content, "name", json_string(made));
        }
        const char *name = json_string_value(json_object_get(content, "name"));
        if (s_cluster_route(name, 1, json_deep_copy(content), &r) < 0) {
            json_decref(content);
            return 1;
        }
    }
    if (!r)
        r = s_call("create_request", content);
    else
        json_decref(content);
    if (!r)
        return 1;
    json_t *session = json_object_get(r, "session");
    char path[PATH_MAX + 64];
    const char *file = s_cluster[0] ? s_cluster_connection_file(session, path, sizeof path)
                                    : json_string_value(json_object_get(session, "connection_file"));
    if (file)
        printf("%s\n", file);
    json_decref(r);
    return file ? 0 : 1;
}

/*  kennel fork SRC DST [limits]: argv[0] is "fork". */
static int s_cmd_fork(int argc, char **argv)
{
    if (argc < 3 || argv[1][0] == '-' || argv[2][0] == '-') {
        fputs("usage: kennel fork SRC DST [kennel new's limits]\n", stderr);
        return 2;
    }
    json_t *content = json_object();
    /* The options after DST, read as new's (getopt starts at argv[1]). */
    if (s_session_options(argc - 2, argv + 2, content, NULL, NULL) != 0) {
        json_decref(content);
        return 2;
    }
    if (json_object_get(content, "name") || json_object_get(content, "curve")) {
        fprintf(stderr, "kennel: fork takes no --%s (the fork's name is DST; it is CURVE when "
                        "SRC is)\n",
                json_object_get(content, "name") ? "name" : "curve");
        json_decref(content);
        return 2;
    }
    json_t *src = json_string(argv[1]), *dst = json_string(argv[2]);
    if (!src || !dst) {
        json_decref(src);
        json_decref(dst);
        json_decref(content);
        fprintf(stderr, "kennel: names must be UTF-8 text\n");
        return 2;
    }
    json_object_set_new(content, "session", src);
    json_object_set_new(content, "name", dst);
    json_t *r = s_call("fork_request", content);
    if (!r)
        return 1;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(r, "not_copied"), i, e)
        fprintf(stderr, "%s%s", i ? ", " : "kennel: not copied: ", json_string_value(e));
    if (json_array_size(json_object_get(r, "not_copied")))
        fputc('\n', stderr);
    printf("%s\n", json_string_value(json_object_get(json_object_get(r, "session"), "connection_file")));
    json_decref(r);
    return 0;
}

static void s_human_bytes(char *out, size_t len, long long b)
{
    if (b >= 1 << 30)
        snprintf(out, len, "%.1fG", b / 1073741824.0);
    else if (b >= 1 << 20)
        snprintf(out, len, "%.1fM", b / 1048576.0);
    else
        snprintf(out, len, "%lldK", b / 1024);
}

static int s_cmd_ls(void)
{
    json_t *r = s_call("list_request", json_object());
    if (!r)
        return 1;
    size_t i;
    json_t *s;
    /* Under kenneld --tenants an operator sees every tenant's sessions: whose each is. */
    int tenants = 0, wname = 20, wtenant = 12; /* columns as wide as their longest value */
    json_array_foreach(json_object_get(r, "sessions"), i, s) {
        const char *t = json_string_value(json_object_get(s, "tenant"));
        const char *n = json_string_value(json_object_get(s, "name"));
        tenants |= t != NULL;
        if (t && (int)strlen(t) > wtenant)
            wtenant = (int)strlen(t);
        if (n && (int)strlen(n) > wname)
            wname = (int)strlen(n);
    }
    if (tenants)
        printf("%-*s ", wtenant, "TENANT");
    printf("%-*s %-10s %-9s %8s %6s %8s %7s %7s %7s  %s\n", wname, "NAME", "ID", "STATE", "IDLE",
           "CELLS", "PID", "MEM", "PSS", "USS", "LAST");
    json_array_foreach(json_object_get(r, "sessions"), i, s) {
        if (tenants)
            printf("%-*s ", wtenant, json_string_value(json_object_get(s, "tenant")) ?: "-");
        char mem[32], pss[32], uss[32];
        s_human_bytes(mem, sizeof mem, json_integer_value(json_object_get(s, "memory_bytes")));
        s_human_bytes(pss, sizeof pss, json_integer_value(json_object_get(s, "pss_bytes")));
        s_human_bytes(uss, sizeof uss, json_integer_value(json_object_get(s, "uss_bytes")));
        printf("%-*s %-10.8s %-9s %7.1fs %6lld %8lld %7s %7s %7s  %s\n", wname,
               json_string_value(json_object_get(s, "name")), json_string_value(json_object_get(s, "id")),
               json_string_value(json_object_get(s, "state")),
               json_integer_value(json_object_get(s, "idle_ms")) / 1000.0,
               (long long)json_integer_value(json_object_get(s, "cells")),
               (long long)json_integer_value(json_object_get(s, "kernel_pid")), mem, pss, uss,
               json_string_value(json_object_get(s, "last_outcome")) ?: "");
    }
    json_decref(r);
    return 0;
}

/*  The last component of path (the default name of a copied file). */
static const char *s_basename(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/*  kennel put / get / files: the workspace file API. */
static int s_by_path(const void *x, const void *y)
{
    const char *a = json_string_value(json_object_get(*(json_t *const *)x, "path"));
    const char *b = json_string_value(json_object_get(*(json_t *const *)y, "path"));
    return strcmp(a ? a : "", b ? b : "");
}

static int s_cmd_file(const char *cmd, const char *name, const char *a, const char *b)
{
    void *in = NULL, *out = NULL;
    size_t in_len = 0, out_len = 0;
    json_t *content = json_pack("{s:s}", "session", name);
    const char *type = "file_list_request";
    if (strcmp(cmd, "put") == 0) {
        type = "file_put_request";
        in = util_read_file(a, 1u << 30, &in_len);
        if (!in) {
            fprintf(stderr, "kennel: cannot read %s: %s\n", a, strerror(errno));
            json_decref(content);
            return 1;
        }
        json_object_set_new(content, "path", json_string(b ? b : s_basename(a)));
        size_t max = in_len > (1u << 20) ? s_kenneld_limit("max_file", NULL) : 0;
        if (max && in_len > max) {
            fprintf(stderr, "kennel: TooLarge: %s is %zu bytes; kenneld moves files of at most %zu "
                    "(kenneld --max-file)\n", a, in_len, max);
            free(in);
            json_decref(content);
            return 1;
        }
    } else if (strcmp(cmd, "get") == 0) {
        type = "file_get_request";
        json_object_set_new(content, "path", json_string(a));
    }
    json_t *r = s_call_data(type, content, in, in_len, &out, &out_len);
    free(in);
    int rc = 1;
    if (r && strcmp(cmd, "get") == 0) {
        const char *local = b ? b : s_basename(a);
        char into[PATH_MAX];
        struct stat st;
        if (b && strcmp(b, "-") != 0 && stat(b, &st) == 0 && S_ISDIR(st.st_mode)) {
            /* Into a directory, under the file's own name, as cp does. */
            snprintf(into, sizeof into, "%s%s%s", b, b[strlen(b) - 1] == '/' ? "" : "/",
                     s_basename(a));
            local = into;
        }
        FILE *f = strcmp(local, "-") == 0 ? stdout : fopen(local, "wbe");
        rc = f && (out_len == 0 || fwrite(out, 1, out_len, f) == out_len) ? 0 : 1;
        if (f && f != stdout && fclose(f) != 0)
            rc = 1;
        if (rc)
            fprintf(stderr, "kennel: cannot write %s: %s\n", local, strerror(errno));
    } else if (r && strcmp(cmd, "files") == 0) {
        json_t *files = json_object_get(r, "files");
        /* In name order (kenneld lists in the directories' order). */
        size_t n = json_array_size(files), i;
        json_t **sorted = calloc(n ? n : 1, sizeof *sorted);
        for (i = 0; sorted && i < n; i++)
            sorted[i] = json_array_get(files, i);
        if (sorted)
            qsort(sorted, n, sizeof *sorted, s_by_path);
        for (i = 0; i < n; i++) {
            json_t *f = sorted ? sorted[i] : json_array_get(files, i);
            /* The names are the cell's (untrusted); the line's end ends a sequence left open. */
            printf("%10lld  ", (long long)json_integer_value(json_object_get(f, "size")));
            s_put_untrusted(stdout, json_string_value(json_object_get(f, "path")) ?: "");
            s_put_untrusted(stdout, json_is_false(json_object_get(f, "utf8"))
                                        ? "  (not UTF-8: \\xNN are bytes)\n"
                                        : "\n");
        }
        free(sorted);
        rc = 0;
    } else if (r) {
        rc = 0; /* put */
    }
    free(out);
    json_decref(r);
    return rc;
}

static int s_cmd_info(const char *name)
{
    json_t *r = s_call("info_request", json_pack("{s:s}", "session", name));
    if (!r)
        return 1;
    char *text = json_dumps(json_object_get(r, "session"), JSON_INDENT(2) | JSON_SORT_KEYS);
    printf("%s\n", text);
    free(text);
    json_decref(r);
    return 0;
}

#define RUNS_MAX_LINE (1u << 20) /* a record longer than this is skipped (its code, say) */
#define RUNS_MAX_FILE ((size_t)1 << 30)

/*  --since T: seconds, or N with s, m, h or d (that long ago), or an ISO date or date-time
 *  (UTC, as records write it). The earliest record time to show, as records write it, into
 *  out; -1 if T is none of these. */
static int s_since(const char *t, char out[32])
{
    char *end;
    errno = 0;
    double v = strtod(t, &end);
    if (end != t && !errno && v >= 0 && (!*end || (strchr("smhd", *end) && !end[1]))) {
        double mult = !*end || *end == 's' ? 1 : *end == 'm' ? 60 : *end == 'h' ? 3600 : 86400;
        time_t at = time(NULL) - (time_t)(v * mult);
        struct tm tm;
        gmtime_r(&at, &tm);
        strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
        return 0;
    }
    /* 2026-11-29, 2026-11-29T03:00, 2026-11-29T03:00:05: compared as text, prefix-wise. */
    size_t n = strlen(t);
    if (n < 10 || n > 23 || t[4] != '-' || t[7] != '-' || (n > 10 && t[10] != 'T'))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!strchr(i == 4 || i == 7 ? "-" : i == 10 ? "T" : i == 13 || i == 16 ? ":"
                    : i == 19 ? "." : "0123456789", t[i]))
            return -1;
    snprintf(out, 32, "%s", t);
    return 0;
}

static int s_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*  The last n run records (since `since`, "" for all), oldest first, from STATE/runs: as
 *  JSON lines, or one line each for a terminal. */
static int s_cmd_runs(long n, const char *since, int as_json)
{
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/runs", s_state_dir);
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return 0; /* no cell has run yet */
        fprintf(stderr, "kennel: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char *names[4096];
    size_t nnames = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nnames < sizeof names / sizeof names[0]) {
        size_t len = strlen(e->d_name);
        /* Days before since's hold nothing to show. */
        if (len == 16 && strcmp(e->d_name + 10, ".jsonl") == 0 &&
            (!since[0] || strncmp(e->d_name, since, 10) >= 0))
            names[nnames++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, nnames, sizeof names[0], s_name_cmp);
    /* The newest n: read the days newest first, keep lines until n are kept. */
    json_t *kept = json_array();
    for (size_t f = nnames; f-- > 0 && (long)json_array_size(kept) < n;) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        size_t len = 0;
        char *text = util_read_file(path, RUNS_MAX_FILE, &len);
        if (!text)
            continue;
        json_t *day = json_array();
        for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save)) {
            json_t *rec = strlen(line) <= RUNS_MAX_LINE ? json_loads(line, 0, NULL) : NULL;
            const char *when = json_string_value(json_object_get(rec, "time"));
            if (!when || (since[0] && strncmp(when, since, strlen(since)) < 0)) {
                json_decref(rec);
                continue;
            }
            json_array_append_new(day, rec);
        }
        free(text);
        /* Prepend this day's last lines (the kept ones are later). */
        size_t take = json_array_size(day), room = (size_t)n - json_array_size(kept);
        size_t from = take > room ? take - room : 0;
        json_t *merged = json_array();
        for (size_t i = from; i < take; i++)
            json_array_append(merged, json_array_get(day, i));
        json_array_extend(merged, kept);
        json_decref(kept);
        json_decref(day);
        kept = merged;
    }
    for (size_t i = 0; i < nnames; i++)
        free(names[i]);
    size_t i;
    json_t *rec;
    if (!as_json && json_array_size(kept))
        printf("%-23s  %-12s  %4s  %-16s  %8s  %8s  %9s  %-12s  %s\n", "time", "session", "cell",
               "outcome", "wall_ms", "cpu_ms", "out_bytes", "code", "error");
    json_array_foreach(kept, i, rec) {
        if (as_json) {
            char *line = json_dumps(rec, JSON_COMPACT);
            if (line)
                printf("%s\n", line);
            free(line);
            continue;
        }
        const char *name = json_string_value(json_object_get(rec, "name"));
        const char *sid = json_string_value(json_object_get(rec, "session"));
        const char *sha = json_string_value(json_object_get(rec, "code_sha256"));
        const char *err = json_string_value(json_object_get(rec, "error"));
        json_t *m = json_object_get(rec, "metrics");
        char who[16];
        snprintf(who, sizeof who, "%.12s", name && name[0] ? name : sid ? sid : "?");
        printf("%-23.23s  %-12s  %4lld  %-16.16s  %8.0f  %8.0f  %9lld  %-12.12s  %s\n",
               json_string_value(json_object_get(rec, "time")), who,
               json_integer_value(json_object_get(rec, "cell")),
               json_string_value(json_object_get(rec, "outcome")) ? json_string_value(json_object_get(rec, "outcome")) : "?",
               json_number_value(json_object_get(m, "wall_ms")),
               json_number_value(json_object_get(m, "cpu_ms")),
               json_integer_value(json_object_get(rec, "output_bytes")), sha ? sha : "-",
               err ? err : "");
    }
    json_decref(kept);
    return 0;
}

/*  The kernels' packages and versions, and the runtime digest, as kennel_runtime.py lists
 *  them with kenneld's Python, kernel runtime and --site (from kenneld.json); kenneld's
 *  sandbox shows kernels the host's /usr, so a kernel sees the same. Without a running
 *  kenneld: this build's defaults, said on stderr. Replaces this process. */
static int s_cmd_runtime(int as_json)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/kenneld.json", s_state_dir);
    char *text = statedir_kenneld_pid(s_state_dir) ? util_read_file(path, 65536, NULL) : NULL;
    json_t *info = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    json_t *rt = json_object_get(info, "runtime");
    const char *python = json_string_value(json_object_get(rt, "python"));
    const char *kernel_dir = json_string_value(json_object_get(rt, "kernel_dir"));
    const char *site = json_string_value(json_object_get(rt, "site"));
    if (!python || !kernel_dir) {
        fprintf(stderr, "kennel: kenneld is not running for %s: listing %s's runtime\n",
                s_state_dir, KENNEL_PYTHON);
        python = KENNEL_PYTHON;
        kernel_dir = KENNEL_KERNEL_DIR;
        site = NULL;
    }
    char script[PATH_MAX + 32];
    snprintf(script, sizeof script, "%s/kennel_runtime.py", kernel_dir);
    char *argv[8];
    int a = 0;
    argv[a++] = (char *)python;
    argv[a++] = "-I";
    argv[a++] = script;
    if (site && site[0])
        argv[a++] = "--site", argv[a++] = (char *)site;
    if (as_json)
        argv[a++] = "--json";
    argv[a] = NULL;
    fflush(stdout);
    execv(python, argv);
    fprintf(stderr, "kennel: cannot run %s: %s\n", python, strerror(errno));
    json_decref(info);
    return 1;
}

static int s_cmd_rm(const char *name)
{
    json_t *r = s_call("end_request", json_pack("{s:s}", "session", name));
    json_decref(r);
    if (r && s_cluster[0]) {
        catalog_t *cat = s_catalog();
        if (!cat || catalog_release(cat, name, 0) < 0) {
            if (cat)
                fprintf(stderr, "kennel: %s\n", catalog_error(cat));
            catalog_destroy(&cat);
            return 1;
        }
        catalog_destroy(&cat);
    }
    return r ? 0 : 1;
}

static char *s_read_stdin(size_t *len_out)
{
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, stdin)) > 0) {
        len += n;
        if (cap - len < 2) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) {
                free(buf);
                return NULL;
            }
            buf = grown;
        }
    }
    if (buf)
        buf[len] = '\0';
    *len_out = len;
    return buf;
}

static json_t *s_load_connection(const char *path)
{
    json_error_t jerr;
    json_t *conn = json_load_file(path, 0, &jerr);
    if (!conn)
        fprintf(stderr, "kennel: cannot read %s: %s\n", path, jerr.text);
    return conn;
}

/*  What `kennel exec` saves of a rich output, in this order, into --out DIR. */
static const struct {
    const char *mime, *ext;
    int is_base64; /* binary data travels base64-encoded (Jupyter's rule) */
} s_saved[] = {
    {"image/png", "png", 1},       {"image/jpeg", "jpg", 1}, {"image/svg+xml", "svg", 0},
    {"application/pdf", "pdf", 1}, {"text/html", "html", 0},
};
#define SAVE_MAX_TRIES 100000
static const char *s_out_dir = ".";
static int s_save_failed; /* an output could not be saved: exec's status is 1 */
static int s_out_next = 1; /* the next N worth trying */

/*  mkdir -p dir. 0, or -1 with errno. */
static int s_mkdirs(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char was = *p;
        *p = '\0';
        if (mkdir(path, 0777) < 0 && errno != EEXIST)
            return -1;
        *p = was;
        if (!was)
            break;
    }
    struct stat st;
    if (stat(path, &st) < 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/*  DIR/out-N.EXT into path ("out-N.EXT" when DIR is the default); -1 if it does not fit. */
static int s_out_path(char *path, size_t size, int n, size_t kind)
{
    int w = strcmp(s_out_dir, ".") == 0
                ? snprintf(path, size, "out-%d.%s", n, s_saved[kind].ext)
                : snprintf(path, size, "%s/out-%d.%s", s_out_dir, n, s_saved[kind].ext);
    return w < 0 || (size_t)w >= size ? -1 : 0;
}

/*  The N of one output's files: the lowest from s_out_next on at which none of the kinds
 *  data carries is taken, so that out-3.png and out-3.pdf are one figure's. */
static int s_out_number(const json_t *data)
{
    char path[PATH_MAX];
    struct stat st;
    int n = s_out_next;
    for (int tries = 0; tries < SAVE_MAX_TRIES; tries++, n++) {
        int taken = 0;
        for (size_t kind = 0; kind < sizeof s_saved / sizeof s_saved[0] && !taken; kind++)
            taken = json_object_get(data, s_saved[kind].mime) &&
                    (s_out_path(path, sizeof path, n, kind) < 0 || lstat(path, &st) == 0);
        if (!taken)
            break;
    }
    return n;
}

/*  Write len bytes to a new file DIR/out-N.EXT, N the lowest free from first on (never
 *  replacing a file), and print its path. */
static void s_save(size_t kind, const void *data, size_t len, int first)
{
    char path[PATH_MAX];
    int fd = -1, n = first;
    if (s_mkdirs(s_out_dir) < 0) {
        fprintf(stderr, "kennel: cannot create %s: %s; %s output not saved\n", s_out_dir,
                strerror(errno), s_saved[kind].mime);
        s_save_failed = 1;
        return;
    }
    for (int tries = 0; fd < 0 && tries < SAVE_MAX_TRIES; tries++, n++) {
        if (s_out_path(path, sizeof path, n, kind) < 0) {
            errno = ENAMETOOLONG;
            break;
        }
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0 || util_write_all(fd, data, len) < 0) {
        fprintf(stderr, "kennel: cannot save %s output in %s: %s\n", s_saved[kind].mime, s_out_dir,
                strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(path);
        }
        s_save_failed = 1;
        return;
    }
    close(fd);
    printf("%s\n", path);
}

/*  Save what a display_data or execute_result carries that a terminal cannot show. */
static void s_save_rich(const json_t *data)
{
    int first = 0;
    for (size_t kind = 0; kind < sizeof s_saved / sizeof s_saved[0]; kind++) {
        const char *text = json_string_value(json_object_get(data, s_saved[kind].mime));
        if (!text)
            continue;
        if (!first) {
            first = s_out_number(data);
            s_out_next = first + 1;
        }
        size_t len = strlen(text);
        if (!s_saved[kind].is_base64) {
            s_save(kind, text, len, first);
            continue;
        }
        unsigned char *bin = malloc(len / 4 * 3 + 3);
        size_t bin_len = 0;
        /* IPython ends some base64 with a newline; any white space is skipped. */
        if (bin && sodium_base642bin(bin, len / 4 * 3 + 3, text, len, " \t\r\n", &bin_len, NULL,
                                     sodium_base64_VARIANT_ORIGINAL) == 0) {
            s_save(kind, bin, bin_len, first);
        } else {
            fprintf(stderr, "kennel: %s output is not valid base64; not saved\n",
                    s_saved[kind].mime);
            s_save_failed = 1;
        }
        free(bin);
    }
}

/*  Print one iopub message of our cell. */
static void s_print_output(const jmsg_t *m)
{
    const char *type = jmsg_type(m);
    json_t *c = jmsg_content(m);
    if (strcmp(type, "stream") == 0) {
        FILE *f = strcmp(json_string_value(json_object_get(c, "name")) ?: "", "stderr") == 0 ? stderr : stdout;
        s_put_untrusted(f, json_string_value(json_object_get(c, "text")) ?: "");
        fflush(f);
    } else if (strcmp(type, "execute_result") == 0 || strcmp(type, "display_data") == 0 ||
               strcmp(type, "update_display_data") == 0) {
        /* A terminal cannot redraw an earlier output: an update is shown as a new one. */
        json_t *data = json_object_get(c, "data");
        const char *text = json_string_value(json_object_get(data, "text/plain"));
        if (text) {
            s_put_untrusted(stdout, text);
            s_put_untrusted(stdout, "\n"); /* which ends a sequence left open */
        }
        s_save_rich(data);
        fflush(stdout);
    } else if (strcmp(type, "error") == 0) {
        size_t i;
        json_t *line;
        json_array_foreach(json_object_get(c, "traceback"), i, line) {
            s_put_untrusted(stderr, json_string_value(line) ?: "");
            s_put_untrusted(stderr, "\n");
        }
    }
}

static volatile sig_atomic_t s_sigint, s_stop;
static void s_on_sigint(int sig)
{
    (void)sig;
    s_sigint++;
}
static void s_on_stop(int sig)
{
    (void)sig;
    s_stop = 1;
}

static void s_handle(int sig, void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sigaction(sig, &sa, NULL);
}

/*  1 while the session (by id) still exists; 0 when it ended or kenneld is gone, with the
 *  reason in why. */
static int s_session_alive(const char *id, char *why, size_t why_len)
{
    char err[512];
    json_t *r = client_manager_call(s_state_dir, "info_request", json_pack("{s:s}", "session", id),
                                    3000, err, sizeof err);
    const char *status = json_string_value(json_object_get(r, "status"));
    int alive = status && strcmp(status, "ok") == 0;
    if (!alive)
        snprintf(why, why_len, "%s", r ? "the session ended while the cell ran" : err);
    json_decref(r);
    return alive;
}

/*  One execute_request of ours, and what has come back for it: `kennel exec` prints its
 *  outputs, `kennel mcp` gives them to its core. */
typedef struct {
    char msg_id[40];
    int started;      /* an iopub message of it came: it reached the kernel */
    int got_reply, got_idle;
    int saw_error;    /* an iopub error came */
    json_t *reply;    /* the execute_reply's content, once in */
    json_t *reply_md; /* and its metadata (outcome, metrics, files) */
} cell_t;

/*  Send code as an execute_request with metadata (stolen; NULL: none). A request past
 *  kenneld's --max-message is refused here, with the reason in why: libzmq would drop it
 *  without a word, and the wait for its reply would never end. 0, or -1 with why. */
static int s_cell_send(client_t *cl, const char *code, json_t *metadata, cell_t *cell, char *why,
                       size_t why_len)
{
    memset(cell, 0, sizeof *cell);
    json_t *content = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent", 0,
                                "store_history", 1, "user_expressions", "allow_stdin", 0,
                                "stop_on_error", 1);
    size_t size = json_dumpb(content, NULL, 0, JSON_COMPACT) + 4096; /* + header and frames */
    size_t max = size > (1u << 20) ? s_kenneld_limit("limits", "max_message") : 0;
    if (max && size > max) {
        snprintf(why, why_len, "RequestTooLarge: the cell's request is about %zu bytes; kenneld "
                 "takes messages of at most %zu (kenneld --max-message)", size, max);
        json_decref(content);
        json_decref(metadata);
        return -1;
    }
    if (client_send_meta(cl, CLIENT_SHELL, "execute_request", content, metadata, cell->msg_id) < 0) {
        snprintf(why, why_len, "the cell could not be sent to the session");
        return -1;
    }
    return 0;
}

/*  What m, received on ch, is to cell: 1 when it is one of the cell's outputs on iopub (to
 *  show), else 0. Notes the cell's start, its reply, its errors and its idle. */
static int s_cell_take(cell_t *cell, client_channel_t ch, const jmsg_t *m)
{
    const char *parent = json_string_value(json_object_get(jmsg_json(m, JMSG_PARENT), "msg_id"));
    if (!parent || strcmp(parent, cell->msg_id) != 0)
        return 0;
    const char *type = jmsg_type(m);
    json_t *c = jmsg_content(m);
    if (ch == CLIENT_IOPUB) {
        cell->started = 1;
        if (strcmp(type, "status") == 0) {
            const char *state = json_string_value(json_object_get(c, "execution_state"));
            cell->got_idle |= strcmp(state ?: "", "idle") == 0;
            return 0;
        }
        cell->saw_error |= strcmp(type, "error") == 0;
        return 1;
    }
    if (ch == CLIENT_SHELL && strcmp(type, "execute_reply") == 0 && !cell->got_reply) {
        cell->got_reply = 1;
        cell->reply = json_incref(c);
        cell->reply_md = json_incref(jmsg_json(m, JMSG_METADATA));
    }
    return 0;
}

/*  The reply and the idle status are both in. The reply, on shell, may arrive before the
 *  cell's last outputs, but idle is published after them on the same socket. */
static int s_cell_done(const cell_t *cell)
{
    return cell->got_reply && cell->got_idle;
}

static void s_cell_clear(cell_t *cell)
{
    json_decref(cell->reply);
    json_decref(cell->reply_md);
    memset(cell, 0, sizeof *cell);
}

/*  Send code to the session and print what comes back until the reply and idle status are in.
 *  Ctrl-C interrupts the cell (a second one gives up); SIGTERM gives up at once; a session or
 *  kenneld that goes away ends the wait. Returns the exit status. */
static int s_run_cell(client_t *cl, const char *session_id, const char *code)
{
    cell_t cell;
    char why[512];
    if (s_cell_send(cl, code, NULL, &cell, why, sizeof why) < 0) {
        fprintf(stderr, "kennel: %s\n", why);
        return 1;
    }
    int interrupts_sent = 0, exit_status = 1;
    long long quiet_since = util_now_ms();
    while (!s_cell_done(&cell)) {
        client_channel_t ch;
        jmsg_t *m = NULL;
        int rc = client_recv(cl, 500, &ch, &m);
        zsys_interrupted = 0;
        if (s_stop || (s_sigint > interrupts_sent && !cell.started && s_sigint > 1)) {
            /* SIGTERM, or a second Ctrl-C while ours still waits: give up */
            jmsg_destroy(&m);
            exit_status = 130;
            goto done;
        }
        if (s_sigint > interrupts_sent && cell.started) {
            /* Only once our cell runs: before, an interrupt stops whatever another client's
             * cell is running. One that came earlier waits for that. */
            if (interrupts_sent++) {
                jmsg_destroy(&m);
                exit_status = 130;
                goto done;
            }
            client_send(cl, CLIENT_CONTROL, "interrupt_request", json_object(), NULL);
        }
        if (rc <= 0) {
            if (util_now_ms() - quiet_since > 2000) {
                if (!s_session_alive(session_id, why, sizeof why)) {
                    fprintf(stderr, "kennel: %s\n", why);
                    goto done;
                }
                quiet_since = util_now_ms();
            }
            continue;
        }
        quiet_since = util_now_ms();
        if (s_cell_take(&cell, ch, m))
            s_print_output(m);
        jmsg_destroy(&m);
    }
    /* An error reply comes with an iopub `error`, kenneld's own too, printed as it came.
     * Only once idle is in is it known whether one did. (Printed on the reply, kenneld's
     * errors were printed twice.) */
    const char *status = json_string_value(json_object_get(cell.reply, "status")) ?: "";
    int ok = strcmp(status, "ok") == 0;
    if (strcmp(status, "aborted") == 0) {
        fprintf(stderr, "kennel: the cell was not run: an earlier cell in the "
                        "session's queue failed (stop_on_error)\n");
    } else if (!ok && !cell.saw_error) {
        const char *ename = json_string_value(json_object_get(cell.reply, "ename"));
        const char *evalue = json_string_value(json_object_get(cell.reply, "evalue"));
        s_put_untrusted(stderr, ename ?: "Error");
        s_put_untrusted(stderr, ": ");
        s_put_untrusted(stderr, evalue ?: status);
        s_put_untrusted(stderr, "\n");
    }
    exit_status = ok && !s_save_failed ? 0 : 1;
done:
    s_cell_clear(&cell);
    return exit_status;
}

static int s_cmd_exec(const char *name, const char *code_arg)
{
    size_t len = strlen(code_arg);
    char *code = strcmp(code_arg, "-") == 0 ? s_read_stdin(&len) : strdup(code_arg);
    if (!code) {
        fprintf(stderr, "kennel: cannot read the code\n");
        return 2;
    }
    /* JSON carries neither (the code was cut at a NUL, or dropped whole). */
    const char *bad = strlen(code) != len ? "holds a NUL byte" : NULL;
    for (size_t i = 0, n; !bad && i < len; i += n)
        if ((n = jvalid_utf8(code + i, len - i)) == 0)
            bad = "is not UTF-8 text";
    if (bad) {
        fprintf(stderr, "kennel: the code %s\n", bad);
        free(code);
        return 2;
    }
    json_t *r = NULL;
    if (s_cluster[0] && s_cluster_route(name, 1, NULL, &r) < 0) {
        free(code);
        return 1;
    }
    if (!r)
        r = s_create(name);
    json_t *session = json_object_get(r, "session");
    json_t *conn = json_is_object(json_object_get(session, "connection"))
                       ? json_incref(json_object_get(session, "connection"))
                   : r ? s_load_connection(json_string_value(json_object_get(session, "connection_file")))
                       : NULL;
    client_t *cl = conn ? client_connect(conn) : NULL;
    int status = 1;
    if (conn && !cl)
        fprintf(stderr, "kennel: cannot connect to session %s\n", name);
    s_handle(SIGINT, s_on_sigint);
    s_handle(SIGTERM, s_on_stop);
    if (cl && client_wait_ready(cl, CALL_TIMEOUT_MS) < 0)
        fprintf(stderr, "kennel: session %s did not answer\n", name);
    else if (cl)
        status = s_run_cell(cl, json_string_value(json_object_get(session, "id")), code);
    s_end_untrusted();
    json_decref(conn);
    json_decref(r);
    client_destroy(&cl);
    free(code);
    return status;
}

/*  A message the journal replayed ({header, parent_header, metadata, content}) as a jmsg_t
 *  for s_print_output, or NULL. */
static jmsg_t *s_replayed(const json_t *obj)
{
    static const char *const keys[JMSG_NPARTS] = {"header", "parent_header", "metadata",
                                                  "content"};
    jmsg_t *m = jmsg_new_empty();
    for (int i = 0; m && i < JMSG_NPARTS; i++) {
        json_t *part = json_object_get(obj, keys[i]);
        if (!json_is_object(part)) {
            jmsg_destroy(&m);
            break;
        }
        jmsg_set_json(m, (jmsg_part_t)i, json_incref(part));
    }
    return m;
}

typedef struct {
    const char *cell;  /* the msg_id of the cell attached to */
    zhashx_t *shown;   /* msg_ids shown already (the journal's, then live ones) */
    int ended, failed;
} attach_t;

/*  Show m if it is an output of the attached cell not shown yet; note its end. */
static void s_attach_show(attach_t *a, const jmsg_t *m)
{
    const char *parent = jmsg_cstr(json_object_get(jmsg_json(m, JMSG_PARENT), "msg_id"));
    const char *id = jmsg_id(m);
    if (!parent || strcmp(parent, a->cell) != 0 || (*id && zhashx_lookup(a->shown, id)))
        return;
    if (*id)
        zhashx_insert(a->shown, id, (void *)1);
    const char *type = jmsg_type(m);
    if (strcmp(type, "status") == 0) {
        const char *state = jmsg_cstr(json_object_get(jmsg_content(m), "execution_state"));
        a->ended |= state && strcmp(state, "idle") == 0;
    } else {
        a->failed |= strcmp(type, "error") == 0;
        s_print_output(m);
    }
}

/*  kennel exec --attach N: the output of session N's running cell (else of its last one)
 *  from its start, as kenneld's journal kept it, then live until the cell ends. iopub is
 *  subscribed before the journal is asked, and what both give is shown once (by msg_id),
 *  so nothing between them is missed. Ctrl-C leaves the cell running. Exit 0; 1 when the
 *  cell failed or there is none to attach to; 130 after Ctrl-C. */
static int s_cmd_attach(const char *name)
{
    json_t *r = s_call("info_request", json_pack("{s:s}", "session", name));
    json_t *session = json_object_get(r, "session");
    const char *sid = json_string_value(json_object_get(session, "id"));
    json_t *conn = session ? s_load_connection(json_string_value(
                                 json_object_get(session, "connection_file")))
                           : NULL;
    client_t *cl = conn ? client_connect(conn) : NULL;
    zlistx_t *early = zlistx_new(); /* live messages that came before the journal's */
    attach_t a = {.shown = zhashx_new()};
    int status = 1;
    char req_id[40] = "";
    json_t *replay = NULL;
    s_handle(SIGINT, s_on_stop);
    s_handle(SIGTERM, s_on_stop);
    if (conn && !cl)
        fprintf(stderr, "kennel: cannot connect to session %s\n", name);
    if (!cl || !early || !a.shown)
        goto done;
    if (client_wait_ready(cl, CALL_TIMEOUT_MS) < 0 ||
        client_send(cl, CLIENT_CONTROL, "kennel_replay_request", json_object(), req_id) < 0) {
        fprintf(stderr, "kennel: session %s did not answer\n", name);
        goto done;
    }
    for (long long deadline = util_now_ms() + CALL_TIMEOUT_MS; !replay && !s_stop;) {
        long long left = deadline - util_now_ms();
        client_channel_t ch;
        jmsg_t *m = NULL;
        if (left <= 0 || client_recv(cl, (int)left, &ch, &m) < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "kennel: session %s did not answer\n", name);
            goto done;
        }
        const char *parent = m ? jmsg_cstr(json_object_get(jmsg_json(m, JMSG_PARENT), "msg_id")) : NULL;
        if (m && ch == CLIENT_CONTROL && parent && strcmp(parent, req_id) == 0)
            replay = json_incref(jmsg_content(m));
        else if (m && ch == CLIENT_IOPUB) {
            zlistx_add_end(early, m);
            m = NULL;
        }
        jmsg_destroy(&m);
    }
    if (s_stop) {
        status = 130;
        goto done;
    }
    if (!(a.cell = jmsg_cstr(json_object_get(replay, "cell")))) {
        fprintf(stderr, "kennel: session %s has no cell to attach to\n", name);
        goto done;
    }
    json_int_t lost = json_integer_value(json_object_get(replay, "lost"));
    if (lost > 0)
        fprintf(stderr, "kennel: %lld of this cell's first messages are no longer kept\n",
                (long long)lost);
    size_t i;
    json_t *obj;
    json_array_foreach(json_object_get(replay, "messages"), i, obj) {
        jmsg_t *m = s_replayed(obj);
        if (m)
            s_attach_show(&a, m);
        jmsg_destroy(&m);
    }
    for (jmsg_t *m = zlistx_first(early); m; m = zlistx_next(early))
        s_attach_show(&a, m);
    long long quiet_since = util_now_ms();
    while (!a.ended && !s_stop) {
        client_channel_t ch;
        jmsg_t *m = NULL;
        int rc = client_recv(cl, 500, &ch, &m);
        if (rc > 0 && ch == CLIENT_IOPUB) {
            s_attach_show(&a, m);
            quiet_since = util_now_ms();
        } else if (rc <= 0 && util_now_ms() - quiet_since > 2000) {
            char why[512];
            if (!s_session_alive(sid, why, sizeof why)) {
                fprintf(stderr, "kennel: %s\n", why);
                break;
            }
            quiet_since = util_now_ms();
        }
        jmsg_destroy(&m);
    }
    status = s_stop ? 130 : a.ended && !a.failed ? 0 : 1;
done:
    s_end_untrusted();
    json_decref(replay);
    zhashx_destroy(&a.shown);
    for (jmsg_t *m = zlistx_first(early); m; m = zlistx_next(early))
        jmsg_destroy(&m);
    zlistx_destroy(&early);
    client_destroy(&cl);
    json_decref(conn);
    json_decref(r);
    return status;
}

/*  Wait up to timeout_ms for the reply on control to our request msg_id, passing over what
 *  else comes (a signal does not cut the wait short). The reply (caller owns it), or NULL. */
static jmsg_t *s_control_reply(client_t *cl, const char *msg_id, int timeout_ms)
{
    long long deadline = util_now_ms() + timeout_ms;
    for (long long left; (left = deadline - util_now_ms()) > 0;) {
        client_channel_t ch;
        jmsg_t *m = NULL;
        if (client_recv(cl, (int)left, &ch, &m) < 0 && errno != EINTR)
            break;
        const char *parent =
            m ? json_string_value(json_object_get(jmsg_json(m, JMSG_PARENT), "msg_id")) : NULL;
        if (m && ch == CLIENT_CONTROL && parent && strcmp(parent, msg_id) == 0)
            return m;
        jmsg_destroy(&m);
    }
    return NULL;
}

/*  Pass a SIGINT on to the session as an interrupt_request, through a client made for it and
 *  gone once the reply comes (a client kept would hold an iopub subscription nobody reads,
 *  whose backlog kenneld would keep). */
static void s_interrupt(const json_t *conn, const char *id)
{
    client_t *cl = client_connect(conn);
    char msg_id[40] = "";
    if (!cl || client_send(cl, CLIENT_CONTROL, "interrupt_request", json_object(), msg_id) < 0) {
        fprintf(stderr, "kennel: cannot pass the interrupt on to session %s\n", id);
        client_destroy(&cl);
        return;
    }
    jmsg_t *reply = s_control_reply(cl, msg_id, 5000); /* kenneld answers an interrupt itself */
    if (!reply)
        fprintf(stderr, "kennel: session %s did not answer the interrupt (kenneld stopped?)\n", id);
    jmsg_destroy(&reply);
    client_destroy(&cl);
}

/*  How long a launcher waits for a stopped kenneld: $KENNEL_LAUNCHER_WAIT (whole seconds,
 *  0 to 86400), else LAUNCHER_WAIT_S. */
static int s_launcher_wait_s(void)
{
    static int said;
    return s_env_seconds("KENNEL_LAUNCHER_WAIT", 0, 86400, LAUNCHER_WAIT_S, &said);
}

/*  An inotify watch on session id's directory, which kenneld removes when the session ends:
 *  the launcher hears of that at once, without asking the manager. -1 if it cannot watch it
 *  (not readable by this user, say, or gone already). */
static int s_watch_session_dir(const char *id)
{
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/sessions/%s", s_state_dir, id) >= (int)sizeof dir)
        return -1;
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) /* EMFILE: fs.inotify.max_user_instances (128) are in use */
        fprintf(stderr, "kennel: no inotify (%s); asking kenneld every %d ms instead\n",
                strerror(errno), LAUNCHER_TURN_MS);
    if (fd >= 0 && inotify_add_watch(fd, dir, IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR) < 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/*  Wait up to ms (a signal cuts it short): 1 if the watched directory went, else 0. */
static int s_session_dir_gone(int watch, int ms)
{
    if (watch < 0) {
        usleep((useconds_t)ms * 1000);
        return 0;
    }
    struct pollfd pfd = {watch, POLLIN, 0};
    return poll(&pfd, 1, ms) > 0;
}

/*  The kernelspec launcher: Jupyter starts it with a connection file it wrote; kenneld serves
 *  a session on exactly those ports and key. It lives as long as the session: it ends the
 *  session on SIGTERM, or when the process that started it (the front end) is gone, and exits
 *  when the session ends (shutdown_request). SIGINT is a front end's interrupt in "signal"
 *  mode (kernelspecs written before interrupt_mode "message"): it becomes an
 *  interrupt_request for the running cell, never the end of the session. A kenneld that
 *  stops is waited for, s_launcher_wait_s() seconds at most: the next one brings the session
 *  back on the same ports (and watches this process again), and the front end carries on.
 *  It learns of the session's end from its directory's removal (inotify), checks kenneld's
 *  pid locally, and asks the manager only every LAUNCHER_ASK_MS (every turn without a
 *  watch): a hundred launchers would otherwise cost kenneld 500 requests a second. */
static int s_cmd_kernel(const char *file)
{
    json_t *conn = s_load_connection(file);
    if (!conn)
        return 1;
    pid_t parent = getppid();
    /* kenneld watches this process: should it be killed (with its front end's process group,
     * say), the session ends with it. */
    json_t *r = s_call("create_request", json_pack("{s:O, s:b, s:I}", "connection", conn, "launched", 1,
                                                   "launcher_pid", (json_int_t)getpid()));
    if (!r) {
        json_decref(conn);
        return 1;
    }
    char id[64];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(json_object_get(r, "session"), "id")) ?: "");
    json_decref(r);
    s_handle(SIGTERM, s_on_stop);
    s_handle(SIGINT, s_on_sigint);
    int interrupts = 0, ended = 0, gave_up = 0, wait_s = s_launcher_wait_s();
    long long unanswered_since = 0; /* kenneld has not answered since then; 0: it has */
    long long next_ask = 0;         /* when to ask the manager again */
    int watch = s_watch_session_dir(id);
    while (!s_stop) {
        if (s_session_dir_gone(watch, LAUNCHER_TURN_MS)) {
            ended = 1; /* kenneld removed it: the session ended */
            break;
        }
        if (s_sigint > interrupts) {
            interrupts = s_sigint;
            s_interrupt(conn, id);
        }
        if (getppid() != parent)
            break; /* reparented: the front end died without shutting the session down */
        long long asked = util_now_ms();
        /* kenneld answered last time and still runs: the watch tells of the session's end.
         * Once a question went unanswered, every turn asks until one is (or time is up). */
        if (!unanswered_since && asked < next_ask && statedir_kenneld_pid(s_state_dir) > 0)
            continue;
        next_ask = asked + (watch >= 0 ? LAUNCHER_ASK_MS : 0);
        char err[256];
        json_t *info = client_manager_call(s_state_dir, "info_request", json_pack("{s:s}", "session", id),
                                           LAUNCHER_POLL_TIMEOUT_MS, err, sizeof err);
        const char *status = json_string_value(json_object_get(info, "status"));
        if (info) {
            unanswered_since = 0;
            ended = !status || strcmp(status, "ok") != 0;
        } else if (s_sigint == interrupts && !s_stop) { /* not cut short by a signal */
            if (!unanswered_since) {
                unanswered_since = asked;
                fprintf(stderr, "kennel: %s; waiting up to %d s for kenneld to come back\n",
                        err, wait_s);
            }
            if (util_now_ms() - unanswered_since >= wait_s * 1000LL) {
                fprintf(stderr, "kennel: no kenneld for %d s; session %s is given up\n",
                        wait_s, id);
                gave_up = ended = 1;
            }
        }
        json_decref(info);
        if (ended)
            break;
    }
    if (watch >= 0)
        close(watch);
    if (!ended)
        json_decref(s_call("end_request", json_pack("{s:s}", "session", id)));
    json_decref(conn);
    return gave_up ? 1 : 0;
}

/*  kennel mcp: the I/O around src/mcp.c's core. stdin's bytes go to the core, its messages
 *  to stdout, one a line, and nothing else ever goes there (the log is stderr). The session
 *  is made (or found, by name) on the first call that needs it, and found again if it ends:
 *  a kennel session outlives this process. One loop waits on stdin and on the session's
 *  sockets together, so that a ping or a cancellation is read while a cell runs. */
#define MCP_READ_SLICE 65536 /* bytes read from stdin at a time */
#define MCP_TURN_MS 1000     /* the loop's wait when nothing is expected */

typedef struct {
    const char *name;     /* the session's name (--session) */
    json_t *create;       /* its create_request content: the name and kennel new's limits */
    char id[64];          /* its id, once made or found; "" before */
    char conn_file[PATH_MAX];
    client_t *cl;         /* its client, once a cell or a restart needed one */
    cell_t cell;          /* the running cell, while is_running */
    int is_running;
    long long quiet_since; /* when anything last came from the session */
    mcp_t *core;
} mcp_glue_t;

/*  The session exists: made or found by name. 0, or -1 with why. */
static int s_mcp_session(mcp_glue_t *g, char *why, size_t why_len)
{
    if (g->id[0])
        return 0;
    char err[512];
    json_t *r = client_manager_call(s_state_dir, "create_request", json_incref(g->create),
                                    CALL_TIMEOUT_MS, err, sizeof err);
    const char *status = json_string_value(json_object_get(r, "status"));
    json_t *info = json_object_get(r, "session");
    const char *id = json_string_value(json_object_get(info, "id"));
    const char *file = json_string_value(json_object_get(info, "connection_file"));
    if (!r)
        snprintf(why, why_len, "%s", err);
    else if (!status || strcmp(status, "ok") != 0 || !id || !file)
        snprintf(why, why_len, "the session could not be made: %s: %s",
                 json_string_value(json_object_get(r, "ename")) ?: "Error",
                 json_string_value(json_object_get(r, "evalue")) ?: "no reason given");
    else {
        snprintf(g->id, sizeof g->id, "%s", id);
        snprintf(g->conn_file, sizeof g->conn_file, "%s", file);
        if (json_is_true(json_object_get(r, "created")))
            fprintf(stderr, "kennel mcp: made session %s (%s)\n", g->name, g->id);
    }
    json_decref(r);
    return g->id[0] ? 0 : -1;
}

/*  Forget the session (it ended): the next call makes it again. */
static void s_mcp_forget(mcp_glue_t *g)
{
    client_destroy(&g->cl);
    g->id[0] = '\0';
}

/*  A client of the session, ready. 0, or -1 with why. */
static int s_mcp_client(mcp_glue_t *g, char *why, size_t why_len)
{
    if (g->cl)
        return 0;
    if (s_mcp_session(g, why, why_len) < 0)
        return -1;
    json_error_t jerr;
    json_t *conn = json_load_file(g->conn_file, 0, &jerr);
    g->cl = conn ? client_connect(conn) : NULL;
    json_decref(conn);
    if (!g->cl || client_wait_ready(g->cl, CALL_TIMEOUT_MS) < 0) {
        snprintf(why, why_len, "session %s did not answer", g->name);
        s_mcp_forget(g); /* (a session ended since it was found is made again next time) */
        return -1;
    }
    return 0;
}

static void s_mcp_send(void *ctx, const char *text, size_t len)
{
    (void)ctx;
    /* One line; the client reading it is the only reader of stdout. A client gone is
     * SIGPIPE, which ends this process, as it should. */
    if (util_write_all(STDOUT_FILENO, text, len) < 0 || util_write_all(STDOUT_FILENO, "\n", 1) < 0)
        fprintf(stderr, "kennel mcp: cannot write to stdout: %s\n", strerror(errno));
}

static int s_mcp_cell_start(void *ctx, const char *code, double timeout_s, char *why,
                            size_t why_len)
{
    mcp_glue_t *g = ctx;
    if (s_mcp_client(g, why, why_len) < 0)
        return -1;
    json_t *md = timeout_s > 0 ? json_pack("{s:{s:f}}", "kennel", "timeout", timeout_s) : NULL;
    if (s_cell_send(g->cl, code, md, &g->cell, why, why_len) < 0)
        return -1;
    g->is_running = 1;
    g->quiet_since = util_now_ms();
    return 0;
}

static void s_mcp_cell_interrupt(void *ctx)
{
    mcp_glue_t *g = ctx;
    /* The reply comes on control and is passed over; the cell's end comes as any cell's. */
    if (g->cl && client_send(g->cl, CLIENT_CONTROL, "interrupt_request", json_object(), NULL) < 0)
        fprintf(stderr, "kennel mcp: cannot send the interrupt to session %s\n", g->name);
}

/*  A manager request about the session (content stolen; "session" is added), with a buffer
 *  each way as client_manager_call_data has them. A session that ended is made again, once.
 *  The reply when its status is ok, else NULL with why. */
static json_t *s_mcp_manager(mcp_glue_t *g, const char *type, json_t *content, const void *in,
                             size_t in_len, void **out, size_t *out_len, char *why,
                             size_t why_len)
{
    json_t *r = NULL;
    for (int tries = 0; tries < 2; tries++) {
        json_decref(r);
        r = NULL;
        if (s_mcp_session(g, why, why_len) < 0)
            break;
        char err[512];
        json_object_set_new(content, "session", json_string(g->id));
        r = client_manager_call_data(s_state_dir, type, json_incref(content), in, in_len, out,
                                     out_len, CALL_TIMEOUT_MS, err, sizeof err);
        const char *ename = json_string_value(json_object_get(r, "ename"));
        if (!r)
            snprintf(why, why_len, "%s", err);
        else if (ename && strcmp(ename, "NoSuchSession") == 0 && tries == 0)
            s_mcp_forget(g); /* ended since: made again */
        else
            break;
    }
    json_decref(content);
    const char *status = json_string_value(json_object_get(r, "status"));
    if (r && (!status || strcmp(status, "ok") != 0)) {
        snprintf(why, why_len, "%s: %s", json_string_value(json_object_get(r, "ename")) ?: "Error",
                 json_string_value(json_object_get(r, "evalue")) ?: "the request failed");
        json_decref(r);
        r = NULL;
        if (out) {
            free(*out);
            *out = NULL;
        }
    }
    return r;
}

static int s_mcp_file_put(void *ctx, const char *path, const void *data, size_t len, char *why,
                          size_t why_len)
{
    size_t max = len > (1u << 20) ? s_kenneld_limit("max_file", NULL) : 0;
    if (max && len > max) {
        snprintf(why, why_len, "TooLarge: the file is %zu bytes; kenneld moves files of at most "
                 "%zu (kenneld --max-file)", len, max);
        return -1;
    }
    json_t *r = s_mcp_manager(ctx, "file_put_request", json_pack("{s:s}", "path", path), data, len,
                              NULL, NULL, why, why_len);
    json_decref(r);
    return r ? 0 : -1;
}

static int s_mcp_file_get(void *ctx, const char *path, void **data, size_t *len, char *why,
                          size_t why_len)
{
    *data = NULL;
    *len = 0;
    json_t *r = s_mcp_manager(ctx, "file_get_request", json_pack("{s:s}", "path", path), NULL, 0,
                              data, len, why, why_len);
    json_decref(r);
    return r ? 0 : -1;
}

static json_t *s_mcp_file_list(void *ctx, char *why, size_t why_len)
{
    return s_mcp_manager(ctx, "file_list_request", json_object(), NULL, 0, NULL, NULL, why,
                         why_len);
}

/*  shutdown_request with restart on control, and its reply. Nothing else is being waited
 *  for meanwhile: the core serves one call at a time, so no cell of ours runs. */
static int s_mcp_restart(void *ctx, char *why, size_t why_len)
{
    mcp_glue_t *g = ctx;
    char msg_id[40];
    if (s_mcp_client(g, why, why_len) < 0)
        return -1;
    if (client_send(g->cl, CLIENT_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", 1),
                    msg_id) < 0) {
        snprintf(why, why_len, "the restart could not be sent to session %s", g->name);
        return -1;
    }
    jmsg_t *reply = s_control_reply(g->cl, msg_id, CALL_TIMEOUT_MS);
    const char *status =
        reply ? json_string_value(json_object_get(jmsg_content(reply), "status")) : NULL;
    int ok = status && strcmp(status, "ok") == 0;
    if (!reply)
        snprintf(why, why_len, "session %s did not answer the restart", g->name);
    else if (!ok)
        snprintf(why, why_len, "the restart failed: %s", status ? status : "no status");
    jmsg_destroy(&reply);
    return ok ? 0 : -1;
}

static const mcp_ops_t s_mcp_ops = {
    .send = s_mcp_send,
    .cell_start = s_mcp_cell_start,
    .cell_interrupt = s_mcp_cell_interrupt,
    .file_put = s_mcp_file_put,
    .file_get = s_mcp_file_get,
    .file_list = s_mcp_file_list,
    .restart = s_mcp_restart,
};

/*  A message from the session: to the core when it is the running cell's. */
static void s_mcp_on_message(mcp_glue_t *g, client_channel_t ch, const jmsg_t *m)
{
    if (!g->is_running)
        return; /* another client's cell's output, a late interrupt reply: passed over */
    if (s_cell_take(&g->cell, ch, m))
        mcp_cell_output(g->core, jmsg_type(m), jmsg_content(m));
    if (!s_cell_done(&g->cell))
        return;
    /* The cell is over before the core hears of it: its answer may start the next one. */
    json_t *reply = json_incref(g->cell.reply), *md = json_incref(g->cell.reply_md);
    s_cell_clear(&g->cell);
    g->is_running = 0;
    mcp_cell_done(g->core, reply, md);
    json_decref(reply);
    json_decref(md);
}

/*  Nothing came for a while during a cell: is the session still there? */
static void s_mcp_check_alive(mcp_glue_t *g)
{
    char why[512];
    if (s_session_alive(g->id, why, sizeof why)) {
        g->quiet_since = util_now_ms();
        return;
    }
    fprintf(stderr, "kennel mcp: %s\n", why);
    s_cell_clear(&g->cell);
    g->is_running = 0;
    s_mcp_forget(g);
    mcp_cell_lost(g->core, why);
}

static int s_cmd_mcp(int argc, char **argv)
{
    mcp_glue_t g = {0};
    mcp_limits_t limits = {MCP_MAX_REQUEST_DEFAULT, MCP_MAX_RESULT_DEFAULT};
    g.create = json_object();
    if (s_session_options(argc, argv, g.create, &limits, NULL) != 0) {
        json_decref(g.create);
        return 2;
    }
    g.name = json_string_value(json_object_get(g.create, "name"));
    if (!g.name) {
        fprintf(stderr, "kennel: mcp needs --session NAME: the session its tools use\n");
        json_decref(g.create);
        return 2;
    }
    g.core = mcp_new(g.name, &limits, &s_mcp_ops, &g);
    char *buf = malloc(MCP_READ_SLICE);
    if (!g.core || !buf) {
        fprintf(stderr, "kennel mcp: out of memory\n");
        return 1;
    }
    fprintf(stderr, "kennel mcp: serving session %s (MCP %s) on stdin and stdout\n", g.name,
            MCP_PROTOCOL_VERSION);
    int at_end = 0;
    /* After the client's end, what it asked for is finished (a cell running is waited for:
     * a client piping requests in wants their answers) before this process ends. */
    while (!at_end || g.is_running) {
        client_channel_t ch;
        jmsg_t *m = NULL;
        int rc;
        int stdin_fd = at_end ? -1 : STDIN_FILENO;
        int turn_ms = g.is_running ? 500 : MCP_TURN_MS;
        if (g.cl) {
            rc = client_recv_fd(g.cl, turn_ms, stdin_fd, &ch, &m);
        } else {
            struct pollfd pfd = {STDIN_FILENO, POLLIN, 0};
            rc = poll(&pfd, 1, turn_ms) > 0 ? CLIENT_FD_READY : 0;
        }
        if (rc == CLIENT_FD_READY) {
            ssize_t n = read(STDIN_FILENO, buf, MCP_READ_SLICE);
            if (n > 0) {
                mcp_feed(g.core, buf, (size_t)n);
            } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                mcp_feed_end(g.core);
                at_end = 1;
            }
        } else if (rc == 1) {
            g.quiet_since = util_now_ms();
            s_mcp_on_message(&g, ch, m);
        } else if (rc < 0 && errno != EINTR) {
            fprintf(stderr, "kennel mcp: waiting on the session failed: %s\n", strerror(errno));
            break;
        }
        jmsg_destroy(&m);
        if (g.is_running && util_now_ms() - g.quiet_since > 2000)
            s_mcp_check_alive(&g);
    }
    mcp_destroy(&g.core);
    s_cell_clear(&g.cell);
    client_destroy(&g.cl);
    json_decref(g.create);
    free(buf);
    return 0;
}

static int s_cmd_kernelspec(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "install") != 0) {
        fputs(s_usage, stderr);
        return 2;
    }
    const char *prefix = NULL;
    int user = 0;
    static const struct option opts[] = {{"user", no_argument, NULL, 'u'}, {"prefix", required_argument, NULL, 'p'}, {NULL, 0, NULL, 0}};
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        if (c == 'u')
            user = 1;
        else if (c == 'p')
            prefix = optarg;
        else
            return 2;
    }
    char dir[PATH_MAX], self_path[PATH_MAX];
    const char *home = getenv("HOME");
    int n = prefix ? snprintf(dir, sizeof dir, "%s/share/jupyter/kernels/kennel", prefix)
            : user ? snprintf(dir, sizeof dir, "%s/.local/share/jupyter/kernels/kennel", home ? home : "")
                   : snprintf(dir, sizeof dir, "/usr/local/share/jupyter/kernels/kennel");
    ssize_t len = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n < 0 || n >= (int)sizeof dir || len < 0) {
        fprintf(stderr, "kennel: cannot work out the kernelspec paths\n");
        return 1;
    }
    self_path[len] = '\0';
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0755);
            *p = '/';
        }
    mkdir(dir, 0755);
    /* supported_encryption (JEP 145): a front end with transport_encryption on puts a CURVE
     * key pair in the connection file, and `kennel kernel -f` has kenneld bind with it. */
    json_t *spec = json_pack("{s:[s,s,s,s,s,s], s:s, s:s, s:s, s:{s:b, s:[s]}}", "argv",
                             self_path, "--state-dir", s_state_dir, "kernel", "-f",
                             "{connection_file}", "display_name", "Python 3 (kennel)", "language",
                             "python", "interrupt_mode", "message", "metadata", "debugger", 0,
                             "supported_encryption", "curve");
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/kernel.json", dir);
    int rc = json_dump_file(spec, path, JSON_INDENT(1));
    json_decref(spec);
    if (rc < 0 || chmod(path, 0644) < 0) {
        fprintf(stderr, "kennel: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    /* The logos front ends show beside the kernel's name (Notebook's kernel menu, the
     * JupyterLab launcher). */
    static const char *const logos[] = {"logo-32x32.png", "logo-64x64.png", "logo-svg.svg"};
    for (size_t i = 0; i < sizeof logos / sizeof logos[0]; i++) {
        char src[PATH_MAX];
        size_t logo_len = 0;
        snprintf(src, sizeof src, "%s/%s", KENNEL_SPEC_DIR, logos[i]);
        snprintf(path, sizeof path, "%s/%s", dir, logos[i]);
        char *logo = util_read_file(src, 1u << 20, &logo_len);
        rc = logo ? statedir_write_file(path, logo, logo_len, STATEDIR_ATOMIC) : -1;
        free(logo);
        if (rc < 0 || chmod(path, 0644) < 0) {
            fprintf(stderr, "kennel: cannot copy %s to %s: %s\n", src, path, strerror(errno));
            return 1;
        }
    }
    printf("%s\n", dir);
    return 0;
}

int main(int argc, char **argv)
{
    if (sodium_init() < 0)
        return 1;
    securemem_use(); /* its CURVE handshakes too: securemem.h */
    /* Signals keep their defaults unless a command handles them (exec, kernel). */
    zsys_handler_set(NULL);
    if (statedir_default(s_state_dir, sizeof s_state_dir) < 0)
        s_state_dir[0] = '\0';
    const char *env = getenv("KENNEL_CLUSTER");
    snprintf(s_cluster, sizeof s_cluster, "%s", env ? env : "");
    env = getenv("KENNEL_CLUSTER_KEY");
    snprintf(s_cluster_key, sizeof s_cluster_key, "%s", env ? env : "");
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < argc) {
            snprintf(s_state_dir, sizeof s_state_dir, "%s", argv[++i]);
        } else if (strncmp(argv[i], "--state-dir=", 12) == 0) {
            snprintf(s_state_dir, sizeof s_state_dir, "%s", argv[i] + 12);
        } else if (strcmp(argv[i], "--cluster") == 0 && i + 1 < argc) {
            snprintf(s_cluster, sizeof s_cluster, "%s", argv[++i]);
        } else if (strcmp(argv[i], "--cluster-key") == 0 && i + 1 < argc) {
            snprintf(s_cluster_key, sizeof s_cluster_key, "%s", argv[++i]);
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(s_usage, stdout);
            return 0;
        } else {
            fputs(s_usage, stderr);
            return 2;
        }
    }
    if (i >= argc) {
        fputs(s_usage, stderr);
        return 2;
    }
    char resolved[PATH_MAX], cwd[PATH_MAX];
    if (s_state_dir[0] && realpath(s_state_dir, resolved))
        snprintf(s_state_dir, sizeof s_state_dir, "%s", resolved);
    else if (s_state_dir[0] && s_state_dir[0] != '/' && getcwd(cwd, sizeof cwd) &&
             snprintf(resolved, sizeof resolved, "%s/%s", cwd, s_state_dir) < (int)sizeof resolved)
        /* not made yet: still absolute, for a kernelspec started from another directory */
        snprintf(s_state_dir, sizeof s_state_dir, "%s", resolved);
    const char *cmd = argv[i];
    int nargs = argc - i;
    char **args = argv + i;
    if (s_cluster[0]) {
        if (s_load_keys() < 0)
            return 1;
        json_t *r = NULL;
        int routed = 0;
        if (strcmp(cmd, "ls") == 0 && nargs == 1)
            return s_cluster_ls();
        if ((strcmp(cmd, "drain") == 0 || strcmp(cmd, "undrain") == 0) && nargs == 2)
            return s_cluster_drain(args[1], cmd[0] == 'd');
        if ((strcmp(cmd, "info") == 0 || strcmp(cmd, "rm") == 0 || strcmp(cmd, "files") == 0 ||
             strcmp(cmd, "rekey") == 0) && nargs == 2)
            routed = s_cluster_route(args[1], 0, NULL, &r) == 0;
        else if ((strcmp(cmd, "put") == 0 || strcmp(cmd, "get") == 0) && nargs >= 3)
            routed = s_cluster_route(args[1], 0, NULL, &r) == 0;
        else if (strcmp(cmd, "new") == 0 || strcmp(cmd, "exec") == 0)
            routed = 1; /* they route themselves, with what they create */
        else {
            fprintf(stderr, "kennel: %s is not a cluster command (new, ls, info, rm, exec, put, "
                            "get, files, rekey, drain, undrain)\n", cmd);
            return 2;
        }
        json_decref(r);
        if (!routed)
            return 1;
    }
    if (strcmp(cmd, "new") == 0)
        return s_cmd_new(nargs, args);
    if (strcmp(cmd, "fork") == 0)
        return s_cmd_fork(nargs, args);
    if (strcmp(cmd, "ls") == 0 && nargs == 1)
        return s_cmd_ls();
    if (strcmp(cmd, "info") == 0 && nargs == 2)
        return s_cmd_info(args[1]);
    if (strcmp(cmd, "stats") == 0 && nargs == 1) {
        json_t *r = s_call("stats_request", json_object());
        if (!r)
            return 1;
        char *text = json_dumps(r, JSON_INDENT(2) | JSON_SORT_KEYS);
        printf("%s\n", text);
        free(text);
        json_decref(r);
        return 0;
    }
    if ((strcmp(cmd, "put") == 0 || strcmp(cmd, "get") == 0) && (nargs == 3 || nargs == 4))
        return s_cmd_file(cmd, args[1], args[2], nargs == 4 ? args[3] : NULL);
    if (strcmp(cmd, "files") == 0 && nargs == 2)
        return s_cmd_file(cmd, args[1], NULL, NULL);
    if (strcmp(cmd, "rm") == 0 && nargs == 2)
        return s_cmd_rm(args[1]);
    if (strcmp(cmd, "runtime") == 0 && (nargs == 1 || (nargs == 2 && strcmp(args[1], "--json") == 0)))
        return s_cmd_runtime(nargs == 2);
    if (strcmp(cmd, "runs") == 0) {
        long n = 20;
        int as_json = 0, bad = 0, have_n = 0;
        char since[32] = "";
        for (int a = 1; a < nargs && !bad; a++) {
            char *end;
            if (strcmp(args[a], "--json") == 0)
                as_json = 1;
            else if (strcmp(args[a], "--since") == 0 && a + 1 < nargs)
                bad = s_since(args[++a], since) < 0;
            else if (!have_n && (n = strtol(args[a], &end, 10)) > 0 && !*end && n <= 1000000)
                have_n = 1;
            else
                bad = 1;
        }
        if (!bad)
            return s_cmd_runs(n, since, as_json);
    }
    if (strcmp(cmd, "rekey") == 0 && nargs == 2) {
        json_t *r = s_call("rekey_request", json_pack("{s:s}", "session", args[1]));
        if (!r)
            return 1;
        printf("%s\n", json_string_value(json_object_get(json_object_get(r, "session"), "connection_file")));
        json_decref(r);
        return 0;
    }
    if (strcmp(cmd, "exec") == 0) {
        /* --out DIR anywhere after exec; the code itself may start with '-'. */
        char *pos[2];
        int npos = 0, bad = 0, attach = 0;
        for (int a = 1; a < nargs && !bad; a++) {
            if (strcmp(args[a], "--out") == 0 && a + 1 < nargs)
                s_out_dir = args[++a];
            else if (strncmp(args[a], "--out=", 6) == 0)
                s_out_dir = args[a] + 6;
            else if (strcmp(args[a], "--attach") == 0 && !attach && npos == 0)
                attach = 1;
            else if (npos < 2)
                pos[npos++] = args[a];
            else
                bad = 1;
        }
        if (attach && npos == 1 && !bad && s_out_dir[0])
            return s_cmd_attach(pos[0]);
        if (!attach && npos == 2 && !bad && s_out_dir[0])
            return s_cmd_exec(pos[0], pos[1]);
    }
    if (strcmp(cmd, "kernel") == 0 && nargs == 3 && strcmp(args[1], "-f") == 0)
        return s_cmd_kernel(args[2]);
    if (strcmp(cmd, "kernelspec") == 0)
        return s_cmd_kernelspec(nargs, args);
    if (strcmp(cmd, "mcp") == 0)
        return s_cmd_mcp(nargs, args);
    fputs(s_usage, stderr);
    return 2;
}
