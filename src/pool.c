/*  pool: a list of kernels, each asked of the zygote once its workspace is ready, and watched
 *  through its pidfd once the zygote has named it. */
#include "pool.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/wait.h>

#include <czmq.h>

#include "disk.h"
#include "diskjob.h"
#include "statedir.h"
#include "util.h"

/* A new session usually runs its first cell within milliseconds of being made: the pool's
 * refill waits this long after a hand-over, so that its work (kenneld's and the new kernel's
 * start) does not compete with that cell. */
#define POOL_REFILL_AFTER_TAKE_MS 150
/* Demand is the number of sessions asked of the pool within this window. */
#define POOL_DEMAND_WINDOW_MS 1000
#define POOL_TAKES_KEPT 65 /* the largest max (64), and one */

struct pool {
    loop_t *loop;
    pool_cfg_t cfg;
    zlistx_t *list;          /* pool_kernel_t*: sealed kernels waiting for new sessions */
    int timer;               /* armed refill timer, or -1 */
    int failures;            /* in a row: the refill backs off */
    size_t target;           /* kernels kept now: cfg.size, more after a burst */
    long long takes[POOL_TAKES_KEPT]; /* when sessions were last asked of it, a ring */
    size_t take_next;        /* the ring's next slot */
    long long burst_at;      /* when the demand last raised target */
    int shrink_timer;        /* armed while target > cfg.size, or -1 */
};

/*  A kernel made for a session that does not exist yet: its id, directory, workspace, host uid
 *  and cgroup are chosen at fill time, so that creating the session is a hand-over. */
struct pool_kernel {
    pool_t *pool;
    char id[40];
    char dir[PATH_MAX];
    char workspace[PATH_MAX + 16];
    size_t slot;
    cgroup_t *cg;
    spawner_proc_t proc;     /* pid 0 until the zygote has answered */
    unsigned long ticket;
    int disk_mounted;        /* its workspace is a mounted image (the default --disk) */
    diskjob_t *disk_job;     /* that image is being made; the zygote is asked afterwards */
};

static void s_pool_fill(pool_t *self);

/*  Forget a pooled kernel: killed, reaped (kenneld's child, so this waits only for the kill),
 *  its cgroup and directory removed. */
static void s_pool_drop(pool_t *self, pool_kernel_t *p)
{
    if (p->disk_job) {
        /* Its image is still being made: the job removes it, directory and all. */
        diskjob_abandon(p->disk_job, 0);
        p->disk_job = NULL;
        p->dir[0] = '\0';
    }
    if (p->proc.pidfd >= 0) {
        loop_fd_end(self->loop, p->proc.pidfd);
        if (!p->proc.reaped) {
            /* Dying takes CPU too (unmapping a copy of the zygote): at the background share,
             * beside busy sessions, the wait below took seconds. */
            (void)cgroup_set_background(p->cg, 0);
            spawner_signal(&p->proc, SIGKILL);
            siginfo_t info;
            (void)waitid((idtype_t)P_PIDFD, (id_t)p->proc.pidfd, &info, WEXITED);
        }
    }
    spawner_release(&p->proc);
    cgroup_destroy(&p->cg);
    if (p->disk_mounted && disk_is_mounted(p->workspace) && disk_unmount(p->workspace, 1) < 0)
        PLOG_W("umount(%s)", p->workspace);
    if (p->dir[0] && statedir_remove_tree(p->dir) < 0)
        PLOG_W("remove %s", p->dir);
    launch_slot_free(self->cfg.launch, p->slot);
    free(p);
}

/*  A failed or dead pooled kernel: drop it and refill later, backing off while it keeps
 *  failing (a machine that cannot build the sandbox must not spin). */
static void s_pool_failed(pool_t *self, pool_kernel_t *p, const char *why)
{
    if (log_allow(self->cfg.warn_limit, 5))
        LOG_W("pool: a kernel was lost: %s", why);
    void *handle = zlistx_find(self->list, p);
    if (handle)
        zlistx_detach(self->list, handle);
    s_pool_drop(self, p);
    self->failures++;
    s_pool_fill(self);
}

static int s_on_pooled_exit(loop_t *loop, int fd, int revents, void *arg)
{
    (void)loop;
    (void)revents;
    pool_t *self = arg;
    for (pool_kernel_t *p = zlistx_first(self->list); p; p = zlistx_next(self->list)) {
        if (p->proc.pidfd != fd)
            continue;
        char how[192];
        if (spawner_reap(&p->proc, how, sizeof how) != 0)
            s_pool_failed(self, p, how);
        break;
    }
    return 0;
}

void pool_collect(pool_t *self)
{
    if (!zygote_running(self->cfg.zygote))
        return;
    pool_kernel_t *p = zlistx_first(self->list);
    while (p) {
        pool_kernel_t *next = zlistx_next(self->list);
        if (p->disk_job) { /* the zygote is not asked yet */
            p = next;
            continue;
        }
        char why[256];
        int rc = p->proc.pid ? 1
                             : zygote_take(self->cfg.zygote, p->ticket, &p->proc, why, sizeof why);
        if (rc < 0) {
            s_pool_failed(self, p, why);
        } else if (rc > 0 && p->proc.pid && p->ticket) {
            p->ticket = 0;
            self->failures = 0;
            if (loop_fd(self->loop, p->proc.pidfd, LOOP_IN, s_on_pooled_exit, self) < 0)
                PLOG_W("pool: cannot watch a kernel's pidfd");
            LOG_D("pool: kernel %d ready for a session", (int)p->proc.pid);
        }
        /* the list may have changed under s_pool_failed: start over from what is left */
        if (rc < 0) {
            p = zlistx_first(self->list);
            continue;
        }
        p = next;
    }
}

/*  The pooled kernel's workspace is ready: its cgroup, then the zygote's fork. 0, or -1 with
 *  why. */
static int s_pool_spawn(pool_t *self, pool_kernel_t *p, char *why, size_t why_len)
{
    if (!(p->cg = cgroup_create(p->id, &self->cfg.limits.cg))) {
        snprintf(why, why_len, "cgroup: %s", strerror(errno));
        return -1;
    }
    if (cgroup_set_background(p->cg, 1) < 0 && log_allow(self->cfg.warn_limit, 5))
        PLOG_W("pool: a waiting kernel keeps the default cpu share");
    return zygote_request(self->cfg.zygote, p->workspace, p->slot, &self->cfg.limits, p->cg,
                          &p->proc, &p->ticket, why, why_len);
}

static void s_pool_disk_ready(void *pooled, const diskjob_result_t *j)
{
    pool_kernel_t *p = pooled;
    pool_t *self = p->pool;
    p->disk_job = NULL;
    /* Out of the pool while the zygote is asked: a zygote found dead then is stopped, which
     * drops every pooled kernel it has not named yet (this one included, were it listed). */
    void *handle = zlistx_find(self->list, p);
    if (handle)
        zlistx_detach(self->list, handle);
    char why[300];
    if (j->rc < 0) {
        snprintf(why, sizeof why, "workspace image: %s: %s", j->step, strerror(j->err));
    } else {
        p->disk_mounted = 1;
        LOG_D("pool: workspace image made and mounted in %lld ms", j->ms);
        if (s_pool_spawn(self, p, why, sizeof why) == 0) {
            zlistx_add_end(self->list, p);
            return;
        }
    }
    s_pool_failed(self, p, why);
    zygote_check(self->cfg.zygote);
}

/*  One more pooled kernel: its directory now, its image on the worker thread, then the
 *  zygote's fork. 0, or -1 (logged). */
static int s_pool_add(pool_t *self)
{
    pool_kernel_t *p = calloc(1, sizeof *p);
    if (!p)
        return -1;
    p->pool = self;
    p->proc.pidfd = p->proc.pipe_fd = -1;
    if (launch_slot_take(self->cfg.launch, -1, &p->slot) < 0) {
        free(p);
        return -1;
    }
    util_uuid(p->id);
    char why[256] = "";
    uid_t uid;
    gid_t gid;
    launch_ids(self->cfg.launch, p->slot, &uid, &gid);
    unsigned long long disk = self->cfg.limits.disk_bytes;
    if (statedir_session_create(self->cfg.state_dir, p->id, p->dir, sizeof p->dir) < 0 ||
        snprintf(p->workspace, sizeof p->workspace, "%s/workspace", p->dir) >= PATH_MAX ||
        chown(p->workspace, uid, gid) < 0) {
        snprintf(why, sizeof why, "session directory: %s", strerror(errno));
    } else if (disk && diskjob_check(disk, self->cfg.disk_ok, self->cfg.disk_desc, why,
                                     sizeof why) == 0) {
        p->disk_job = diskjob_submit(self->cfg.worker, p->dir, p->workspace, disk, uid, gid,
                                     s_pool_disk_ready, p);
        if (p->disk_job) {
            zlistx_add_end(self->list, p);
            return 0;
        }
        snprintf(why, sizeof why, "workspace image: %s", strerror(errno));
    } else if (!disk && s_pool_spawn(self, p, why, sizeof why) == 0) {
        zlistx_add_end(self->list, p);
        return 0;
    }
    if (log_allow(self->cfg.warn_limit, 5))
        LOG_W("pool: cannot prepare a kernel: %s", why);
    s_pool_drop(self, p);
    self->failures++;
    zygote_check(self->cfg.zygote);
    return -1;
}

void pool_forget_pending(pool_t *self)
{
    pool_kernel_t *p = zlistx_first(self->list);
    while (p) {
        if (p->proc.pid) {
            p = zlistx_next(self->list);
            continue;
        }
        zlistx_detach_cur(self->list);
        s_pool_drop(self, p);
        p = zlistx_first(self->list);
    }
}

static int s_on_pool_timer(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    pool_t *self = arg;
    self->timer = -1;
    if (!zygote_running(self->cfg.zygote)) {
        /* It died: start another; its "ready" fills the pool. */
        if (zygote_start(self->cfg.zygote) < 0) {
            PLOG_W("pool: cannot start the zygote");
            self->failures++;
            s_pool_fill(self);
        }
        return 0;
    }
    /* One kernel per turn of the loop: a refill never holds up a client for long. */
    if (zlistx_size(self->list) < self->target && zygote_ready(self->cfg.zygote))
        s_pool_add(self);
    s_pool_fill(self);
    return 0;
}

/*  Top the pool up, in the background: one kernel per timer tick, later and later while
 *  kernels (or the zygote) keep failing. A zygote still importing calls this when ready. */
static void s_pool_fill_after(pool_t *self, size_t delay)
{
    if (self->timer >= 0 || zlistx_size(self->list) >= self->target ||
        (zygote_running(self->cfg.zygote) && !zygote_ready(self->cfg.zygote)))
        return;
    for (int i = 0; i < self->failures && delay < 30000; i++)
        delay *= 2;
    self->timer = loop_timer(self->loop, (long long)delay, 1, s_on_pool_timer, self);
}

static void s_pool_fill(pool_t *self)
{
    s_pool_fill_after(self, 1);
}

void pool_refill(pool_t *self, int lost)
{
    if (lost)
        self->failures++;
    s_pool_fill(self);
}

/*  A pooled kernel whose hello waits in its pipe: it has finished starting. */
static int s_pooled_ready(const pool_kernel_t *p)
{
    struct pollfd pfd = {p->proc.pipe_fd, POLLIN, 0};
    return p->proc.pid > 0 && !p->proc.reaped && poll(&pfd, 1, 0) > 0;
}

/*  Same walls as the pool's kernels (timeout and idle are kenneld's business, not theirs). */
static int s_pool_fits(const pool_t *self, const reslimits_t *l)
{
    return !l || reslimits_same_walls(l, &self->cfg.limits);
}

/*  A grown pool, once `linger` has passed without a burst: halve target toward cfg.size and
 *  drop the waiting kernels past it (not those the zygote is still forking: the next turn
 *  takes them). */
static int s_on_shrink_timer(loop_t *loop, int timer_id, void *arg)
{
    (void)timer_id;
    pool_t *self = arg;
    self->shrink_timer = -1;
    long long quiet = util_now_ms() - self->burst_at;
    if (quiet >= self->cfg.linger_ms) {
        size_t was = self->target;
        self->target = self->target / 2 > self->cfg.size ? self->target / 2 : self->cfg.size;
        self->burst_at = util_now_ms();
        LOG_I("pool: no burst for %lld s: keeps %zu kernels (was %zu)",
              self->cfg.linger_ms / 1000, self->target, was);
    }
    while (zlistx_size(self->list) > self->target) {
        pool_kernel_t *victim = NULL; /* the newest the zygote is not forking now */
        for (pool_kernel_t *p = zlistx_last(self->list); p && !victim; p = zlistx_prev(self->list))
            if (p->proc.pid || p->disk_job)
                victim = p;
        if (!victim)
            break;
        zlistx_detach(self->list, zlistx_find(self->list, victim));
        s_pool_drop(self, victim);
    }
    if (self->target > self->cfg.size || zlistx_size(self->list) > self->target) {
        long long left = self->cfg.linger_ms - (util_now_ms() - self->burst_at);
        self->shrink_timer = loop_timer(loop, left > 100 ? left : 100, 1, s_on_shrink_timer, self);
    }
    return 0;
}

/*  A session was asked of the pool: the sessions asked within the last window are the demand
 *  the pool grows to (up to cfg.max). */
static void s_pool_demand(pool_t *self)
{
    long long now = util_now_ms();
    self->takes[self->take_next] = now;
    self->take_next = (self->take_next + 1) % POOL_TAKES_KEPT;
    size_t demand = 0;
    for (size_t i = 0; i < POOL_TAKES_KEPT; i++)
        demand += self->takes[i] && now - self->takes[i] < POOL_DEMAND_WINDOW_MS;
    if (demand > self->cfg.max)
        demand = self->cfg.max;
    if (demand <= self->target)
        return;
    if (self->target == self->cfg.size || demand == self->cfg.max)
        LOG_I("pool: %zu sessions asked for within a second: grows to %zu kernels", demand,
              demand);
    self->target = demand;
    self->burst_at = now;
    if (self->shrink_timer < 0)
        self->shrink_timer =
            loop_timer(self->loop, self->cfg.linger_ms, 1, s_on_shrink_timer, self);
}

pool_kernel_t *pool_take(pool_t *self, const reslimits_t *limits)
{
    if (!s_pool_fits(self, limits))
        return NULL;
    s_pool_demand(self);
    pool_collect(self);
    for (int pass = 0; pass < 2; pass++) {
        for (pool_kernel_t *p = zlistx_first(self->list); p; p = zlistx_next(self->list)) {
            if (!p->proc.pid || p->proc.reaped || (pass == 0 && !s_pooled_ready(p)))
                continue;
            loop_fd_end(self->loop, p->proc.pidfd);
            zlistx_detach_cur(self->list);
            s_pool_fill_after(self, POOL_REFILL_AFTER_TAKE_MS);
            return p;
        }
    }
    return NULL;
}

const char *pool_kernel_id(const pool_kernel_t *k)
{
    return k->id;
}

size_t pool_kernel_slot(const pool_kernel_t *k)
{
    return k->slot;
}

void pool_kernel_adopt(pool_kernel_t **k_p, spawner_proc_t *proc, cgroup_t **cg)
{
    *proc = (*k_p)->proc;
    *cg = (*k_p)->cg;
    free(*k_p);
    *k_p = NULL;
}

void pool_kernel_drop(pool_t *self, pool_kernel_t **k_p)
{
    s_pool_drop(self, *k_p);
    *k_p = NULL;
}

size_t pool_target(const pool_t *self)
{
    return self ? self->target : 0;
}

size_t pool_ready(const pool_t *self)
{
    size_t n = 0;
    for (pool_kernel_t *p = zlistx_first(self->list); p; p = zlistx_next(self->list))
        n += s_pooled_ready(p);
    return n;
}

int pool_has(const pool_t *self, pid_t pid)
{
    for (pool_kernel_t *p = zlistx_first(self->list); p; p = zlistx_next(self->list))
        if (p->proc.pid == pid)
            return 1;
    return 0;
}

pool_t *pool_new(loop_t *loop, const pool_cfg_t *cfg)
{
    pool_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    self->cfg = *cfg;
    self->timer = -1;
    self->shrink_timer = -1;
    self->target = cfg->size;
    self->list = zlistx_new();
    if (!self->list) {
        free(self);
        errno = ENOMEM;
        return NULL;
    }
    return self;
}

void pool_destroy(pool_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pool_t *self = *self_p;
    if (self->timer >= 0)
        loop_timer_end(self->loop, self->timer);
    if (self->shrink_timer >= 0)
        loop_timer_end(self->loop, self->shrink_timer);
    pool_kernel_t *p;
    while ((p = zlistx_detach(self->list, NULL)))
        s_pool_drop(self, p);
    zlistx_destroy(&self->list);
    free(self);
    *self_p = NULL;
}
