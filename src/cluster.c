/*  cluster: the loop's side builds the node's record and the list of sessions held once a
 *  second and hands both, as text, to the thread; the thread heartbeats, fences, and hands
 *  back the names to release through an eventfd. Only text crosses between them (jansson's
 *  reference counts are not thread-safe). */
#include "cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>
#include <zmq.h>

#include "catalog.h"
#include "log.h"
#include "statedir.h"
#include "util.h"

#define CLUSTER_TICK_MS 1000    /* heartbeat and fencing period */
#define CLUSTER_TTL_MS 3000     /* a node silent this long is dead: detected within 3-4 s */
#define CLUSTER_REDIS_MS 500    /* every Redis call's bound, connecting included */

struct cluster {
    loop_t *loop;
    broker_t *broker;
    cluster_cfg_t cfg;
    char manager[160];
    json_t *gens;            /* name -> generation, of the sessions held (loop only) */
    int timer;
    int efd;                 /* the thread says: names to release are waiting */
    int draining;            /* cluster_drain(1): saving and releasing every session */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;      /* guards what follows */
    pthread_cond_t cond;
    int stop;
    char *record;            /* the node's record (JSON text), or NULL before cluster_serve */
    char *held;              /* the sessions held (JSON text) */
    char *stale;             /* names to release (JSON text), or NULL */
    int connected;           /* the thread's last call reached Redis */
    char *lookups;           /* names whose node the manager asked for (JSON array text) */
    char *resolved;          /* their answers (JSON object text: name -> where or {}) */
    json_t *answers;         /* loop only: name -> {at, where}, kept RESOLVE_KEEP_MS */
    void (*on_resolved)(void *arg);
    void *on_resolved_arg;
};

#define RESOLVE_KEEP_MS 2000 /* a redirect's answer is reused this long */

static int s_link(const char *state_dir, const char *shared, const char *node, const char *sub)
{
    char target[PATH_MAX], link_path[PATH_MAX];
    if (snprintf(target, sizeof target, "%s/nodes/%s/%s", shared, node, sub) >= (int)sizeof target ||
        snprintf(link_path, sizeof link_path, "%s/%s", state_dir, sub) >= (int)sizeof link_path) {
        LOG_E("--shared or --state-dir is too long");
        return -1;
    }
    char mk[PATH_MAX];
    snprintf(mk, sizeof mk, "%s", target);
    for (char *p = mk + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(mk, 0755) < 0 && errno != EEXIST) {
                PLOG_E("mkdir %s", mk);
                return -1;
            }
            *p = '/';
        }
    if (mkdir(target, 0700) < 0 && errno != EEXIST) {
        PLOG_E("mkdir %s", target);
        return -1;
    }
    char now[PATH_MAX];
    ssize_t n = readlink(link_path, now, sizeof now - 1);
    if (n >= 0) {
        now[n] = '\0';
        if (strcmp(now, target) == 0)
            return 0;
        LOG_E("%s links to %s, not %s: another --shared or --node", link_path, now, target);
        return -1;
    }
    if (errno != ENOENT) {
        /* A directory: this state directory served without --cluster. */
        LOG_E("%s exists and is not a link into --shared: use a new --state-dir for a node",
              link_path);
        return -1;
    }
    if (symlink(target, link_path) < 0) {
        PLOG_E("symlink %s", link_path);
        return -1;
    }
    return 0;
}

int cluster_prepare(const char *state_dir, const char *shared, const char *node)
{
    if (mkdir(state_dir, 0700) < 0 && errno != EEXIST) {
        PLOG_E("mkdir %s", state_dir);
        return -1;
    }
    return s_link(state_dir, shared, node, "sessions") < 0 ||
                   s_link(state_dir, shared, node, "trash") < 0
               ? -1
               : 0;
}

int cluster_keys(const char *path, char key[40], char pub[41], char sec[41])
{
    for (int attempt = 0; attempt < 2; attempt++) {
        json_t *j = json_load_file(path, 0, NULL);
        const char *k = json_string_value(json_object_get(j, "key"));
        const char *p = json_string_value(json_object_get(j, "curve_publickey"));
        const char *s = json_string_value(json_object_get(j, "curve_secretkey"));
        if (k && p && s && strlen(k) < 40 && strlen(p) == 40 && strlen(s) == 40) {
            snprintf(key, 40, "%s", k);
            snprintf(pub, 41, "%s", p);
            snprintf(sec, 41, "%s", s);
            json_decref(j);
            return 0;
        }
        if (j) {
            json_decref(j);
            LOG_E("%s is not a cluster key file ({key, curve_publickey, curve_secretkey})", path);
            return -1;
        }
        /* None yet: made in a file of our own, then linked in place (the first node wins). */
        util_uuid(key);
        if (zmq_curve_keypair(pub, sec) < 0)
            return -1;
        char tmp[PATH_MAX + 32];
        snprintf(tmp, sizeof tmp, "%s.%ld", path, (long)getpid());
        json_t *o = json_pack("{s:s, s:s, s:s}", "key", key, "curve_publickey", pub,
                              "curve_secretkey", sec);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int ok = fd >= 0 && json_dumpfd(o, fd, 0) == 0 && fsync(fd) == 0;
        json_decref(o);
        if (fd >= 0)
            close(fd);
        if (ok && link(tmp, path) < 0 && errno != EEXIST)
            ok = 0;
        unlink(tmp);
        sodium_memzero(sec, 41);
        if (!ok) {
            PLOG_E("cannot write the cluster key file %s", path);
            return -1;
        }
    }
    return -1;
}

/* ---- the thread ------------------------------------------------------------------------------ */

static char *s_take(pthread_mutex_t *mu, char *const *src)
{
    pthread_mutex_lock(mu);
    char *copy = *src ? strdup(*src) : NULL;
    pthread_mutex_unlock(mu);
    return copy;
}

static void *s_thread(void *arg)
{
    cluster_t *self = arg;
    catalog_t *cat = NULL;
    int said_down = 0;
    long long last_beat = 0;
    for (;;) {
        pthread_mutex_lock(&self->mu);
        if (!self->stop && !self->lookups) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += (long)CLUSTER_TICK_MS * 1000000L;
            until.tv_sec += until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&self->cond, &self->mu, &until);
        }
        int stop = self->stop;
        pthread_mutex_unlock(&self->mu);
        if (stop)
            break;
        pthread_mutex_lock(&self->mu);
        char *lookups = self->lookups;
        self->lookups = NULL;
        pthread_mutex_unlock(&self->mu);
        char err[256] = "";
        if (lookups) {
            json_t *names = json_loads(lookups, 0, NULL), *out = json_object();
            free(lookups);
            if (!cat)
                cat = catalog_connect(self->cfg.url, CLUSTER_REDIS_MS, err, sizeof err);
            json_t *nodes = cat ? catalog_nodes(cat, NULL) : NULL;
            size_t i, j;
            json_t *v, *n;
            json_array_foreach(names, i, v) {
                catalog_entry_t e;
                json_t *where = json_object();
                int found = nodes && catalog_lookup(cat, json_string_value(v), &e) == 1;
                json_array_foreach(nodes, j, n) {
                    if (found && strcmp(json_string_value(json_object_get(n, "node")), e.node) == 0) {
                        json_object_set_new(where, "node", json_string(e.node));
                        json_object_set(where, "manager", json_object_get(n, "manager"));
                    }
                }
                json_object_set_new(out, json_string_value(v), where);
            }
            char *text = json_dumps(out, JSON_COMPACT);
            json_decref(out);
            json_decref(names);
            json_decref(nodes);
            pthread_mutex_lock(&self->mu);
            free(self->resolved);
            self->resolved = text;
            uint64_t one = 1;
            if (write(self->efd, &one, sizeof one) < 0)
                (void)0;
            pthread_mutex_unlock(&self->mu);
        }
        long long now = util_now_ms();
        if (now - last_beat < CLUSTER_TICK_MS - 50)
            continue; /* woken for a lookup: the heartbeat keeps its period */
        last_beat = now;
        char *record = s_take(&self->mu, &self->record);
        char *held_text = s_take(&self->mu, &self->held);
        if (!record) {
            free(held_text);
            continue;
        }
        if (!cat)
            cat = catalog_connect(self->cfg.url, CLUSTER_REDIS_MS, err, sizeof err);
        json_t *held = held_text ? json_loads(held_text, 0, NULL) : NULL;
        json_t *stale = NULL;
        if (cat && catalog_heartbeat(cat, self->cfg.node, record, CLUSTER_TTL_MS) == 0)
            stale = catalog_fence(cat, self->cfg.node, held ? held : json_array());
        if (cat && !stale) {
            snprintf(err, sizeof err, "%s", catalog_error(cat));
            catalog_destroy(&cat); /* reconnects next time */
        }
        if (stale && said_down)
            LOG_I("cluster: Redis is back (%s); node %s rejoined", self->cfg.url, self->cfg.node);
        if (!stale && !said_down)
            LOG_W("cluster: %s; sessions here keep serving, and this node retries every %d ms",
                  err, CLUSTER_TICK_MS);
        said_down = !stale;
        pthread_mutex_lock(&self->mu);
        self->connected = stale != NULL;
        if (stale && json_array_size(stale)) {
            char *text = json_dumps(stale, JSON_COMPACT);
            free(self->stale);
            self->stale = text;
            uint64_t one = 1;
            if (write(self->efd, &one, sizeof one) < 0)
                (void)0; /* the counter is saturated: a wake-up is already due */
        }
        pthread_mutex_unlock(&self->mu);
        json_decref(stale);
        json_decref(held);
        free(record);
        free(held_text);
    }
    catalog_destroy(&cat);
    return NULL;
}

/* ---- the loop's side ------------------------------------------------------------------------- */

/*  MemAvailable, in bytes; 0 when it cannot be read. */
static long long s_mem_free(void)
{
    FILE *f = fopen("/proc/meminfo", "re");
    char line[128];
    long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

static int s_on_tick(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    cluster_t *self = arg;
    int busy = 0;
    json_t *held = broker_held(self->broker, &busy);
    int drained = 0;
    if (self->draining) {
        /* Saved (evicted) first, then released: the next request revives each elsewhere
         * from its directory. A cell running, or a save, waits for a later tick. */
        if (busy == 0)
            (void)broker_save_all(self->broker);
        size_t i;
        json_t *h;
        json_array_foreach(held, i, h)
            if (!json_is_true(json_object_get(h, "kernel")) &&
                broker_release(self->broker, json_string_value(json_object_get(h, "id"))) == 0)
                LOG_I("cluster: drained session %s (saved; the next request revives it on "
                      "another node)", json_string_value(json_object_get(h, "name")));
        json_decref(held);
        held = broker_held(self->broker, NULL);
        drained = json_array_size(held) == 0;
    }
    size_t i;
    json_t *h;
    json_array_foreach(held, i, h) {
        json_t *g = json_object_get(self->gens, json_string_value(json_object_get(h, "name")));
        json_object_set_new(h, "gen", json_integer(json_integer_value(g)));
        json_object_del(h, "kernel");
    }
    json_t *rec = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:b, s:I}", "node", self->cfg.node,
                            "manager", self->manager, "addr", self->cfg.advertise, "sessions",
                            (json_int_t)broker_size(self->broker), "max_sessions",
                            (json_int_t)self->cfg.max_sessions, "mem_free",
                            (json_int_t)s_mem_free(), "drained", drained, "at",
                            (json_int_t)time(NULL));
    char *rtext = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
    char *htext = json_dumps(held, JSON_COMPACT);
    json_decref(rec);
    json_decref(held);
    pthread_mutex_lock(&self->mu);
    if (rtext) {
        free(self->record);
        self->record = rtext;
    }
    free(self->held);
    self->held = htext;
    pthread_mutex_unlock(&self->mu);
    return 0;
}

static int s_on_stale(loop_t *loop, int fd, int events, void *arg)
{
    (void)loop;
    (void)events;
    cluster_t *self = arg;
    uint64_t n;
    if (read(fd, &n, sizeof n) < 0)
        return 0;
    pthread_mutex_lock(&self->mu);
    char *text = self->stale, *answers = self->resolved;
    self->stale = self->resolved = NULL;
    pthread_mutex_unlock(&self->mu);
    json_t *names = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    json_t *got = answers ? json_loads(answers, 0, NULL) : NULL;
    free(answers);
    const char *gname;
    json_t *gv;
    json_object_foreach(got, gname, gv)
        json_object_set_new(self->answers, gname,
                            json_pack("{s:I, s:O}", "at", (json_int_t)util_now_ms(), "where", gv));
    json_decref(got);
    if (got && self->on_resolved)
        self->on_resolved(self->on_resolved_arg);
    size_t i;
    json_t *v;
    json_array_foreach(names, i, v) {
        const char *name = json_string_value(v);
        if (name && broker_release(self->broker, name) == 0) {
            LOG_W("cluster: session %s is no longer this node's in the catalog (another "
                  "node's now, or its name released): this node's stale copy is dropped, never "
                  "served", name);
            json_object_del(self->gens, name);
        }
    }
    json_decref(names);
    return 0;
}

cluster_t *cluster_new(loop_t *loop, broker_t *broker, const cluster_cfg_t *cfg)
{
    cluster_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    self->broker = broker;
    self->cfg = *cfg;
    self->timer = -1;
    self->gens = json_object();
    self->answers = json_object();
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cond, NULL);
    self->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (self->efd < 0 || loop_fd(loop, self->efd, LOOP_IN, s_on_stale, self) < 0 ||
        pthread_create(&self->thread, NULL, s_thread, self) != 0) {
        PLOG_E("cluster: cannot start");
        cluster_destroy(&self);
        return NULL;
    }
    self->started = 1;
    return self;
}

void cluster_serve(cluster_t *self, const char *manager_endpoint)
{
    snprintf(self->manager, sizeof self->manager, "%s", manager_endpoint);
    s_on_tick(self->loop, -1, self);
    self->timer = loop_timer(self->loop, CLUSTER_TICK_MS, 0, s_on_tick, self);
    pthread_cond_signal(&self->cond);
    LOG_I("cluster: node %s at %s joins %s", self->cfg.node, self->cfg.advertise, self->cfg.url);
}

void cluster_destroy(cluster_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    cluster_t *self = *self_p;
    if (self->started) {
        pthread_mutex_lock(&self->mu);
        self->stop = 1;
        pthread_cond_signal(&self->cond);
        pthread_mutex_unlock(&self->mu);
        pthread_join(self->thread, NULL);
    }
    loop_timer_end(self->loop, self->timer);
    if (self->efd >= 0) {
        loop_fd_end(self->loop, self->efd);
        close(self->efd);
    }
    json_decref(self->gens);
    json_decref(self->answers);
    free(self->lookups);
    free(self->resolved);
    free(self->record);
    free(self->held);
    free(self->stale);
    pthread_mutex_destroy(&self->mu);
    pthread_cond_destroy(&self->cond);
    free(self);
    *self_p = NULL;
}

void cluster_track(cluster_t *self, const char *name, long long gen)
{
    if (gen > 0)
        json_object_set_new(self->gens, name, json_integer(gen));
}

/*  Rewrite the connection file's ip as ours: the ports stay (a session's clients keep their
 *  file's ports; only the address moved). */
static int s_readdress(const char *dir, const char *ip)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/connection.json", dir);
    json_t *c = json_load_file(path, 0, NULL);
    if (!json_is_object(c)) {
        json_decref(c);
        return -1;
    }
    json_object_set_new(c, "ip", json_string(ip));
    int rc = statedir_write_json(path, c, STATEDIR_DURABLE);
    json_decref(c);
    return rc;
}

static int s_id_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > 39)
        return 0;
    for (const char *p = id; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || *p == '-'))
            return 0;
    return 1;
}

json_t *cluster_adopt(cluster_t *self, const char *name, long long gen, const char *from,
                      const char *id, char *why, size_t why_len)
{
    if (!s_id_ok(id) || strchr(from, '/') || from[0] == '.' || !from[0]) {
        snprintf(why, why_len, "adopt needs a session id and a node name");
        return NULL;
    }
    char src[PATH_MAX], dst[PATH_MAX];
    snprintf(src, sizeof src, "%s/nodes/%s/sessions/%s", self->cfg.shared, from, id);
    snprintf(dst, sizeof dst, "%s/sessions/%s", self->cfg.state_dir, id);
    if (strcmp(from, self->cfg.node) != 0 && rename(src, dst) < 0) {
        snprintf(why, why_len, "session %s's checkpoint is not in %s: %s", name, src,
                 strerror(errno));
        return NULL;
    }
    if (s_readdress(dst, self->cfg.advertise) < 0)
        LOG_W("cluster: session %s: cannot rewrite its connection file's ip", name);
    /* The first cell is told where its state is from: the checkpoint's time (the snapshot
     * file's), or that there was none. */
    char snap[PATH_MAX + 16], notice[320], when[40] = "";
    snprintf(snap, sizeof snap, "%s/snapshot", dst);
    struct stat st;
    if (stat(snap, &st) == 0) {
        struct tm tm;
        gmtime_r(&st.st_mtime, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        snprintf(notice, sizeof notice,
                 "[kennel: this session moved from node %s to node %s; its state is from its "
                 "checkpoint of %s: what ran after that is lost]\n", from, self->cfg.node, when);
    } else {
        snprintf(notice, sizeof notice,
                 "[kennel: this session moved from node %s to node %s, which found no "
                 "checkpoint of its state: it starts afresh; its workspace files are kept]\n",
                 from, self->cfg.node);
    }
    json_t *info = broker_adopt(self->broker, dst, id, notice);
    if (!info && strcmp(from, self->cfg.node) != 0 && rename(dst, src) < 0)
        PLOG_W("cluster: session %s stays in %s", name, dst);
    if (!info) {
        snprintf(why, why_len, "session %s could not be revived from its checkpoint (kenneld's "
                               "log says why)", name);
        return NULL;
    }
    cluster_track(self, name, gen);
    LOG_I("cluster: session %s (generation %lld) revived here from node %s's checkpoint", name,
          gen, from);
    return info;
}

void cluster_drain(cluster_t *self, int on)
{
    self->draining = on;
    LOG_I("cluster: node %s %s", self->cfg.node,
          on ? "drains: its sessions are saved and released" : "serves again");
}

const char *cluster_node(const cluster_t *self)
{
    return self->cfg.node;
}

int cluster_resolve(cluster_t *self, const char *name, json_t **where)
{
    *where = NULL;
    json_t *a = json_object_get(self->answers, name);
    if (a && util_now_ms() - json_integer_value(json_object_get(a, "at")) < RESOLVE_KEEP_MS) {
        json_t *w = json_object_get(a, "where");
        if (json_string_value(json_object_get(w, "manager")))
            *where = json_incref(w);
        return 0;
    }
    pthread_mutex_lock(&self->mu);
    json_t *list = self->lookups ? json_loads(self->lookups, 0, NULL) : json_array();
    json_array_append_new(list, json_string(name));
    free(self->lookups);
    self->lookups = json_dumps(list, JSON_COMPACT);
    json_decref(list);
    pthread_cond_signal(&self->cond);
    pthread_mutex_unlock(&self->mu);
    return 1;
}

void cluster_on_resolved(cluster_t *self, void (*fn)(void *arg), void *arg)
{
    self->on_resolved = fn;
    self->on_resolved_arg = arg;
}
