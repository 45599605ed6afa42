/*  zygote: one spawner_zygote_t at a time, made again on demand after it is stopped. The
 *  lifeline pipe lives as long as the client: every kernel of every zygote holds its read end,
 *  which hangs up when kenneld dies. */
#include "zygote.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/mount.h>
#include <sys/stat.h>

#include <jansson.h>

#include "log.h"

#define ZYGOTE_STALL_MS 60000 /* a zygote that owes answers this long is hung (imports too) */

struct zygote {
    loop_t *loop;
    zygote_cfg_t cfg;
    const launch_t *launch;
    zygote_ops_t ops;
    void *ctx;
    spawner_zygote_t *z;     /* NULL until (re)started on demand */
    int watch;               /* its watchdog timer, or -1 */
    int lifeline[2];         /* the zygote's kernels hold [0]; it hangs up when kenneld dies */
};

zygote_t *zygote_new(loop_t *loop, const zygote_cfg_t *cfg, const launch_t *launch,
                     const zygote_ops_t *ops, void *ctx)
{
    zygote_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    self->cfg = *cfg;
    self->launch = launch;
    self->ops = *ops;
    self->ctx = ctx;
    self->watch = -1;
    if (pipe2(self->lifeline, O_CLOEXEC) < 0) {
        int saved = errno;
        free(self);
        errno = saved;
        return NULL;
    }
    return self;
}

void zygote_destroy(zygote_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zygote_t *self = *self_p;
    zygote_stop(self);
    for (int i = 0; i < 2; i++)
        close(self->lifeline[i]);
    free(self);
    *self_p = NULL;
}

/*  Stop the zygote. Kernels it has not said the pid of are given up (ops->stopped: pooled
 *  ones dropped, a session's failed as a kernel that could not start); one cloned all the
 *  same is found among kenneld's children and killed (its strays). */
void zygote_stop(zygote_t *self)
{
    if (!self->z)
        return;
    loop_fd_end(self->loop, spawner_zygote_fd(self->z));
    if (self->watch >= 0)
        loop_timer_end(self->loop, self->watch);
    self->watch = -1;
    spawner_zygote_destroy(&self->z);
    self->ops.stopped(self->ctx);
}

/*  A zygote that stopped answering (a hang in its imports, say) is replaced, and the
 *  kernels it owes fail instead of waiting for ever. */
static int s_on_watch(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    zygote_t *self = arg;
    if (self->z && spawner_zygote_stalled(self->z, ZYGOTE_STALL_MS)) {
        LOG_W("the zygote (pid %d) has not answered for %d s; killing it",
              (int)spawner_zygote_pid(self->z), ZYGOTE_STALL_MS / 1000);
        zygote_stop(self);
        self->ops.changed(self->ctx, 1);
    }
    return 0;
}

/*  The zygote said something unasked: it is ready, or it is gone. */
static int s_on_zygote(loop_t *loop, int fd, int revents, void *arg)
{
    (void)loop;
    (void)fd;
    (void)revents;
    zygote_t *self = arg;
    char why[256];
    int rc = spawner_zygote_poll(self->z, why, sizeof why);
    self->ops.answered(self->ctx);
    if (rc < 0) {
        LOG_W("%s; another one will start", why);
        zygote_stop(self);
    }
    /* A zygote that keeps dying is restarted less and less often (the owner backs off). */
    self->ops.changed(self->ctx, rc < 0);
    return 0;
}

int zygote_start(zygote_t *self)
{
    if (self->z)
        return 0;
    const zygote_cfg_t *cfg = &self->cfg;
    char cache[PATH_MAX + 32];
    /* matplotlib builds its font cache once, here, not in every kernel. */
    snprintf(cache, sizeof cache, "%s/zygote", cfg->state_dir);
    if (mkdir(cache, 0700) < 0 && errno != EEXIST)
        return -1;
    char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
                    "MPLBACKEND=module://matplotlib_inline.backend_inline",
                    /* a BLAS that starts threads would keep the zygote out of user namespaces */
                    "OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", NULL};
    const char *path[] = {cfg->kernel_dir, cfg->zygote_dir, NULL};
    int init_fd = open(cfg->init_path, O_PATH | O_CLOEXEC);
    if (init_fd < 0)
        return -1;
    spawner_zygote_cfg_t zc = {cfg->python, path, cfg->kernel_dir, cfg->preload, envp, cache,
                               self->lifeline[0], init_fd, cfg->merge_pages, cfg->binds,
                               cfg->nbinds};
    self->z = spawner_zygote_new(&zc);
    int saved = errno;
    close(init_fd);
    errno = saved;
    if (!self->z)
        return -1;
    if (loop_fd(self->loop, spawner_zygote_fd(self->z), LOOP_IN, s_on_zygote, self) < 0)
        PLOG_W("cannot watch the zygote");
    self->watch = loop_timer(self->loop, 2000, 0, s_on_watch, self);
    LOG_I("zygote started (pid %d), importing %s", (int)spawner_zygote_pid(self->z),
          cfg->preload);
    return 0;
}

int zygote_request(zygote_t *self, const char *workspace, size_t slot, const reslimits_t *limits,
                   const cgroup_t *cg, spawner_proc_t *out, unsigned long *ticket, char *why,
                   size_t why_len)
{
    if (zygote_start(self) < 0) {
        snprintf(why, why_len, "cannot start the zygote: %s", strerror(errno));
        return -1;
    }
    launch_env_t env;
    launch_env(self->launch, workspace, NULL, env);
    json_t *envo = json_object();
    for (size_t i = 0; i < LAUNCH_ENV_N; i++) {
        char *eq = strchr(env[i], '=');
        *eq = '\0';
        json_object_set_new(envo, env[i], json_string(eq + 1));
    }
    uid_t uid;
    gid_t gid;
    launch_ids(self->launch, slot, &uid, &gid);
    json_t *req = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}", "uid", (json_int_t)uid,
                            "gid", (json_int_t)gid,
                            "tmp", (json_int_t)limits->tmp_bytes, "as",
                            (json_int_t)limits->cg.memory_bytes, "fsize", (json_int_t)limits->disk_bytes,
                            "nproc", (json_int_t)limits->cg.pids, "nofile",
                            (json_int_t)limits->nofile, "env", envo);
    /* Only descriptors cross over. The workspace goes as a detached copy of its mount, which
     * the kernel's mount namespace can attach (a plain fd of ours could not be bound there). */
    int fds[SPAWNER_MAX_FDS] = {-1};
    size_t n = 0;
    fds[n] = open_tree(AT_FDCWD, workspace, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
    int rc = fds[n] < 0 ? -1 : 0;
    n += fds[n] >= 0;
    char *const *procs = cg ? cgroup_procs_paths(cg) : NULL;
    for (size_t i = 0; rc == 0 && procs && procs[i] && n + 1 < SPAWNER_MAX_FDS; i++) {
        fds[n] = open(procs[i], O_WRONLY | O_CLOEXEC);
        rc = fds[n] < 0 ? -1 : 0;
        n += fds[n] >= 0;
    }
    fds[n] = -1;
    unsigned long t = 0;
    if (rc < 0) {
        snprintf(why, why_len, "sandbox: %s: %s", n == 0 ? "open workspace" : "open cgroup",
                 strerror(errno));
    } else {
        rc = spawner_zygote_send(self->z, req, fds, out, &t, why, why_len);
        if (rc < 0 && spawner_zygote_gone(self->z)) {
            /* It died since we last looked: once more, with a new one. */
            LOG_W("the zygote is gone (%s); starting another", why);
            zygote_stop(self);
            if (zygote_start(self) == 0)
                rc = spawner_zygote_send(self->z, req, fds, out, &t, why, why_len);
        }
    }
    if (rc == 0)
        *ticket = t;
    for (size_t i = 0; i < n; i++)
        close(fds[i]);
    json_decref(req);
    return rc;
}

void zygote_check(zygote_t *self)
{
    if (self->z && spawner_zygote_gone(self->z)) {
        LOG_W("the zygote is gone; another one will start");
        zygote_stop(self);
    }
}

int zygote_take(zygote_t *self, unsigned long ticket, spawner_proc_t *out, char *why,
                size_t why_len)
{
    if (!self->z) {
        snprintf(why, why_len, "the zygote is gone");
        return SPAWNER_ZYGOTE_GONE;
    }
    return spawner_zygote_take(self->z, ticket, out, why, why_len);
}

int zygote_running(const zygote_t *self)
{
    return self->z != NULL;
}

int zygote_ready(const zygote_t *self)
{
    return self->z && spawner_zygote_ready(self->z);
}

pid_t zygote_pid(const zygote_t *self)
{
    return self->z ? spawner_zygote_pid(self->z) : 0;
}

long zygote_hint_pages(const zygote_t *self)
{
    return self->z ? spawner_zygote_hint_pages(self->z) : 0;
}
