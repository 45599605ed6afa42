/*  broker: the session table and the glue around each session. Each job around a session is
 *  a module of its own, which the broker owns and tells what happens to sessions; the broker
 *  itself binds a session's channels, starts its kernel, serves the kernel's pipe and does the
 *  I/O the session asks for (session_ops_t). Two rules hold here:
 *  - a session is never freed inside a callback that runs for it: an ended session is
 *    unhooked from the loop at once and freed by a timer on a later turn, once its channels
 *    hold nothing more to send;
 *  - a kernel is reaped only through its pidfd: an ended session's kernel is killed and kept
 *    as an orphan (orphans.h) until its pidfd says it is gone, with what must wait for it.
 *  That nothing blocks, and that no session's flood starves another, is kept by the channels
 *  (sockets drop instead of blocking) and by kernpipe (bounded reads and frames per turn). */
#include "broker.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "channels.h"
#include "connection.h"
#include "disk.h"
#include "diskjob.h"
#include "kernpipe.h"
#include "launch.h"
#include "log.h"
#include "loop.h"
#include "meter.h"
#include "orphans.h"
#include "pool.h"
#include "record.h"
#include "route.h"
#include "runlog.h"
#include "snapstore.h"
#include "spawner.h"
#include "statedir.h"
#include "sweeper.h"
#include "util.h"
#include "worker.h"
#include "wsfile.h"
#include "zygote.h"

/* How long a launched session's shell waits for a client on its iopub (s_serve says why).
 * Jupyter's clients join within a reconnect interval (100-200 ms); a client that never
 * subscribes is served after this. */
#define LAUNCHED_IOPUB_WAIT_MS 10000

typedef struct sess sess_t;

struct broker {
    loop_t *loop;
    broker_cfg_t cfg;
    session_ops_t ops;       /* every session's, its sess_t the context */
    zlistx_t *sessions;      /* sess_t*, oldest first; owns them */
    zlistx_t *closing;       /* sess_t* unhooked, freed by the next tick */
    int tick_timer;          /* the armed timer that frees closing sessions, or -1 */
    int cgroup_timer;        /* armed while groups wait to be removed (cgroup_retry), or -1 */
    int respawn_timer;       /* armed when sessions wait for a kernel asked again, or -1 */
    launch_t *launch;        /* the kernels' host ids (uid slots), environment, command */
    zygote_t *zygote;        /* the zygote link; no zygote runs with --spawner exec, or until
                              * (re)started on demand */
    pool_t *pool;            /* sealed kernels waiting for new sessions */
    orphans_t *orphans;      /* killed kernels waiting to be reaped */
    snapstore_t *snaps;      /* evicted sessions' snapshots, written on snap_worker */
    meter_t *meter;          /* measures sessions' memory, off the loop and off the worker */
    sweeper_t *sweeper;      /* removes ended sessions' directories from the trash */
    worker_t *worker;        /* makes and mounts new workspace images (diskjob), off the loop */
    worker_t *snap_worker;   /* writes, copies and drops snapshots (snapstore), off the loop:
                              * a thread of its own, so that a session's large snapshot does
                              * not hold up other sessions' new workspaces */
    worker_t *signer;        /* signs sessions' large messages, off the loop (channels) */
    runlog_t *runlog;        /* run records, written on worker; NULL: none (--runs-keep 0) */
    broker_notify_fn *settled; /* what broker_workspace, broker_info or broker_list waited
                                * for is done (a workspace, a measure) */
    void *settled_arg;
    int memory_timer;        /* the guard of kenneld's own memory (--max-memory), or -1 */
    long long memory_cut_at; /* when it last cut every client (monotonic ms) */
    char boot_id[40];        /* this boot's (/proc/sys/kernel/random/boot_id), or "" */
    log_limit_t warn_limit;  /* warnings peers can cause, the pool's too */
    /* The fork under way (broker_fork): one at a time, since the manager waits for it. */
    struct {
        int state;           /* FORK_NONE, FORK_SAVING (the source's kernel pickles), FORK_DONE */
        char src[40];        /* the source's id */
        char name[132];      /* the fork's name */
        reslimits_t limits;  /* the fork's limits */
        json_t *info;        /* done: the fork's info, or NULL and err */
        json_t *lost;        /* done: what was not copied */
        broker_error_t err;
    } fork;
};

enum { FORK_NONE, FORK_SAVING, FORK_DONE };

/*  A launched session's launcher: its pid (0: not known), start time (clock ticks after boot)
 *  and the boot's id, which meta.json keeps so that a later kenneld can tell that process from
 *  one that reused its pid, in this boot or after a reboot. */
typedef struct {
    pid_t pid;
    unsigned long long start;
    char boot[40]; /* empty: not known */
} launcher_t;

struct sess {
    broker_t *broker;
    session_t *core;
    channels_t *ch;
    size_t recv_mark;   /* channels_received at the memory guard's last look */
    size_t recv_recent; /* what its clients sent between its last two looks */
    char id[40];
    char tenant[TENANTS_NAME_MAX + 1]; /* "" : none (an operator's session) */
    char dir[PATH_MAX];
    char conn_path[PATH_MAX];
    char workspace[PATH_MAX];
    size_t slot;             /* its uid slot (launch.h): the kernel's host ids */
    int disk_mounted;        /* the workspace is a mounted image (limits.disk_bytes) */
    diskjob_t *disk_job;     /* that image is being made and mounted; the kernel waits */
    int kill_pending;        /* a SIGKILL came before the kernel had a pid (a restart asked
                              * for while it started): delivered once it has one */
    int respawn;             /* the zygote died owing this kernel: asked again (s_on_respawn) */
    int respawned;           /* ... once per start (s_op_kernel_start): a zygote that dies at
                              * every fork fails it */
    reslimits_t limits;
    char *limits_text;       /* limits as JSON, for run records: made at the first (they never
                              * change) */
    cgroup_t *cg;            /* the running kernel's cgroup, or NULL */
    spawner_proc_t proc;
    int has_proc;            /* proc is a live (unreaped) kernel */
    int adopting;            /* the next kernel start takes proc and cg from the pool */
    unsigned long ticket;    /* the zygote's answer (the kernel's pid) is still to come */
    int timer_id[SESSION_TIMERS]; /* the session's armed loop timers (session_timer_t), or -1 */
    int launched;            /* made by a kernelspec launcher: lives as long as it */
    launcher_t launcher;
    int launcher_fd;         /* launched: a pidfd of the launcher, whose exit ends it; or -1 */
    int stdin_timer;         /* retries an input_request whose client's stdin has not joined */
    long long stdin_wait_ms; /* its last wait (it doubles) */
    int hold_timer;          /* launched: shell is not read until a client is on iopub or
                              * this LAUNCHED_IOPUB_WAIT_MS timer fires; -1: shell is read */
    int closed;              /* in the broker's closing list: freed once its channels hold
                              * nothing more to send (channels_pending) */
    char killed_for[96];     /* why kenneld killed the running kernel, told with its exit */
    kernpipe_t *pipe;        /* proc's pipe, served while the kernel runs; paused while the
                              * channels hold messages behind a large one being signed
                              * (channels_pending), so what kenneld holds stays bounded */
    long long pss, uss;      /* the kernel's memory as last measured (meter.h) */
    long long mem_at;        /* util_now_ms() of that measure; 0: never */
    size_t dropped_seen;     /* channels_dropped when s_on_flushed last looked */
    int scratch_fd;          /* the file without a name its kernel writes its last save into
                              * (s_op_snapshot_file): a new one each save, the last let go of
                              * on the worker then and when the kernel goes; or -1 */
    int seed_fd;             /* a fork's: the snapshot its first kernel maps (a memfd of the
                              * source kernel's state, or the evicted source's snapshot file,
                              * opened), or -1 */
    char *copy_from;         /* a fork's: the workspace to copy once its image is mounted */
    int mapped_fd;           /* the snapshot's file the running kernel was given to map (a
                              * revival's, a fork's seed), held until the kernel is gone and
                              * then let go of on the snapshot worker (s_kernel_gone), or -1 */
};

/*  The sections below, in the order a session's life needs them, call back up through these. */
static void s_close_sess(sess_t *s, int forget);
static void s_arm_tick(broker_t *b);
static void s_arm_cgroup_retry(void *arg);

/* ---- finding sessions, and telling the manager ----------------------------------------------- */

/*  A session's workspace is mounted, failed, or its session ended, or a measure of memory is
 *  done: what broker_workspace, broker_info or broker_list waited for (see broker_on_settled). */
static void s_settled(broker_t *b)
{
    if (b->settled)
        b->settled(b->settled_arg);
}

static sess_t *s_find_id(broker_t *self, const char *id)
{
    for (sess_t *s = zlistx_first(self->sessions); s; s = zlistx_next(self->sessions))
        if (strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

static sess_t *s_find(broker_t *self, const char *id_or_name)
{
    for (sess_t *s = zlistx_first(self->sessions); s; s = zlistx_next(self->sessions))
        if (strcmp(s->id, id_or_name) == 0 || strcmp(session_name(s->core), id_or_name) == 0)
            return s;
    return NULL;
}

/* ---- a session's kernel: started, fed, signalled, gone --------------------------------------- */

static int s_pipe_frame(void *ctx, kpipe_frame_t *f, const char **why)
{
    sess_t *s = ctx;
    return session_on_kernel(s->core, f, why);
}

static int s_pipe_capped(void *ctx)
{
    sess_t *s = ctx;
    return session_output_capped(s->core);
}

/*  Kill the kernel for a protocol violation; its pidfd will report the exit. */
static void s_pipe_violation(void *ctx, const char *why)
{
    sess_t *s = ctx;
    snprintf(s->killed_for, sizeof s->killed_for, "it broke the kernel pipe's protocol (%s)", why);
    if (s->has_proc)
        spawner_signal(&s->proc, SIGKILL);
}

static const kernpipe_ops_t s_pipe_ops = {s_pipe_frame, s_pipe_capped, s_pipe_violation};

static int s_op_to_kernel(void *ctx, const kpipe_iov_t *parts, size_t n)
{
    sess_t *s = ctx;
    int rc = kernpipe_send(s->pipe, parts, n);
    return rc == KERNPIPE_TOO_LARGE ? SESSION_TOO_LARGE : rc;
}

/*  The kernel is gone, or never came (the zygote could not make it): what it wrote before it
 *  went is taken, its pipe closed, its process released. */
static void s_kernel_gone(sess_t *s)
{
    kernpipe_drain(s->pipe);
    kernpipe_close(s->pipe);
    /* Its save file goes with it, let go of on the worker (where freeing what the kernel
     * wrote there costs the loop nothing). The next kernel's first save makes a new one. */
    snapstore_release(s->broker->snaps, s->id, s->scratch_fd); /* (-1: none) */
    s->scratch_fd = -1;
    /* The file it mapped, when this was the last reference (the snapshot was dropped after
     * the revival, or a newer one renamed over it), frees its page cache and blocks as it
     * closes: ~22 ms per 100 MB here, which the kernel's exit paid, and an eviction waits
     * for that exit. Held here, it is paid on the worker. */
    snapstore_release(s->broker->snaps, s->id, s->mapped_fd);
    s->mapped_fd = -1;
    loop_fd_end(s->broker->loop, s->proc.pidfd); /* if it was watched */
    spawner_release(&s->proc);
    s->has_proc = 0;
}

/*  The kernel exited: read what it wrote before dying, then tell the session. */
static int s_on_pidfd(loop_t *loop, int fd, int revents, void *arg)
{
    (void)loop;
    (void)fd;
    (void)revents;
    sess_t *s = arg;
    char how[192];
    int rc = spawner_reap(&s->proc, how, sizeof how);
    if (rc == 0)
        return 0;
    if (rc < 0)
        snprintf(how, sizeof how, "vanished (%s)", strerror(errno));
    s_kernel_gone(s);
    session_exit_t kind = SESSION_EXIT_CRASH;
    if (s->cg) {
        /* An OOM kill shows as SIGKILL; the cgroup knows it was the memory limit. */
        long long mem, peak, ooms;
        cgroup_stats(s->cg, &mem, &peak, &ooms);
        if (ooms > 0) {
            kind = SESSION_EXIT_MEMORY;
            size_t len = strlen(how);
            snprintf(how + len, sizeof how - len, " by the memory limit (%llu MiB)",
                     s->limits.cg.memory_bytes >> 20);
        }
        cgroup_destroy(&s->cg);
    }
    if (s->killed_for[0] && kind == SESSION_EXIT_CRASH) {
        size_t len = strlen(how);
        snprintf(how + len, sizeof how - len, ": %s", s->killed_for);
    }
    s->killed_for[0] = '\0';
    LOG_I("session=%s: kernel %s", s->id, how);
    session_on_kernel_exit(s->core, how, kind);
    return 0;
}

/*  The kernel's pid is known: watch its pidfd. */
static void s_watch_pidfd(sess_t *s)
{
    broker_t *b = s->broker;
    if (loop_fd(b->loop, s->proc.pidfd, LOOP_IN, s_on_pidfd, s) < 0)
        PLOG_W("session=%s: cannot watch the kernel's pidfd", s->id);
    LOG_I("session=%s: kernel started, pid %d%s", s->id, (int)s->proc.pid,
          b->cfg.sandbox ? "" : " (NOT SANDBOXED)");
    if (s->kill_pending) {
        s->kill_pending = 0;
        spawner_signal(&s->proc, SIGKILL); /* its exit comes through the pidfd */
    }
}

/*  s->proc runs: read its pipe, watch its pidfd. 0, or -1 with errno. */
static int s_kernel_started(sess_t *s)
{
    s->has_proc = 1;
    s->mem_at = 0; /* a new kernel: not measured yet */
    s->pss = s->uss = 0;
    s->killed_for[0] = '\0';
    if (kernpipe_open(s->pipe, s->proc.pipe_fd) < 0) {
        spawner_signal(&s->proc, SIGKILL);
        return -1;
    }
    if (s->ticket) {
        LOG_D("session=%s: kernel asked of the zygote", s->id);
        return 0;
    }
    s_watch_pidfd(s);
    return 0;
}

/*  Ask the zygote for session s's kernel; its pid comes later (s_sess_collect). The pipe is
 *  ours at once, so the kernel's hello is read whenever it comes. 0, or -1 with errno (and
 *  the session told why). */
static int s_zygote_spawn(broker_t *b, sess_t *s, spawner_proc_t *out)
{
    char why[300] = "";
    if (zygote_request(b->zygote, s->workspace, s->slot, &s->limits, s->cg, out, &s->ticket, why,
                       sizeof why) < 0) {
        LOG_W("session=%s: the zygote cannot start a kernel: %s", s->id, why);
        session_start_failed(s->core, why);
        zygote_check(b->zygote);
        errno = EAGAIN;
        return -1;
    }
    return 0;
}

/*  Start s's kernel now that its workspace is ready. 0, or -1 with errno. */
static int s_kernel_spawn(sess_t *s)
{
    broker_t *b = s->broker;
    launch_cmd_t cmd;
    launch_cold(b->launch, s->workspace, s->dir, s->slot, &s->limits, &cmd);
    cgroup_destroy(&s->cg);
    if (b->cfg.sandbox) {
        s->cg = cgroup_create(s->id, &s->limits.cg);
        if (!s->cg) {
            PLOG_W("session=%s: cannot create its cgroup", s->id);
            return -1;
        }
    }
    int rc = b->cfg.sandbox && b->cfg.zygote
                 ? s_zygote_spawn(b, s, &s->proc)
                 : spawner_spawn(cmd.argv, cmd.envp, b->cfg.sandbox ? "/" : s->workspace,
                                 s->cg ? cgroup_procs_paths(s->cg) : NULL, &s->proc);
    if (rc < 0) {
        int saved = errno;
        cgroup_destroy(&s->cg);
        errno = saved;
        return -1;
    }
    return s_kernel_started(s);
}

/*  Spawn the kernel of a starting session whose start waited (for its image, for a new
 *  zygote); its failure, or a kill that came meanwhile, is the kernel's exit. */
static void s_spawn_deferred(sess_t *s)
{
    if (s->kill_pending) {
        /* Killed before it started (a restart): as if this kernel had run and been killed;
         * the session starts the next one. */
        s->kill_pending = 0;
        session_on_kernel_exit(s->core, "was killed before it started", SESSION_EXIT_CRASH);
        return;
    }
    if (s_kernel_spawn(s) < 0) {
        if (!session_start_error(s->core)[0])
            session_start_failed(s->core, strerror(errno));
        session_on_kernel_exit(s->core, "could not start", SESSION_EXIT_CRASH);
    }
}

static void s_fork_copy(sess_t *s, const char *from, json_t *lost);

static void s_sess_disk_ready(sess_t *s, const diskjob_result_t *j)
{
    char why[300];
    if (j->rc < 0) {
        s->kill_pending = 0;
        snprintf(why, sizeof why, "cannot set up the workspace's disk: %s: %s", j->step,
                 strerror(j->err));
        session_start_failed(s->core, why);
        session_on_kernel_exit(s->core, "could not start", SESSION_EXIT_CRASH);
        return;
    }
    s->disk_mounted = 1;
    LOG_D("session=%s: workspace image (%llu MiB) made and mounted in %lld ms", s->id,
          s->limits.disk_bytes >> 20, j->ms);
    if (s->copy_from) {
        /* A fork's files, before its kernel (whose restore may chdir into them) starts. */
        s_fork_copy(s, s->copy_from, NULL);
        free(s->copy_from);
        s->copy_from = NULL;
    }
    s_spawn_deferred(s);
}

/*  s's image is made and mounted, or failed. */
static void s_sess_disk_done(void *owner, const diskjob_result_t *result)
{
    sess_t *s = owner;
    s->disk_job = NULL;
    s_sess_disk_ready(s, result);
    s_settled(s->broker);
}

/*  A new session's workspace image is made and mounted off the loop; its kernel starts when
 *  that is done (s_sess_disk_ready). Until then the session is starting, as it would be
 *  waiting for its kernel's hello. 0, or -1 with errno. */
static int s_sess_disk_start(sess_t *s)
{
    if (s->disk_job)
        return 0;
    uid_t uid;
    gid_t gid;
    launch_ids(s->broker->launch, s->slot, &uid, &gid);
    s->disk_job = diskjob_submit(s->broker->worker, s->dir, s->workspace, s->limits.disk_bytes,
                                 uid, gid, s_sess_disk_done, s);
    if (!s->disk_job) {
        char why[200];
        snprintf(why, sizeof why, "cannot set up the workspace's disk: %s", strerror(errno));
        session_start_failed(s->core, why);
        return -1;
    }
    return 0;
}

static int s_op_kernel_start(void *ctx)
{
    sess_t *s = ctx;
    s->respawned = 0; /* a new start: its kernel may be asked again once */
    if (s->adopting) {
        /* A new session's kernel from the pool: already sealed, its hello waiting. */
        s->adopting = 0;
        return s_kernel_started(s);
    }
    if (s->limits.disk_bytes && !s->disk_mounted)
        return s_sess_disk_start(s);
    return s_kernel_spawn(s);
}

/*  Kernels the zygote died owing: asked of the next zygote, from the loop (not from within
 *  the dead zygote's teardown, which this may start again). */
static int s_on_respawn(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    broker_t *b = arg;
    b->respawn_timer = -1; /* fired: its id may be reused */
    for (;;) {
        sess_t *s = zlistx_first(b->sessions);
        while (s && !s->respawn)
            s = zlistx_next(b->sessions);
        if (!s)
            return 0;
        s->respawn = 0;
        LOG_I("session=%s: the zygote died before its kernel started; asking the next one",
              s->id);
        s_spawn_deferred(s); /* may end sessions: the table is walked again */
    }
}

/*  The zygote's answers for sessions' kernels (and for kernels of sessions closed while they
 *  waited, kept as orphans). A failed spawn is the session's kernel exiting before its hello,
 *  except that a kernel the zygote died owing is asked of the next one, once per start. */
static void s_sess_collect(broker_t *b)
{
    char why[256];
    for (;;) {
        sess_t *s;
        int rc = 0;
        for (s = zlistx_first(b->sessions); s; s = zlistx_next(b->sessions)) {
            if (!s->ticket)
                continue;
            rc = zygote_take(b->zygote, s->ticket, &s->proc, why, sizeof why);
            if (rc != 0)
                break;
        }
        if (!s)
            break;
        s->ticket = 0;
        if (rc > 0) {
            s_watch_pidfd(s);
            continue;
        }
        s_kernel_gone(s);
        cgroup_destroy(&s->cg);
        /* Asked again only if that kernel never said hello: one that did may have served cells
         * already, and its loss is a crash like any other. */
        if (rc == SPAWNER_ZYGOTE_GONE && !s->respawned &&
            session_state(s->core) == SESSION_STARTING) {
            s->respawn = s->respawned = 1;
            if (b->respawn_timer < 0)
                b->respawn_timer = loop_timer(b->loop, 0, 1, s_on_respawn, b);
            if (b->respawn_timer >= 0)
                continue;
            s->respawn = 0;
        }
        /* As if the kernel had exited before its hello (which may end the session, so the
         * table is walked again from the start). */
        LOG_W("session=%s: the zygote cannot start a kernel: %s", s->id, why);
        s->kill_pending = 0;
        session_start_failed(s->core, why);
        session_on_kernel_exit(s->core, why, SESSION_EXIT_CRASH);
    }
    if (b->orphans)
        orphans_collect(b->orphans);
}

static void s_op_kernel_signal(void *ctx, int sig)
{
    sess_t *s = ctx;
    if (!s->has_proc || !s->proc.pid) {
        /* Starting: its image is being made, or the zygote has not said its pid. A kill (a
         * restart) must still reach it, or its hello would wait for an exit for ever. */
        s->kill_pending |= sig == SIGKILL && (s->disk_job || s->ticket || s->respawn);
        return;
    }
    if (spawner_signal(&s->proc, sig) < 0 && errno != ESRCH)
        PLOG_W("session=%s: signal %d", s->id, sig);
}

/* ---- a session's timers and snapshots -------------------------------------------------------- */

static int s_on_timer(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    sess_t *s = arg;
    session_timer_t which = SESSION_TIMER_CELL;
    for (int t = 0; t < SESSION_TIMERS; t++)
        if (timer_id == s->timer_id[t])
            which = (session_timer_t)t;
    s->timer_id[which] = -1;
    session_on_timer(s->core, which);
    return 0;
}

/*  The idle clock is re-armed on every client message: an armed timer is moved, not ended
 *  and made again. */
static void s_op_timer_arm(void *ctx, session_timer_t which, long long delay_ms)
{
    sess_t *s = ctx;
    long long ms = delay_ms > 0 ? delay_ms : 1;
    if (s->timer_id[which] >= 0 && loop_timer_reset(s->broker->loop, s->timer_id[which], ms) == 0)
        return;
    s->timer_id[which] = loop_timer(s->broker->loop, ms, 1, s_on_timer, s);
    if (s->timer_id[which] < 0)
        PLOG_W("session=%s: cannot arm a timer", s->id);
}

static void s_op_timer_cancel(void *ctx, session_timer_t which)
{
    sess_t *s = ctx;
    if (s->timer_id[which] >= 0)
        loop_timer_end(s->broker->loop, s->timer_id[which]);
    s->timer_id[which] = -1;
}

/*  A snapshot counts against the session's --disk, with what its workspace image holds. */
static int s_op_snapshot_store(void *ctx, const void *data, size_t len, const char **why)
{
    sess_t *s = ctx;
    return snapstore_store(s->broker->snaps, s->id, s->dir, data, len, s->limits.disk_bytes, why);
}

/*  The bytes of the snapshot file (snapshot_fd's fallback). */
static int s_op_snapshot_load(void *ctx, void **data, size_t *len)
{
    sess_t *s = ctx;
    return snapstore_load(s->broker->snaps, s->dir, data, len);
}

/*  A revival's snapshot as its file, for the kernel to map (session.h); a fork's first
 *  kernel gets its seed (once: a later kernel of the fork starts fresh, as a revival whose
 *  restore failed does). */
static int s_op_snapshot_fd(void *ctx)
{
    sess_t *s = ctx;
    int fd = s->seed_fd;
    s->seed_fd = -1;
    if (fd < 0)
        fd = snapstore_open(s->dir);
    /* Held for the kernel's life (s_kernel_gone), unless its pages are memory (a memfd
     * seed, a state directory on tmpfs), which would stay pinned that long after the
     * kernel dropped its arrays. Without a hold, the kernel's exit lets go of it. */
    struct statfs fs;
    if (fd >= 0 && s->mapped_fd < 0 && fstatfs(fd, &fs) == 0 && fs.f_type != TMPFS_MAGIC &&
        fs.f_type != HUGETLBFS_MAGIC)
        s->mapped_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    return fd;
}

static int s_op_fd_to_kernel(void *ctx, int fd)
{
    sess_t *s = ctx;
    return kernpipe_send_fd(s->pipe, fd);
}

/*  The file a save is written into (session.h): a new one for each save, without a name
 *  (O_TMPFILE) in the session's own workspace file system (its capped image, mounted with
 *  discard), emptied on the worker once kenneld has copied what the kernel wrote. A kernel
 *  may keep the descriptor it was given (its code is the user's): through it, it reaches
 *  only this file, whose blocks are its workspace's, bounded by its image whatever it does
 *  to the file (fallocate, the reserve ioctls); what the snapshot is is kenneld's own copy,
 *  in the session directory, which no kernel holds. With --disk 0 the workspace is a plain
 *  directory, as open to the kernel as this file. The last save's file is let go of on the
 *  worker, not truncated here for reuse: a kernel still writing into it (a thread of its
 *  own, gigabytes in one call) holds the file's lock, and the loop, every session's, would
 *  wait on it. */
static int s_op_snapshot_file(void *ctx)
{
    sess_t *s = ctx;
    if (snapstore_busy(s->broker->snaps, s->id))
        return -1; /* a store may still read the file: this save goes through the pipe */
    snapstore_release(s->broker->snaps, s->id, s->scratch_fd); /* (-1: none) */
    s->scratch_fd = snapstore_file(s->workspace);
    return s->scratch_fd < 0 ? -1 : fcntl(s->scratch_fd, F_DUPFD_CLOEXEC, 0);
}

/*  A snapshot is what the kernel held in its memory, pickled: one larger than its memory
 *  limit is refused (and so the copy and the deadline it gets are bounded, --disk 0 or
 *  not). Against the disk cap it counts with the workspace image (which holds the save
 *  file's blocks too). */
static int s_op_snapshot_fits(void *ctx, size_t len, const char **why)
{
    static char reason[160];
    sess_t *s = ctx;
    if (s->limits.cg.memory_bytes && len > s->limits.cg.memory_bytes) {
        snprintf(reason, sizeof reason,
                 "the snapshot's %zu bytes are more than the session's memory limit of %llu",
                 len, (unsigned long long)s->limits.cg.memory_bytes);
        *why = reason;
        return -1;
    }
    return snapstore_fits(s->dir, len, s->limits.disk_bytes, why);
}

static int s_op_snapshot_store_fd(void *ctx, int fd, size_t len, const char **why)
{
    sess_t *s = ctx;
    return snapstore_store_fd(s->broker->snaps, s->id, s->dir, fd, len, why);
}

static void s_op_snapshot_drop(void *ctx)
{
    sess_t *s = ctx;
    if (s->seed_fd >= 0)
        close(s->seed_fd);
    s->seed_fd = -1;
    snapstore_drop(s->broker->snaps, s->id, s->dir);
}

static size_t s_op_iopub_backlog(void *ctx)
{
    sess_t *s = ctx;
    return channels_iopub_backlog(s->ch);
}

static void s_op_cell_done(void *ctx, const jmsg_t *request, const json_t *metadata,
                           const char *ename, long long cell, size_t output_bytes)
{
    sess_t *s = ctx;
    if (!s->broker->runlog)
        return;
    /* The code as parsed, or, when the content was parsed only shallowly (a large one) or
     * the code holds a NUL, the raw content, which the worker parses. */
    const char *code = jmsg_cstr(json_object_get(jmsg_content(request), "code"));
    size_t raw_len = 0;
    const void *raw = code ? NULL : jmsg_raw(request, JMSG_CONTENT, &raw_len);
    if (!s->limits_text) {
        json_t *limits = reslimits_json(&s->limits);
        s->limits_text = limits ? json_dumps(limits, JSON_COMPACT | JSON_ENSURE_ASCII |
                                                         JSON_REAL_PRECISION(15))
                                : NULL;
        json_decref(limits);
    }
    runlog_cell_t c = {s->id, session_name(s->core), cell,     code,     code ? strlen(code) : 0,
                       raw,   raw_len,               s->limits_text, metadata, ename, output_bytes};
    runlog_cell(s->broker->runlog, &c);
}

static void s_op_ended(void *ctx)
{
    s_close_sess(ctx, 1);
}

/* ---- a session's sockets --------------------------------------------------------------------- */

static int s_on_socket(loop_t *loop, zsock_t *sock, void *arg)
{
    sess_t *s = arg;
    if (sock == channels_socket(s->ch, CHANNELS_HB)) {
        channels_hb_echo(s->ch);
        return 0;
    }
    channels_index_t i = sock == channels_socket(s->ch, CHANNELS_SHELL)     ? CHANNELS_SHELL
                         : sock == channels_socket(s->ch, CHANNELS_CONTROL) ? CHANNELS_CONTROL
                                                                            : CHANNELS_STDIN;
    unsigned channel = i == CHANNELS_SHELL ? ROUTE_SHELL : i == CHANNELS_CONTROL ? ROUTE_CONTROL : ROUTE_STDIN;
    jmsg_t *m = NULL;
    int rc = channels_recv(s->ch, i, &m);
    if (rc == WIRE_AGAIN) { /* a large message: its signature is checked a slice a turn */
        loop_reader_again(loop, sock);
        return 0;
    }
    if (rc != 0) {
        if (log_allow(&s->broker->warn_limit, 5))
            LOG_W("session=%s: dropped a message on %s: %s", s->id, route_channel_name(channel),
                  wire_strerror(rc));
        return 0;
    }
    LOG_D("session=%s: <- %s %s", s->id, route_channel_name(channel), jmsg_type(m));
    session_on_request(s->core, channel, &m);
    return 0;
}

/*  An input_request whose client's stdin socket has not joined yet (channels_send said
 *  CHANNELS_HELD) goes again while the kernel waits for the answer: after STDIN_RETRY_MS,
 *  then at twice the last wait, up to STDIN_RETRY_MAX_MS (a client without a stdin socket
 *  may never join). */
#define STDIN_RETRY_MS 10
#define STDIN_RETRY_MAX_MS 1000

static int s_on_stdin_retry(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    sess_t *s = arg;
    int rc = 0;
    if (!session_awaiting_input(s->core))
        channels_drop_held(s->ch);
    else if ((rc = channels_retry_held(s->ch)) == 0)
        LOG_D("session=%s: -> stdin input_request, its client there now", s->id);
    else if (rc < 0 && log_allow(&s->broker->warn_limit, 5))
        LOG_W("session=%s: send on stdin failed", s->id);
    /* A send outside the socket's reader (see s_op_send). */
    loop_reader_touch(s->broker->loop, channels_socket(s->ch, CHANNELS_STDIN));
    if (rc != 1) {
        loop_timer_end(s->broker->loop, s->stdin_timer);
        s->stdin_timer = -1;
    } else if (s->stdin_wait_ms < STDIN_RETRY_MAX_MS) {
        s->stdin_wait_ms = s->stdin_wait_ms * 2 < STDIN_RETRY_MAX_MS ? s->stdin_wait_ms * 2
                                                                       : STDIN_RETRY_MAX_MS;
        loop_timer_reset(s->broker->loop, s->stdin_timer, s->stdin_wait_ms);
    }
    return 0;
}

static void s_arm_stdin_retry(sess_t *s)
{
    s->stdin_wait_ms = STDIN_RETRY_MS;
    if (s->stdin_timer >= 0)
        loop_timer_reset(s->broker->loop, s->stdin_timer, s->stdin_wait_ms);
    else if ((s->stdin_timer = loop_timer(s->broker->loop, s->stdin_wait_ms, 0, s_on_stdin_retry,
                                          s)) < 0)
        PLOG_W("session=%s: cannot arm a timer", s->id);
}

static void s_op_send(void *ctx, unsigned channel, jmsg_t **msg_p)
{
    sess_t *s = ctx;
    channels_index_t i = channel == ROUTE_IOPUB     ? CHANNELS_IOPUB
                         : channel == ROUTE_CONTROL ? CHANNELS_CONTROL
                         : (channel == ROUTE_STDIN || channel == ROUTE_KSTDIN) ? CHANNELS_STDIN
                                                                                 : CHANNELS_SHELL;
    LOG_D("session=%s: -> %s %s", s->id, route_channel_name(channel), jmsg_type(*msg_p));
    char type[64]; /* for the log line: the send takes the message */
    const char *t = jmsg_type(*msg_p);
    size_t tn = strnlen(t, sizeof type - 1);
    memcpy(type, t, tn);
    type[tn] = '\0';
    int rc = channels_send(s->ch, i, msg_p);
    if (rc == CHANNELS_HELD) {
        LOG_D("session=%s: stdin: the client has not joined; %s held", s->id, type);
        s_arm_stdin_retry(s);
    } else if (i == CHANNELS_STDIN && !channels_held(s->ch) && s->stdin_timer >= 0) {
        loop_timer_end(s->broker->loop, s->stdin_timer); /* what it retried is stale now */
        s->stdin_timer = -1;
    }
    if (rc < 0 && log_allow(&s->broker->warn_limit, 5))
        LOG_W("session=%s: send on %s failed", s->id, route_channel_name(channel));
    else if (rc == CHANNELS_DROPPED && i == CHANNELS_IOPUB && log_allow(&s->broker->warn_limit, 5))
        LOG_W("session=%s: iopub's subscribers have not read its last --max-unread bytes: "
              "output dropped (%zu messages so far)", s->id, channels_dropped(s->ch));
    else if (rc == CHANNELS_DROPPED && log_allow(&s->broker->warn_limit, 5))
        LOG_W("session=%s: a client has not read its last --max-unread bytes of %s: %s "
              "dropped (%zu messages so far)", s->id, route_channel_name(channel), type,
              channels_dropped(s->ch));
    /* A send can swallow the wake-up of a request arriving on the same socket, and we often
     * send from outside its reader (a kernel's reply, a timer): the loop must look again. This
     * is the one place session sockets are sent on (the heartbeat echoes in its own reader,
     * s_on_flushed sends what waited here, and s_on_stdin_retry a held prompt). iopub's
     * subscriptions arrive the same way. */
    loop_reader_touch(s->broker->loop, channels_socket(s->ch, i));
    s->dropped_seen = channels_dropped(s->ch); /* logged above */
    if (channels_pending(s->ch))
        kernpipe_pause(s->pipe); /* the kernel's next frames wait for the signer */
}

/*  A large message was signed and what waited behind it went (see channels_send). */
static void s_on_flushed(void *arg)
{
    sess_t *s = arg;
    for (int i = 0; i < CHANNELS_HB; i++)
        loop_reader_touch(s->broker->loop, channels_socket(s->ch, (channels_index_t)i));
    size_t dropped = channels_dropped(s->ch);
    if (dropped > s->dropped_seen && log_allow(&s->broker->warn_limit, 5))
        LOG_W("session=%s: clients have not read their last --max-unread bytes: messages "
              "dropped (%zu so far)", s->id, dropped);
    s->dropped_seen = dropped;
    if (!s->closed && channels_held(s->ch) && s->stdin_timer < 0) {
        LOG_D("session=%s: stdin: the client has not joined; input_request held", s->id);
        s_arm_stdin_retry(s);
    }
    if (s->closed && !channels_pending(s->ch))
        s_arm_tick(s->broker); /* its last messages went: it can be freed */
    if (!channels_pending(s->ch))
        kernpipe_resume(s->pipe);
}

static void s_read(sess_t *s, channels_index_t i, loop_reader_fn *handler)
{
    if (loop_reader(s->broker->loop, channels_socket(s->ch, i), handler, s) < 0) {
        LOG_E("out of memory");
        exit(1);
    }
}

static void s_release_shell(sess_t *s)
{
    loop_timer_end(s->broker->loop, s->hold_timer);
    s->hold_timer = -1;
    s_read(s, CHANNELS_SHELL, s_on_socket);
}

/*  A session's iopub (an XPUB), read for the session's life: libzmq keeps every subscription
 *  message we do not read, and what its subscribers hold is bounded here. */
static int s_on_iopub(loop_t *loop, zsock_t *sock, void *arg)
{
    (void)loop;
    (void)sock;
    sess_t *s = arg;
    int rc = channels_read_subscription(s->ch);
    if (rc == CHANNELS_CUT && log_allow(&s->broker->warn_limit, 5))
        LOG_W("session=%s: iopub took more topics than Jupyter clients subscribe to: every "
              "connection to iopub cut (%zu times so far); its clients reconnect",
              s->id, channels_cuts(s->ch));
    if (rc >= 1 && s->hold_timer >= 0) {
        LOG_D("session=%s: a client is on iopub; serving shell", s->id);
        s_release_shell(s);
    }
    return 0;
}

static int s_on_hold_expired(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    sess_t *s = arg;
    s->hold_timer = -1; /* fired: its id may be reused */
    LOG_I("session=%s: no client on iopub after %d ms; serving shell without one", s->id,
          LAUNCHED_IOPUB_WAIT_MS);
    s_release_shell(s);
    return 0;
}

/*  Start serving a made session's sockets.
 *  A launched session's client (Jupyter's KernelManager) connected to its ports before they
 *  were bound, and each of its sockets joins at its own reconnect, so shell may join before
 *  iopub. A request answered then publishes its busy and idle to no one: jupyter console runs
 *  its first cell as soon as kernel_info is answered, then waits for that cell's idle for
 *  ever. So shell is not read until a client has subscribed to iopub (or LAUNCHED_IOPUB_WAIT_MS
 *  passed): its requests wait in the socket. Control, stdin and heartbeat are served at once. */
static void s_serve(broker_t *self, sess_t *s)
{
    s_read(s, CHANNELS_IOPUB, s_on_iopub);
    if (s->launched) {
        s->hold_timer = loop_timer(self->loop, LAUNCHED_IOPUB_WAIT_MS, 1, s_on_hold_expired, s);
        if (s->hold_timer < 0) {
            LOG_E("out of memory");
            exit(1);
        }
    }
    for (int i = 0; i < CHANNELS_N; i++)
        if (i != CHANNELS_IOPUB && !(i == CHANNELS_SHELL && s->launched))
            s_read(s, (channels_index_t)i, s_on_socket);
    zlistx_add_end(self->sessions, s);
}

/* ---- making, closing and freeing sessions ---------------------------------------------------- */

/*  A capped workspace is an ext4 image loop-mounted over the workspace directory: made and
 *  mounted for a new session on the worker thread (diskjob.h), mounted again (after a
 *  check) for a restored one here. Fails closed: a session never runs uncapped because its
 *  cap could not be built.
 *  A workspace cap of `bytes` (0: none) this machine cannot enforce is refused, never ignored.
 *  0, or -1 with err ("DiskUnavailable"). */
static int s_disk_check(const broker_t *self, unsigned long long bytes, broker_error_t *err)
{
    if (diskjob_check(bytes, self->cfg.disk_ok, self->cfg.disk_desc, err->evalue,
                      sizeof err->evalue) == 0)
        return 0;
    err->ename = "DiskUnavailable";
    return -1;
}

/*  Mount a restored session's image again (checked first), here and now: kenneld is starting
 *  and serves nobody yet. 0, or -1 with err. */
static int s_disk_remount(broker_t *self, sess_t *s, uid_t uid, gid_t gid, broker_error_t *err)
{
    if (!s->limits.disk_bytes)
        return 0;
    if (s_disk_check(self, s->limits.disk_bytes, err) < 0)
        return -1;
    char image[PATH_MAX + 16];
    snprintf(image, sizeof image, "%s/workspace.img", s->dir);
    if (access(image, F_OK) < 0 && errno == ENOENT) {
        /* Its image was never made (kenneld stopped first, or making it failed): made fresh
         * when its kernel starts, as for a new session. */
        LOG_I("session=%s: no workspace image yet; it is made when the kernel starts", s->id);
        return 0;
    }
    const char *step = NULL;
    long long t0 = util_now_ms();
    if (disk_mount(image, s->workspace, 0, uid, gid, &step) < 0) {
        err->ename = "DiskUnavailable";
        snprintf(err->evalue, sizeof err->evalue, "cannot set up the workspace's disk: %s: %s",
                 step, strerror(errno));
        return -1;
    }
    s->disk_mounted = 1;
    LOG_D("session=%s: workspace image checked and mounted in %lld ms", s->id,
          util_now_ms() - t0);
    return 0;
}

/*  Take a capped workspace's image off its directory. lazy: at once, even while a kernel
 *  still uses it (the filesystem goes with its last user); otherwise a real unmount, which
 *  writes everything back (the kernel must be gone). */
static void s_disk_unmount(sess_t *s, int lazy)
{
    if (!s->disk_mounted)
        return;
    s->disk_mounted = 0;
    if (disk_unmount(s->workspace, lazy) < 0)
        PLOG_E("session=%s: umount(%s)", s->id, s->workspace);
}

/*  What a session needs to come back after kenneld restarts: written at creation, again with
 *  its history (session_history) when its state is saved and when kenneld closes it. */
static int s_write_meta(const sess_t *s)
{
    json_t *history = session_history(s->core);
    record_t r = {.id = s->id,
                  .name = session_name(s->core),
                  .tenant = s->tenant,
                  .launched = s->launched,
                  .slot = (long long)s->slot,
                  .limits = s->limits,
                  .launcher_pid = s->launcher.pid,
                  .launcher_start = s->launcher.start,
                  .launcher_boot = s->launcher.boot,
                  .history = history};
    int rc = record_write(s->dir, &r);
    int saved = errno;
    json_decref(history);
    errno = saved;
    return rc;
}

/*  s goes before its image is ready (diskjob_abandon). A session not kept loses its meta.json
 *  at once, so that a kenneld that dies before the job is done does not bring it back. */
static void s_sess_disk_abandon(sess_t *s, int keep)
{
    diskjob_abandon(s->disk_job, keep);
    s->disk_job = NULL;
    if (!keep && record_remove(s->dir) < 0)
        PLOG_W("unlink(%s/meta.json)", s->dir);
}

static void s_free_sess(sess_t **s_p)
{
    sess_t *s = *s_p;
    if (!s)
        return;
    if (s->disk_job) /* not closed first (a failed create): the job undoes itself */
        s_sess_disk_abandon(s, 0);
    s_disk_unmount(s, 1);
    session_destroy(&s->core);
    channels_destroy(&s->ch);
    cgroup_destroy(&s->cg);
    launch_slot_free(s->broker->launch, s->slot);
    kernpipe_destroy(&s->pipe);
    if (s->launcher_fd >= 0)
        close(s->launcher_fd);
    if (s->seed_fd >= 0)
        close(s->seed_fd);
    if (s->scratch_fd >= 0)
        close(s->scratch_fd);
    if (s->mapped_fd >= 0)
        close(s->mapped_fd);
    free(s->copy_from);
    free(s->limits_text);
    free(s);
    *s_p = NULL;
}

static int s_tick(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    broker_t *b = arg;
    b->tick_timer = -1;
    /* One whose last messages wait for the signer (its end's error replies, say) stays:
     * s_on_flushed arms the tick again once they went. */
    sess_t *s = zlistx_first(b->closing);
    while (s) {
        void *handle = zlistx_cursor(b->closing);
        sess_t *next = zlistx_next(b->closing);
        if (!channels_pending(s->ch)) {
            zlistx_detach(b->closing, handle);
            s_free_sess(&s);
        }
        s = next;
    }
    return 0;
}

#define CGROUP_RETRY_MS 200

/*  Groups a killed kernel's processes had not yet left when it ended: tried again every
 *  CGROUP_RETRY_MS while any wait (cgroup.c). */
static int s_on_cgroup_retry(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    broker_t *b = arg;
    b->cgroup_timer = -1; /* fired: its id may be reused */
    if (cgroup_retry() > 0)
        s_arm_cgroup_retry(b);
    return 0;
}

static void s_arm_cgroup_retry(void *arg)
{
    broker_t *b = arg;
    if (b->cgroup_timer < 0)
        b->cgroup_timer = loop_timer(b->loop, CGROUP_RETRY_MS, 1, s_on_cgroup_retry, b);
}

/*  Free the closing sessions that have nothing more to send on the loop's next turn, once this
 *  one (and any callback for them) is over. */
static void s_arm_tick(broker_t *b)
{
    if (b->tick_timer >= 0)
        return;
    b->tick_timer = loop_timer(b->loop, 0, 1, s_tick, b);
    if (b->tick_timer < 0) {
        LOG_E("out of memory");
        exit(1);
    }
}

/*  Unhook a session from the loop and the table now; free it on the next tick. The kernel is
 *  killed and becomes an orphan until reaped. `forget` removes its directory for good; without
 *  it the next kenneld restores the session. */
static void s_close_sess(sess_t *s, int forget)
{
    broker_t *b = s->broker;
    void *handle = zlistx_find(b->sessions, s);
    if (!handle)
        return;
    zlistx_detach(b->sessions, handle);
    session_end(s->core, forget ? "the session was ended (kennel rm, an end_request, or its "
                                  "launcher's exit)"
                                : "kenneld stopped; the session comes back with the next one, "
                                  "without this request's work");
    if (!forget && s_write_meta(s) < 0)
        PLOG_W("session=%s: cannot update its meta.json", s->id);
    for (int t = 0; t < SESSION_TIMERS; t++)
        s_op_timer_cancel(s, (session_timer_t)t);
    loop_timer_end(b->loop, s->hold_timer);
    s->hold_timer = -1;
    loop_timer_end(b->loop, s->stdin_timer);
    s->stdin_timer = -1;
    if (s->launcher_fd >= 0)
        loop_fd_end(b->loop, s->launcher_fd);
    for (int i = 0; i < CHANNELS_N; i++)
        loop_reader_end(b->loop, channels_socket(s->ch, (channels_index_t)i));
    kernpipe_close(s->pipe);
    orphan_t o = {0};
    o.proc = s->proc;
    o.proc.pidfd = o.proc.pipe_fd = -1;
    o.cg = s->cg;
    s->cg = NULL;
    if (s->disk_job) {
        /* Its image is still being made (so no kernel runs yet): the job (skipped if it has
         * not begun) undoes itself, removing the directory unless the session is kept. */
        s_sess_disk_abandon(s, !forget);
        s_settled(b);
    } else if (forget) {
        /* Off our tree first, so the removal below never walks the kernel's filesystem
         * (the image file goes with the directory; its space, with the last user). */
        s_disk_unmount(s, 1);
        /* Gone from the sessions at once (a rename: a later kenneld never finds it), removed
         * off the loop once the kernel is gone: a workspace without a cap may hold millions
         * of files. A snapshot still being written there goes first, on the worker. */
        sweeper_trash(b->sweeper, s->dir, o.dir, sizeof o.dir);
        o.remover = snapstore_busy(b->snaps, s->id) ? b->snap_worker : NULL;
    } else if (s->disk_mounted) {
        /* Kept for the next kenneld: unmounted cleanly once the kernel has gone. */
        snprintf(o.mount, sizeof o.mount, "%s", s->workspace);
        s->disk_mounted = 0;
    }
    /* The kernel is killed and becomes an orphan: what waits for it goes once it is gone
     * (at once when there is none). */
    if (s->has_proc && s->ticket) {
        /* Killed once the zygote says which pid it is (orphans_collect). */
        spawner_release(&s->proc);
        o.ticket = s->ticket;
        s->ticket = 0;
        s->has_proc = 0;
    } else if (s->has_proc) {
        loop_fd_end(b->loop, s->proc.pidfd);
        o.proc = s->proc; /* the orphan takes the pidfd */
        s->proc.pidfd = -1;
        s->has_proc = 0;
    }
    if (orphans_add(b->orphans, &o) < 0)
        PLOG_W("session=%s: cannot watch its killed kernel's pidfd", s->id);
    LOG_I("session=%s: %s", s->id, forget ? "ended" : "closed");
    zlistx_add_end(b->closing, s);
    s->closed = 1;
    s_arm_tick(b);
}

/*  1 if pid is a kernel (or zygote) kenneld knows of, besides the orphans. */
static int s_pid_known(void *ctx, pid_t pid)
{
    broker_t *b = ctx;
    if (!b->sessions || !b->closing || !b->pool || !b->zygote)
        return 1; /* half made or half destroyed: claim nothing */
    if (zygote_pid(b->zygote) == pid)
        return 1;
    for (sess_t *s = zlistx_first(b->sessions); s; s = zlistx_next(b->sessions))
        if (s->has_proc && s->proc.pid == pid)
            return 1;
    for (sess_t *s = zlistx_first(b->closing); s; s = zlistx_next(b->closing))
        if (s->has_proc && s->proc.pid == pid)
            return 1;
    if (pool_has(b->pool, pid))
        return 1;
    return 0;
}

_Static_assert(TENANTS_MAX_IDS <= CHANNELS_MAX_OWNERS, "a tenant's every uid gets into its sockets");

/*  A tenant's session: its group (tenants.h) may enter its directory and read its
 *  connection file, as may root; nothing else of it (meta.json, the snapshot stay 0600, the
 *  workspace the kernel's uid's). The files stay root's, so the tenant cannot change what
 *  a later kenneld reads back. Its ipc sockets, if any, take the group's connections too
 *  (the gate checks the uid). An operator's session keeps 0700/0600. 0, or -1 with errno. */
static int s_share(sess_t *s)
{
    const tenants_t *ts = s->broker->cfg.tenants;
    const tenant_t *t = ts && s->tenant[0] ? tenants_find(ts, s->tenant) : NULL;
    if (!t || !t->has_gid)
        return 0;
    if (chown(s->dir, (uid_t)-1, t->gid) < 0 || chmod(s->dir, 0750) < 0 ||
        chown(s->conn_path, (uid_t)-1, t->gid) < 0 || chmod(s->conn_path, 0640) < 0)
        return -1;
    if (strcmp(s->broker->cfg.transport, "ipc") == 0) {
        for (int i = 1; i <= CHANNELS_N; i++) {
            char path[PATH_MAX + 16];
            snprintf(path, sizeof path, "%s/k-%d", s->dir, i);
            struct stat st;
            if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) &&
                (chown(path, (uid_t)-1, t->gid) < 0 || chmod(path, 0660) < 0))
                return -1;
        }
    }
    return 0;
}

/*  Build a session record, bind its sockets and write its connection file; no kernel yet.
 *  id NULL makes a new session; id with disk_ready makes one on a pooled kernel, taking its
 *  id, slot and directory; id alone is a session kenneld restores, keeping its id, slot,
 *  directory and connection. A connection is a client's, and checked as one, unless the
 *  session is restored. launched: NULL, or the launcher of a kernelspec's session (pid 0 when
 *  not known). NULL with *err on failure (nothing is left behind for a new session). */
static sess_t *s_make(broker_t *self, const char *id, const char *name, const char *tenant,
                      const json_t *connection, int curve, const reslimits_t *limits,
                      const launcher_t *launched, long slot, int disk_ready,
                      broker_error_t *err)
{
    /* A pooled kernel's session is new to its client: only a restored one's connection is
     * kenneld's own (its ipc paths are its sockets' already). */
    int restoring = id && !disk_ready;
    sess_t *s = calloc(1, sizeof *s);
    if (!s) {
        LOG_E("out of memory");
        exit(1);
    }
    s->broker = self;
    s->proc.pidfd = s->proc.pipe_fd = -1;
    s->scratch_fd = -1;
    for (int t = 0; t < SESSION_TIMERS; t++)
        s->timer_id[t] = -1;
    s->hold_timer = -1;
    s->stdin_timer = -1;
    s->launcher_fd = -1;
    s->seed_fd = -1;
    s->mapped_fd = -1;
    s->launched = launched != NULL;
    if (launched)
        s->launcher = *launched;
    s->limits = limits ? *limits : self->cfg.limits;
    /* A free slot exists: fewer than max_sessions are live. */
    int taken = launch_slot_take(self->launch, slot, &s->slot);
    assert(taken == 0);
    (void)taken;
    if (id)
        snprintf(s->id, sizeof s->id, "%s", id);
    else
        util_uuid(s->id);
    snprintf(s->tenant, sizeof s->tenant, "%s", tenant ? tenant : "");
    const tenant_t *t =
        self->cfg.tenants && s->tenant[0] ? tenants_find(self->cfg.tenants, s->tenant) : NULL;
    s->pipe = kernpipe_new(self->loop, s->id, self->cfg.max_pipe_frame, session_kpipe_alloc(),
                           &s_pipe_ops, s);
    if (!s->pipe) {
        LOG_E("out of memory");
        exit(1);
    }
    char key[40], ipc_prefix[PATH_MAX];
    channels_cfg_t cc = {.transport = self->cfg.transport, .ip = self->cfg.ip,
                         .key = util_uuid(key), .max_unread = self->cfg.max_unread,
                         .signer = self->signer, .gate = self->cfg.gate,
                         .max_clients = self->cfg.max_clients,
                         .uids = t ? t->uids : NULL, .nuids = t ? t->nuids : 0};
    char curve_pub[41], curve_sec[41];
    if (connection &&
        connection_parse(connection, &cc, !restoring, &err->ename, err->evalue,
                         sizeof err->evalue) < 0)
        goto fail;
    if (connection && curve && !cc.curve_secret) {
        /* A front end's connection file without keys, under kenneld --curve: binding its
         * sockets without CURVE would break the promise; with keys of kenneld's own, the
         * front end could not connect. */
        err->ename = "BadRequest";
        snprintf(err->evalue, sizeof err->evalue,
                 "sessions here need CURVE: the connection needs curve_publickey and "
                 "curve_secretkey (JEP 145; jupyter_client's transport_encryption)");
        goto fail;
    }
    if (!connection && curve) {
        if (zmq_curve_keypair(curve_pub, curve_sec) < 0) {
            err->ename = "SpawnFailed";
            snprintf(err->evalue, sizeof err->evalue, "cannot make a CURVE key pair: %s",
                     strerror(errno));
            goto fail;
        }
        cc.curve_secret = curve_sec;
    }
    if (statedir_session_create(self->cfg.state_dir, s->id, s->dir, sizeof s->dir) < 0 ||
        snprintf(s->conn_path, sizeof s->conn_path, "%s/connection.json", s->dir) >= PATH_MAX ||
        snprintf(s->workspace, sizeof s->workspace, "%s/workspace", s->dir) >= PATH_MAX) {
        err->ename = "SpawnFailed";
        snprintf(err->evalue, sizeof err->evalue, "cannot create the session directory: %s",
                 strerror(errno));
        goto fail;
    }
    uid_t uid;
    gid_t gid;
    launch_ids(self->launch, s->slot, &uid, &gid);
    if (self->cfg.sandbox) {
        /* The kernel's host uid owns its workspace and nothing else. */
        if (chown(s->workspace, uid, gid) < 0) {
            err->ename = "SpawnFailed";
            snprintf(err->evalue, sizeof err->evalue, "cannot hand the workspace to the kernel: %s",
                     strerror(errno));
            goto fail;
        }
    }
    if (disk_ready) /* a pooled kernel's workspace: its image is mounted already */
        s->disk_mounted = s->limits.disk_bytes > 0;
    else if (!id ? s_disk_check(self, s->limits.disk_bytes, err) < 0 /* made as it starts */
                 : s_disk_remount(self, s, uid, gid, err) < 0)
        goto fail;
    if (!connection && strcmp(cc.transport, "ipc") == 0) {
        /* sun_path holds 107 bytes; the sockets are <prefix>-1 … <prefix>-5. */
        int n = snprintf(ipc_prefix, sizeof ipc_prefix, "%s/k", s->dir);
        if (n < 0 || n + 2 > 107) {
            err->ename = "SpawnFailed";
            snprintf(err->evalue, sizeof err->evalue,
                     "the state directory's path is too long for ipc sockets; use tcp");
            goto fail;
        }
        cc.ip = ipc_prefix;
    }
    s->ch = channels_new(&cc, &self->cfg.wire_limits);
    if (!s->ch && errno == EADDRINUSE && restoring && !s->launched &&
        strcmp(cc.transport, "tcp") == 0) {
        /* A port another program took while no kenneld held it: the session is served on
         * new ports and its connection file rewritten (kennel and the manager hand out the
         * new one). A kernelspec's session keeps its front end's ports or is not served. */
        LOG_W("session=%s: a port of its connection is taken; serving it on new ports "
              "(its connection file is rewritten)", s->id);
        for (int c = 0; c < CHANNELS_N; c++)
            cc.ports[c] = 0;
        s->ch = channels_new(&cc, &self->cfg.wire_limits);
    }
    sodium_memzero(curve_sec, sizeof curve_sec);
    if (!s->ch) {
        err->ename = errno == EADDRINUSE ? "AddressInUse" : "SpawnFailed";
        snprintf(err->evalue, sizeof err->evalue, "cannot bind the session's sockets: %s",
                 strerror(errno));
        goto fail;
    }
    channels_on_flushed(s->ch, s_on_flushed, s);
    session_limits_t lim = self->cfg.session_limits;
    lim.end_on_shutdown = s->launched;
    lim.timeout_ms = s->limits.timeout_ms;
    lim.idle_timeout_ms = s->limits.idle_ms;
    lim.budget_cpu_ms = s->limits.budget_cpu_ms;
    lim.budget_wall_ms = s->limits.budget_wall_ms;
    lim.budget_cells = s->limits.budget_cells;
    lim.budget_output = s->limits.budget_output;
    lim.ttl_ms = self->cfg.ttl_ms;
    s->core = session_new(s->id, name ? name : s->id, &lim, &self->ops, s);
    if (!s->core) {
        LOG_E("out of memory");
        exit(1);
    }
    json_t *conn = channels_connection(s->ch);
    int wrote = statedir_write_json(s->conn_path, conn, STATEDIR_ATOMIC);
    json_decref(conn);
    if (wrote < 0 || s_share(s) < 0 || s_write_meta(s) < 0) {
        err->ename = "SpawnFailed";
        snprintf(err->evalue, sizeof err->evalue, "cannot write the session's files: %s",
                 strerror(errno));
        goto fail;
    }
    return s;
fail:
    s_disk_unmount(s, 1);
    if (!id && s->dir[0])
        statedir_remove_tree(s->dir);
    s_free_sess(&s);
    return NULL;
}

/* ---- launchers ------------------------------------------------------------------------------- */

/*  A launched session's launcher is gone (killed, say, with its front end's process group):
 *  nothing will ever shut the session down, so it ends now. */
static int s_on_launcher_exit(loop_t *loop, int fd, int revents, void *arg)
{
    (void)loop;
    (void)fd;
    (void)revents;
    sess_t *s = arg;
    LOG_I("session=%s: its launcher is gone; ending it", s->id);
    s_close_sess(s, 1);
    return 0;
}

/*  End a served session when the launcher it was made by exits. fd: a pidfd of it. */
static void s_watch_launcher(sess_t *s, int fd)
{
    s->launcher_fd = fd;
    if (loop_fd(s->broker->loop, fd, LOOP_IN, s_on_launcher_exit, s) < 0)
        PLOG_W("session=%s: cannot watch its launcher", s->id);
}

/* ---- info and memory ------------------------------------------------------------------------- */

/* A listing measures sessions for at most this long (on the meter), oldest measure first, and
 * shows the others' last measure, so that `kennel ls` over hundreds of sessions answers at
 * once; a measure younger than MEMORY_FRESH_MS is not taken again for it. One session's info
 * measures afresh, unless its last measure is younger than INFO_FRESH_MS. */
#define LIST_MEMORY_BUDGET_MS 20

#define MEMORY_FRESH_MS 1000

#define INFO_FRESH_MS 100

/*  The meter took session id's kernel's memory: kept unless that kernel ended meanwhile (its
 *  pid may be another process's now); a new one is measured when asked. */
static int s_mem_measured(void *ctx, const char *id, pid_t pid, long long pss, long long uss)
{
    sess_t *s = s_find_id(ctx, id);
    if (!s || !s->has_proc || s->proc.pid != pid)
        return 0;
    s->pss = pss;
    s->uss = uss;
    s->mem_at = util_now_ms();
    return 1;
}

static void s_mem_done(void *ctx)
{
    s_settled(ctx);
}

/*  Measure the n sessions in ss on the meter, in that order, for at most budget_ms (0: all of
 *  them). 0: under way (s_settled when done); -1: not (out of memory). */
static int s_measure(broker_t *b, sess_t **ss, size_t n, int for_list, long long budget_ms)
{
    meter_kernel_t *k = calloc(n ? n : 1, sizeof *k);
    if (!k)
        return -1;
    for (size_t i = 0; i < n; i++)
        k[i] = (meter_kernel_t){ss[i]->id, ss[i]->proc.pid};
    int rc = meter_start(b->meter, k, n, for_list, budget_ms);
    free(k);
    return rc;
}

static json_t *s_info(sess_t *s)
{
    json_t *info = session_info(s->core);
    json_object_set_new(info, "connection_file", json_string(s->conn_path));
    if (s->tenant[0])
        json_object_set_new(info, "tenant", json_string(s->tenant));
    json_object_set_new(info, "kernel_pid", json_integer(s->has_proc ? s->proc.pid : 0));
    /* Sandboxed, the pid is kennel-init's: the cgroup counts the whole session. */
    long long mem = 0, peak = 0, ooms = 0;
    if (s->cg)
        cgroup_stats(s->cg, &mem, &peak, &ooms);
    else if (s->has_proc)
        mem = spawner_rss_bytes(s->proc.pid);
    json_object_set_new(info, "memory_bytes", json_integer(mem > 0 ? mem : 0));
    int live = s->has_proc && s->proc.pid > 0;
    json_object_set_new(info, "pss_bytes", json_integer(live ? s->pss : 0));
    json_object_set_new(info, "uss_bytes", json_integer(live ? s->uss : 0));
    json_object_set_new(info, "limits", reslimits_json(&s->limits));
    json_object_set_new(info, "sandboxed", json_boolean(s->broker->cfg.sandbox));
    json_object_set_new(info, "unread_bytes", json_integer(s->ch ? (json_int_t)channels_unread(s->ch) : 0));
    json_object_set_new(info, "unread_dropped", json_integer(s->ch ? (json_int_t)channels_dropped(s->ch) : 0));
    json_object_set_new(info, "clients_refused",
                        json_integer(s->ch ? (json_int_t)channels_refused(s->ch) : 0));
    json_object_set_new(info, "curve", json_boolean(s->ch && channels_curve(s->ch)));
    json_object_set_new(info, "clients_denied",
                        json_integer(s->ch ? (json_int_t)channels_denied(s->ch) : 0));
    return info;
}

/*  info with each socket's connections now: read from the kernel's socket tables, so one
 *  session's info has them, not a listing of hundreds. */
static json_t *s_info_connections(sess_t *s, json_t *info)
{
    if (s->ch) {
        static const char *names[CHANNELS_N] = {"shell", "iopub", "stdin", "control", "hb"};
        size_t n[CHANNELS_N];
        channels_connections(s->ch, n);
        json_t *clients = json_object();
        for (int i = 0; i < CHANNELS_N; i++)
            json_object_set_new(clients, names[i], json_integer((json_int_t)n[i]));
        json_object_set_new(info, "connections", clients);
    }
    return info;
}

static int s_by_mem_at(const void *a, const void *b)
{
    long long x = (*(sess_t *const *)a)->mem_at, y = (*(sess_t *const *)b)->mem_at;
    return (x > y) - (x < y);
}

/* ---- the manager's calls --------------------------------------------------------------------- */

/*  A new session, its kernel starting (from the pool when one fits), not served yet. NULL
 *  with err. */
static sess_t *s_create(broker_t *self, const char *name, const char *tenant,
                        const json_t *connection,
                        int curve, const reslimits_t *limits, const launcher_t *launched,
                        const session_t *fork_of, const json_t *unsaved, broker_error_t *err)
{
    if (zlistx_size(self->sessions) >= self->cfg.max_sessions) {
        err->ename = "TooManySessions";
        snprintf(err->evalue, sizeof err->evalue, "kenneld serves at most %zu sessions",
                 self->cfg.max_sessions);
        return NULL;
    }
    sess_t *s = NULL;
    pool_kernel_t *k = pool_take(self->pool, limits);
    if (k) {
        /* The session takes the pooled kernel's id, directory, uid slot and cgroup. */
        size_t slot = pool_kernel_slot(k);
        launch_slot_free(self->launch, slot);
        s = s_make(self, pool_kernel_id(k), name, tenant, connection, curve, limits, launched,
                   (long)slot, 1, err);
        if (!s) {
            (void)launch_slot_take(self->launch, (long)slot, &slot); /* the pool's again */
            pool_kernel_drop(self->pool, &k);
            return NULL;
        }
        pool_kernel_adopt(&k, &s->proc, &s->cg);
        s->adopting = 1;
        /* While it waited, it started in the background; now it is a session's. */
        if (s->cg && cgroup_set_background(s->cg, 0) < 0)
            PLOG_W("session=%s: its kernel keeps the pool's small CPU share", s->id);
    } else {
        s = s_make(self, NULL, name, tenant, connection, curve, limits, launched, -1, 0, err);
        if (!s)
            return NULL;
    }
    if ((fork_of ? session_start_forked(s->core, fork_of, unsaved) : session_start(s->core)) < 0) {
        err->ename = "SpawnFailed";
        snprintf(err->evalue, sizeof err->evalue, "cannot start the kernel: %s",
                 session_start_error(s->core));
        s_disk_unmount(s, 1);
        statedir_remove_tree(s->dir);
        s_free_sess(&s);
        return NULL;
    }
    return s;
}

json_t *broker_create(broker_t *self, const char *name, const char *tenant,
                      const json_t *connection, int curve, const reslimits_t *limits,
                      int launched, pid_t launcher, int *created, broker_error_t *err)
{
    *created = 0;
    if (name) {
        sess_t *existing = s_find(self, name);
        if (existing)
            return s_info(existing);
    }
    int launcher_fd = -1;
    launcher_t l = {launched ? launcher : 0, 0, ""};
    snprintf(l.boot, sizeof l.boot, "%s", self->boot_id);
    if (l.pid && (launcher_fd = spawner_watch(l.pid, &l.start)) < 0) {
        err->ename = "BadRequest";
        snprintf(err->evalue, sizeof err->evalue, "launcher_pid %ld: %s", (long)launcher,
                 strerror(errno));
        return NULL;
    }
    sess_t *s = s_create(self, name, tenant, connection, curve || self->cfg.curve, limits,
                         launched ? &l : NULL, NULL, NULL, err);
    if (!s) {
        if (launcher_fd >= 0)
            close(launcher_fd);
        return NULL;
    }
    s_serve(self, s);
    if (launcher_fd >= 0)
        s_watch_launcher(s, launcher_fd);
    LOG_I("session=%s: created (name %s%s%s)", s->id, session_name(s->core),
          s->tenant[0] ? ", tenant " : "", s->tenant);
    *created = 1;
    return s_info(s);
}

/* ---- forks ----------------------------------------------------------------------------------- */

/* Entries a fork's reply lists as not copied, beyond the names its save could not keep. */
#define FORK_FILES_LISTED 50

/*  Copy a fork's source workspace (from) into its own, before its kernel restores. What is
 *  not copied is told to its first cell, and listed in lost when not NULL (the reply's). */
static void s_fork_copy(sess_t *s, const char *from, json_t *lost)
{
    uid_t uid;
    gid_t gid;
    launch_ids(s->broker->launch, s->slot, &uid, &gid);
    json_t *files = json_array();
    long long t0 = util_now_ms();
    long n = wsfile_copy_tree(from, s->workspace, uid, gid, files, FORK_FILES_LISTED);
    if (n < 0) {
        char line[300];
        snprintf(line, sizeof line, "(the workspace: %s)", strerror(errno));
        json_array_append_new(files, json_string(line));
        PLOG_W("session=%s: cannot copy the workspace %s", s->id, from);
    } else if (n > 0) {
        LOG_W("session=%s: %ld workspace entries not copied", s->id, n);
    }
    LOG_D("session=%s: workspace copied in %lld ms", s->id, util_now_ms() - t0);
    size_t i;
    json_t *e;
    json_array_foreach(files, i, e) {
        session_note_unsaved(s->core, json_string_value(e));
        if (lost)
            json_array_append(lost, e);
    }
    json_decref(files);
}

/*  Make the fork named b->fork.name of src from its state (seed_fd, taken: a file its first
 *  kernel maps) and the names that state lacks (unsaved). Its info, with b->fork.lost; or
 *  NULL with b->fork.err. */
static json_t *s_fork_make(broker_t *b, sess_t *src, int seed_fd, const json_t *unsaved)
{
    broker_error_t *err = &b->fork.err;
    if (s_find(b, b->fork.name)) { /* (made meanwhile, by a kernelspec launcher say) */
        close(seed_fd);
        err->ename = "SessionExists";
        snprintf(err->evalue, sizeof err->evalue, "a session named %s exists already",
                 b->fork.name);
        return NULL;
    }
    int curve = b->cfg.curve || (src->ch && channels_curve(src->ch));
    sess_t *d = s_create(b, b->fork.name, src->tenant, NULL, curve, &b->fork.limits, NULL, src->core,
                         unsaved, err);
    if (!d) {
        close(seed_fd);
        return NULL;
    }
    /* Passed on the kernel's hello, which comes on a later turn of the loop, as do the files:
     * both are in place before the restore. */
    d->seed_fd = seed_fd;
    b->fork.lost = unsaved ? json_deep_copy(unsaved) : json_array();
    int ready = !src->limits.disk_bytes || src->disk_mounted;
    if (!ready)
        ; /* the source's image is still being made: its workspace is empty */
    else if (!d->limits.disk_bytes || d->disk_mounted)
        s_fork_copy(d, src->workspace, b->fork.lost);
    else if (!(d->copy_from = strdup(src->workspace))) {
        LOG_E("out of memory");
        exit(1);
    }
    s_serve(b, d);
    struct stat st;
    LOG_I("session=%s: created as a fork of %s (name %s, %lld bytes of state)", d->id, src->id,
          session_name(d->core),
          d->seed_fd >= 0 && fstat(d->seed_fd, &st) == 0 ? (long long)st.st_size : -1LL);
    return s_info(d);
}

/*  The source's kernel sent its state (or could not): make the fork. */
static void s_op_forked(void *ctx, const void *data, size_t len, const json_t *unsaved,
                        const char *why)
{
    sess_t *s = ctx;
    broker_t *b = s->broker;
    if (b->fork.state != FORK_SAVING || strcmp(b->fork.src, s->id) != 0)
        return;
    b->fork.state = FORK_DONE;
    if (!data) {
        b->fork.err.ename = "ForkFailed";
        snprintf(b->fork.err.evalue, sizeof b->fork.err.evalue,
                 "cannot save the state of %.128s: %.100s", session_name(s->core), why);
        LOG_W("session=%s: fork not made: %s", s->id, why);
    } else {
        /* Into a file without a name beside the source's (O_TMPFILE), which the fork's
         * kernel maps as a revival maps its snapshot: page-cache pages written by the kernel,
         * where a malloc'd copy and then the pipe's frame were two more copies into fresh
         * memory, each ~0.25 s per 50 MB on this VM kind. Not a memfd: its pages would be
         * pinned, charged to kenneld and to no session's memory limit, for the fork's life;
         * a file's can be written back and reclaimed. Its blocks go with the last mapping. */
        int file = snapstore_file(s->dir);
        if (file < 0 && (errno == EOPNOTSUPP || errno == EISDIR))
            file = memfd_create("kennel-fork", MFD_CLOEXEC); /* a file system without it */
        if (file < 0 || util_write_all(file, data, len) < 0) {
            int e = errno;
            if (file >= 0)
                close(file);
            b->fork.err.ename = "ForkFailed";
            snprintf(b->fork.err.evalue, sizeof b->fork.err.evalue,
                     "cannot keep the state of %.128s: %.100s", session_name(s->core),
                     strerror(e));
            LOG_W("session=%s: fork not made: %s", s->id, strerror(e));
        } else {
            b->fork.info = s_fork_make(b, s, file, unsaved);
        }
    }
    s_settled(b);
}

json_t *broker_fork(broker_t *self, const char *src, const char *name, const reslimits_t *limits,
                    json_t **lost, int *pending, broker_error_t *err)
{
    *pending = 0;
    *lost = NULL;
    if (self->fork.state == FORK_SAVING) {
        *pending = 1;
        return NULL;
    }
    if (self->fork.state == FORK_DONE) {
        /* The answer to the request that started it, asked again. */
        json_t *info = self->fork.info;
        *lost = self->fork.lost;
        *err = self->fork.err;
        memset(&self->fork, 0, sizeof self->fork);
        return info;
    }
    sess_t *s = s_find(self, src);
    if (!s) {
        err->ename = "NoSuchSession";
        snprintf(err->evalue, sizeof err->evalue, "no session has that id or name");
        return NULL;
    }
    if (s_find(self, name)) {
        err->ename = "SessionExists";
        snprintf(err->evalue, sizeof err->evalue, "a session named %s exists already", name);
        return NULL;
    }
    if (zlistx_size(self->sessions) >= self->cfg.max_sessions) {
        err->ename = "TooManySessions";
        snprintf(err->evalue, sizeof err->evalue, "kenneld serves at most %zu sessions",
                 self->cfg.max_sessions);
        return NULL;
    }
    memset(&self->fork, 0, sizeof self->fork);
    snprintf(self->fork.src, sizeof self->fork.src, "%s", s->id);
    snprintf(self->fork.name, sizeof self->fork.name, "%s", name);
    self->fork.limits = *limits;
    session_state_t state = session_state(s->core);
    if (state == SESSION_EVICTED) {
        /* Its snapshot is the state: opened here, for the fork's kernel to map (a later
         * replacement of the file, by a rename, leaves this one as it is), with the names its
         * eviction lost. */
        json_t *info = NULL;
        int fd = snapstore_open(s->dir);
        if (fd < 0) {
            err->ename = "ForkFailed";
            snprintf(err->evalue, sizeof err->evalue, "cannot read the snapshot of %s: %s", src,
                     strerror(errno));
        } else {
            json_t *h = session_history(s->core);
            info = s_fork_make(self, s, fd, json_object_get(h, "unsaved"));
            json_decref(h);
            *lost = self->fork.lost;
            if (!info)
                *err = self->fork.err;
        }
        memset(&self->fork, 0, sizeof self->fork);
        return info;
    }
    if (session_fork_save(s->core) < 0) {
        memset(&self->fork, 0, sizeof self->fork);
        err->ename = "SessionBusy";
        snprintf(err->evalue, sizeof err->evalue,
                 "session %s is %s: it can be forked when idle (no cell running or queued) or "
                 "evicted",
                 src, session_state_name(state));
        return NULL;
    }
    self->fork.state = FORK_SAVING;
    *pending = 1;
    return NULL;
}

int broker_limits_of(broker_t *self, const char *id_or_name, reslimits_t *out)
{
    sess_t *s = s_find(self, id_or_name);
    if (!s)
        return -1;
    *out = s->limits;
    return 0;
}

json_t *broker_rekey(broker_t *self, const char *id_or_name, broker_error_t *err)
{
    sess_t *s = s_find(self, id_or_name);
    if (!s) {
        err->ename = "NoSuchSession";
        snprintf(err->evalue, sizeof err->evalue, "no session has that id or name");
        return NULL;
    }
    if (!s->ch || !channels_curve(s->ch)) {
        err->ename = "BadRequest";
        snprintf(err->evalue, sizeof err->evalue, "the session has no CURVE keys (kennel new --curve)");
        return NULL;
    }
    char pub[41], sec[41];
    int rc = zmq_curve_keypair(pub, sec) < 0 ? -1 : channels_rekey(s->ch, sec);
    sodium_memzero(sec, sizeof sec);
    json_t *conn = rc == 0 ? channels_connection(s->ch) : NULL;
    /* The old connection file goes: whoever read it holds keys no socket takes now. */
    if (!conn || statedir_write_json(s->conn_path, conn, STATEDIR_ATOMIC) < 0 || s_share(s) < 0) {
        json_decref(conn);
        err->ename = "SpawnFailed";
        snprintf(err->evalue, sizeof err->evalue, "cannot issue new keys: %s", strerror(errno));
        LOG_E("session=%s: rekeying failed: %s", s->id, strerror(errno));
        return NULL;
    }
    json_decref(conn);
    LOG_I("session=%s: new CURVE keys; the old ones are refused and their connections cut", s->id);
    return s_info(s);
}

json_t *broker_info(broker_t *self, const char *id_or_name, int *pending)
{
    *pending = 0;
    sess_t *s = s_find(self, id_or_name);
    if (!s)
        return NULL;
    if (meter_busy(self->meter)) {
        *pending = 1;
        return NULL;
    }
    /* One session: measured afresh, unless just now. The request that waited for its measure
     * takes it whatever the time since (a busy loop may be slow to retry it: a clock check
     * there had it measure again and again, never answered). */
    if (meter_take_info(self->meter, s->id)) {
        /* the measure this request waited for */
    } else if (s->has_proc && (!s->mem_at || util_now_ms() - s->mem_at >= INFO_FRESH_MS) &&
               s_measure(self, &s, 1, 0, 0) == 0) {
        *pending = 1;
        return NULL;
    }
    return s_info_connections(s, s_info(s));
}

json_t *broker_list(broker_t *self, int *pending)
{
    *pending = 0;
    if (meter_busy(self->meter)) {
        *pending = 1;
        return NULL;
    }
    /* The stale are measured first, unless this is the listing whose measure is over. */
    if (!meter_take_list(self->meter)) {
        size_t n = 0;
        long long now = util_now_ms();
        sess_t **stale = malloc((zlistx_size(self->sessions) + 1) * sizeof *stale);
        for (sess_t *s = zlistx_first(self->sessions); stale && s; s = zlistx_next(self->sessions))
            if (s->has_proc && (!s->mem_at || now - s->mem_at >= MEMORY_FRESH_MS))
                stale[n++] = s;
        if (n)
            qsort(stale, n, sizeof *stale, s_by_mem_at);
        *pending = n && s_measure(self, stale, n, 1, LIST_MEMORY_BUDGET_MS) == 0;
        free(stale);
        if (*pending)
            return NULL;
    }
    json_t *list = json_array();
    for (sess_t *s = zlistx_first(self->sessions); s; s = zlistx_next(self->sessions))
        json_array_append_new(list, s_info(s));
    return list;
}

const char *broker_tenant(broker_t *self, const char *id_or_name)
{
    sess_t *s = s_find(self, id_or_name);
    return s ? s->tenant : NULL;
}

tenants_usage_t broker_usage(broker_t *self, const char *tenant)
{
    tenants_usage_t u = {0};
    for (sess_t *s = zlistx_first(self->sessions); s; s = zlistx_next(self->sessions))
        if (strcmp(s->tenant, tenant) == 0) {
            u.sessions++;
            u.memory_bytes += s->limits.cg.memory_bytes;
            u.cpus += s->limits.cg.cpus;
        }
    return u;
}

int broker_end(broker_t *self, const char *id_or_name)
{
    sess_t *s = s_find(self, id_or_name);
    if (!s)
        return -1;
    s_close_sess(s, 1);
    return 0;
}

reslimits_t broker_default_limits(const broker_t *self)
{
    return self->cfg.limits;
}

json_t *broker_stats(const broker_t *self)
{
    json_t *limits = reslimits_json(&self->cfg.limits);
    json_object_set_new(limits, "nofile", json_integer((json_int_t)self->cfg.limits.nofile));
    size_t pooled = pool_ready(self->pool);
    int zygote = self->cfg.sandbox && self->cfg.zygote;
    json_t *spawner = json_pack("{s:s, s:I, s:I, s:I, s:I, s:b, s:I, s:I, s:s}", "kind",
                                zygote ? "zygote" : "exec", "pool", (json_int_t)(zygote ? self->cfg.pool : 0),
                                "pool_max", (json_int_t)(zygote ? self->cfg.pool_max : 0),
                                "pool_target", (json_int_t)pool_target(self->pool),
                                "pool_ready", (json_int_t)pooled, "zygote_ready",
                                zygote_ready(self->zygote), "zygote_pid",
                                (json_int_t)zygote_pid(self->zygote),
                                "page_hint", (json_int_t)zygote_hint_pages(self->zygote),
                                "preload", zygote ? self->cfg.preload : "");
    json_object_set_new(limits, "max_message",
                        json_integer((json_int_t)self->cfg.wire_limits.max_msg_bytes));
    json_object_set_new(limits, "max_unread", json_integer((json_int_t)self->cfg.max_unread));
    json_object_set_new(limits, "max_clients", json_integer((json_int_t)self->cfg.max_clients));
    json_t *lost = json_array();
    for (size_t i = 0; self->cfg.lost && self->cfg.lost[i]; i++)
        json_array_append_new(lost, json_string(self->cfg.lost[i]));
    return json_pack("{s:s, s:I, s:I, s:{s:b, s:s, s:b, s:s, s:o, s:{s:b, s:s}}, s:o, s:o}",
                     "status", "ok", "sessions", (json_int_t)zlistx_size(self->sessions),
                     "max_sessions", (json_int_t)self->cfg.max_sessions, "sandbox", "enabled",
                     self->cfg.sandbox, "layers",
                     self->cfg.sandbox_desc ? self->cfg.sandbox_desc : "none", "privileged",
                     !self->cfg.own_ids, "cgroups", cgroup_prefix(), "lost", lost, "disk", "caps",
                     self->cfg.disk_ok, "detail", self->cfg.disk_desc ? self->cfg.disk_desc : "",
                     "limits", limits, "spawner", spawner);
}

int broker_workspace(broker_t *self, const char *id_or_name, char *out, size_t out_len,
                     uid_t *uid, gid_t *gid, broker_error_t *err)
{
    sess_t *s = s_find(self, id_or_name);
    if (!s) {
        err->ename = "NoSuchSession";
        snprintf(err->evalue, sizeof err->evalue, "no session has that id or name");
        return -1;
    }
    /* A new session's image may still be in the making (a client that creates a session and
     * puts its files at once): files go into the image, never under it. */
    if (s->disk_job)
        return 1;
    if (s->limits.disk_bytes && !s->disk_mounted) {
        err->ename = "DiskUnavailable";
        snprintf(err->evalue, sizeof err->evalue, "the session's workspace is not mounted: %s",
                 session_start_error(s->core)[0] ? session_start_error(s->core)
                                                 : "its kernel has not started");
        return -1;
    }
    snprintf(out, out_len, "%s", s->workspace);
    launch_ids(self->launch, s->slot, uid, gid);
    return 0;
}

void broker_on_settled(broker_t *self, broker_notify_fn *fn, void *arg)
{
    self->settled = fn;
    self->settled_arg = arg;
}

size_t broker_size(const broker_t *self)
{
    return zlistx_size(self->sessions);
}

int broker_save_all(broker_t *self)
{
    int pending = 0;
    for (sess_t *s = zlistx_first(self->sessions); s; s = zlistx_next(self->sessions)) {
        int rc = session_save(s->core);
        if (rc < 0)
            LOG_W("session=%s: busy while kenneld stops: its state is not saved", s->id);
        pending += rc > 0;
    }
    return pending;
}

int broker_saving(const broker_t *self)
{
    int n = 0;
    for (sess_t *s = zlistx_first(self->sessions); s; s = zlistx_next(self->sessions))
        n += session_state(s->core) == SESSION_SAVING;
    return n;
}

json_t *broker_held(broker_t *self, int *busy)
{
    json_t *out = json_array();
    if (busy)
        *busy = 0;
    for (sess_t *s = zlistx_first(self->sessions); s; s = zlistx_next(self->sessions)) {
        session_state_t st = session_state(s->core);
        json_array_append_new(out, json_pack("{s:s, s:s, s:b}", "name", session_name(s->core),
                                             "id", s->id, "kernel",
                                             st != SESSION_EVICTED && s->has_proc));
        if (busy)
            *busy += st == SESSION_SAVING || st == SESSION_BUSY;
    }
    return out;
}

int broker_has(broker_t *self, const char *id_or_name)
{
    return s_find(self, id_or_name) != NULL;
}

int broker_release(broker_t *self, const char *id_or_name)
{
    sess_t *s = s_find(self, id_or_name);
    if (!s)
        return -1;
    s_close_sess(s, 0);
    return 0;
}

/* ---- restoring an earlier kenneld's sessions ------------------------------------------------- */

static int s_has_file(const char *dir, const char *name)
{
    char path[PATH_MAX + 64];
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    return n > 0 && (size_t)n < sizeof path && access(path, F_OK) == 0;
}

/*  Whether a session directory holds anything of the user's: a workspace image, saved state,
 *  or files in a workspace that has no image (--disk 0). */
static int s_worth_keeping(const char *dir)
{
    if (s_has_file(dir, "workspace.img") || s_has_file(dir, "snapshot"))
        return 1;
    char ws[PATH_MAX + 512];
    if (snprintf(ws, sizeof ws, "%s/workspace", dir) >= (int)sizeof ws)
        return 1;
    int fd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    struct dirent *e;
    int any = 0;
    while (!any && (e = readdir(d)))
        any = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return any;
}

#define RESTORE_SLOT_MAX (100000 + 1024) /* --max-sessions' bound, with room for a pool */

/*  The uid slot a restored session had, kept: the files in its workspace are that uid's. A
 *  kenneld started with fewer slots (a smaller --max-sessions or --pool) grows its table to
 *  cover it. NULL, or why it cannot be kept. */
static const char *s_restore_slot(broker_t *self, long long v, size_t *slot)
{
    if (v < 0 || v >= RESTORE_SLOT_MAX)
        return "its uid slot is missing or out of range";
    *slot = (size_t)v;
    if (launch_slot_grow(self->launch, *slot) < 0)
        return "out of memory";
    return launch_slot_taken(self->launch, *slot) ? "its uid slot is another session's" : NULL;
}

/*  Bring back one session of an earlier kenneld from its directory: same id, name, limits,
 *  uid slot and connection file. It comes back evicted when it has a snapshot (state
 *  restored on first use), else with no kernel (a fresh one starts on first use). */
static void s_restore_one(broker_t *self, const char *dir)
{
    char path[PATH_MAX + 512];
    json_error_t jerr;
    record_t rec;
    (void)record_read(dir, &rec); /* what it lacks is said below */
    snprintf(path, sizeof path, "%s/connection.json", dir);
    json_t *conn = json_load_file(path, 0, &jerr);
    const char *id = rec.id;
    const char *name = rec.name;
    broker_error_t err = {0};
    sess_t *s = NULL;
    /* A kernelspec's session lives as long as its launcher: one that ended while no kenneld
     * ran (or before a reboot) would have ended the session, so it ends now. One still
     * running is watched again. */
    int launched = rec.launched;
    launcher_t launcher = {rec.launcher_pid, rec.launcher_start, ""};
    int launcher_fd = -1;
    if (launched && launcher.pid > 0 && launcher.start > 0) {
        snprintf(launcher.boot, sizeof launcher.boot, "%s", self->boot_id);
        const char *boot = rec.launcher_boot;
        if (boot && launcher.boot[0] && strcmp(boot, launcher.boot) != 0)
            errno = ESRCH;
        else
            launcher_fd = spawner_watch(launcher.pid, &launcher.start);
        if (launcher_fd < 0 && errno == ESRCH) {
            LOG_I("session %s in %s: its launcher (pid %ld) ended while no kenneld ran; "
                  "removing it", id ? id : "?", dir, (long)launcher.pid);
            snprintf(path, sizeof path, "%s/workspace", dir);
            disk_unmount(path, 1); /* mounted still only if kenneld had no namespace of its own */
            sweeper_discard(self->sweeper, dir);
            record_clear(&rec);
            json_decref(conn);
            return;
        }
        if (launcher_fd < 0)
            PLOG_W("session %s: cannot watch its launcher (pid %ld); restored without that watch",
                   id ? id : "?", (long)launcher.pid);
    }
    /* A session's directory is named after its id: a copy of one (or a meta.json moved)
     * once took over the live session's mounted workspace. */
    const char *base = strrchr(dir, '/');
    size_t slot = 0;
    const char *why = NULL;
    if (id && strcmp(id, base ? base + 1 : dir) != 0)
        why = "its meta.json names another session";
    else if (id && s_find_id(self, id))
        why = "a session with its id is live";
    else if (id && zlistx_size(self->sessions) >= self->cfg.max_sessions)
        why = "--max-sessions are live";
    else if (id)
        why = s_restore_slot(self, rec.slot, &slot);
    if (!why && id && name && conn && rec.has_limits)
        s = s_make(self, id, name, rec.tenant, conn, 0, &rec.limits,
                   launched ? &launcher : NULL, (long)slot, 0, &err);
    if (s) {
        snprintf(path, sizeof path, "%s/snapshot", dir);
        int has_state = access(path, F_OK) == 0;
        session_history_restore(s->core, rec.history);
        session_start_restored(s->core, has_state);
        s_serve(self, s);
        if (launcher_fd >= 0)
            s_watch_launcher(s, launcher_fd);
        LOG_I("session=%s: restored (name %s)%s", s->id, name,
              has_state ? ", state on first use" : ", without saved state");
    } else {
        /* Whatever the reason (a port another program took, files cut short by a host crash,
         * an image this kenneld cannot mount), a directory with the user's files or saved
         * state is never removed here: kept for a later kenneld, or for its operator. */
        if (!why)
            why = err.ename ? err.evalue
                            : "its meta.json or connection.json is missing or unreadable";
        if (s_worth_keeping(dir)) {
            LOG_E("cannot restore the session in %s: %s; it is kept, not served (it holds a "
                  "workspace image, saved state or files)", dir, why);
        } else {
            LOG_W("cannot restore the session in %s (%s); removing it", dir, why);
            sweeper_discard(self->sweeper, dir);
        }
    }
    if (!s && launcher_fd >= 0)
        close(launcher_fd);
    record_clear(&rec);
    json_decref(conn);
}

/*  The workspace files of a moved session, from its old host ids to its new ones (nftw has
 *  no context argument: these are the loop's alone). */
static uid_t s_from_uid, s_to_uid;
static gid_t s_from_gid, s_to_gid;

static int s_rechown_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)type;
    (void)ftw;
    uid_t u = st->st_uid == s_from_uid ? s_to_uid : (uid_t)-1;
    gid_t g = st->st_gid == s_from_gid ? s_to_gid : (gid_t)-1;
    if ((u != (uid_t)-1 || g != (gid_t)-1) && lchown(path, u, g) < 0)
        PLOG_W("lchown %s", path);
    return 0;
}

/*  A session from another node keeps its uid slot, if it is free here; else it takes a free
 *  one, and its workspace's files are given to that slot's ids (a walk of every file: the
 *  cost of a move onto a node whose slot is taken). */
static void s_adopt_slot(broker_t *self, const char *dir)
{
    record_t rec;
    if (record_read(dir, &rec) == 0 && rec.slot >= 0 && rec.slot < RESTORE_SLOT_MAX &&
        launch_slot_grow(self->launch, (size_t)rec.slot) == 0 &&
        launch_slot_taken(self->launch, (size_t)rec.slot)) {
        size_t slot;
        if (launch_slot_take(self->launch, -1, &slot) == 0) {
            launch_slot_free(self->launch, slot); /* s_restore_one takes it */
            launch_ids(self->launch, (size_t)rec.slot, &s_from_uid, &s_from_gid);
            launch_ids(self->launch, slot, &s_to_uid, &s_to_gid);
            char ws[PATH_MAX + 16];
            snprintf(ws, sizeof ws, "%s/workspace", dir);
            if (nftw(ws, s_rechown_one, 16, FTW_PHYS) < 0 && errno != ENOENT)
                PLOG_W("cannot give %s to uid slot %zu", ws, slot);
            LOG_I("session in %s: its uid slot %lld is taken here; it moves to slot %zu",
                  dir, rec.slot, slot);
            rec.slot = (long long)slot;
            if (record_write(dir, &rec) < 0)
                PLOG_W("cannot write %s/meta.json", dir);
        }
    }
    record_clear(&rec);
}

json_t *broker_adopt(broker_t *self, const char *dir, const char *id, const char *notice)
{
    s_adopt_slot(self, dir);
    s_restore_one(self, dir);
    sess_t *s = s_find_id(self, id);
    if (s && notice)
        session_set_origin(s->core, notice);
    return s ? s_info(s) : NULL;
}

void broker_restore(broker_t *self)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/sessions", self->cfg.state_dir);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char dir[PATH_MAX + 300];
        if (e->d_name[0] == '.' || snprintf(dir, sizeof dir, "%s/%s", path, e->d_name) >= PATH_MAX)
            continue;
        s_restore_one(self, dir);
    }
    if (d)
        closedir(d);
}

/* ---- the guard of kenneld's own memory ------------------------------------------------------- */

/*  The guard of kenneld's own memory, past --max-memory of heap in use, at most every
 *  MEMORY_CUT_MS. What kenneld holds for clients that do not read is counted per session
 *  (channels_unread): when that is what fills the heap, the clients of the sessions holding
 *  the most are cut (libzmq frees what it held for them; they reconnect), as many sessions
 *  as hold the excess, and no other session's (50 clients of one session that did not read
 *  once cut every client of every session). What kenneld cannot count is what libzmq takes
 *  in: it holds each message it receives whole until its last frame has come, and nothing
 *  bounds a message's frames, so anyone who can connect, key or no key, can make kenneld
 *  hold as much as they send. When what is held for readers is not even half the excess,
 *  what libzmq takes in is laid at the door of the sessions whose clients sent the most
 *  since the guard's last look (a quarter of a second): theirs are cut, those that sent at
 *  least an eighth of the most; a keyed flood of 60 MiB requests once had every session's
 *  clients cut. Only when no session's clients sent as much as RECV_SUSPECT, the memory
 *  being in messages not yet whole (a message whose frames never end), is every client
 *  connection of every session cut. */
#define MEMORY_GUARD_MS 250

#define MEMORY_CUT_MS 1000

#define RECV_SUSPECT (1u << 20) /* bytes a session's clients sent between two looks */

typedef struct {
    channels_t *ch;
    size_t unread;
    size_t recent; /* what its clients sent since the last look */
} held_by_t;

static int s_by_unread_desc(const void *a, const void *b)
{
    size_t x = ((const held_by_t *)a)->unread, y = ((const held_by_t *)b)->unread;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int s_by_recent_desc(const void *a, const void *b)
{
    size_t x = ((const held_by_t *)a)->recent, y = ((const held_by_t *)b)->recent;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int s_on_memory_guard(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    broker_t *b = arg;
    for (sess_t *s = zlistx_first(b->sessions); s; s = zlistx_next(b->sessions))
        if (s->ch) {
            size_t got = channels_received(s->ch);
            s->recv_recent = got >= s->recv_mark ? got - s->recv_mark : got; /* (new sockets) */
            s->recv_mark = got;
        }
    struct mallinfo2 mi = mallinfo2();
    size_t used = mi.uordblks + mi.hblkhd;
    long long now = util_now_ms();
    if (used <= b->cfg.max_memory || now - b->memory_cut_at < MEMORY_CUT_MS)
        return 0;
    size_t n = zlistx_size(b->sessions), k = 0, held = 0;
    held_by_t *by = calloc(n ? n : 1, sizeof *by);
    channels_t **chs = calloc(n ? n : 1, sizeof *chs);
    if (!by || !chs) {
        free(by);
        free(chs);
        return 0;
    }
    for (sess_t *s = zlistx_first(b->sessions); s; s = zlistx_next(b->sessions))
        if (s->ch) {
            by[k] = (held_by_t){s->ch, channels_unread(s->ch), s->recv_recent};
            held += by[k++].unread;
        }
    size_t excess = used - b->cfg.max_memory, cut_sessions = 0, freed = 0, sent_most = 0;
    if (held >= excess / 2) {
        qsort(by, k, sizeof *by, s_by_unread_desc);
        while (cut_sessions < k && by[cut_sessions].unread && (!cut_sessions || freed < excess)) {
            freed += by[cut_sessions].unread;
            chs[cut_sessions] = by[cut_sessions].ch;
            cut_sessions++;
        }
    } else {
        qsort(by, k, sizeof *by, s_by_recent_desc);
        size_t top = k ? by[0].recent : 0;
        for (size_t i = 0; i < k; i++)
            if (top < RECV_SUSPECT || by[i].recent >= top / 8)
                chs[cut_sessions++] = by[i].ch;
        sent_most = top >= RECV_SUSPECT ? top : 0;
    }
    size_t cut = channels_cut_clients(chs, cut_sessions);
    free(by);
    free(chs);
    b->memory_cut_at = now;
    if (held >= excess / 2)
        LOG_E("kenneld's heap holds %zu MiB, past --max-memory (%zu MiB), %zu MiB of it for "
              "clients that do not read: cut the %zu client connections of the %zu sessions "
              "holding the most of it; clients reconnect", used >> 20, b->cfg.max_memory >> 20,
              held >> 20, cut, cut_sessions);
    else if (sent_most)
        LOG_E("kenneld's heap holds %zu MiB, past --max-memory (%zu MiB), and not for clients "
              "that do not read (messages libzmq is taking in, say): cut the %zu client "
              "connections of the %zu sessions whose clients sent the most (%zu MiB in the "
              "last %d ms at most); clients reconnect", used >> 20, b->cfg.max_memory >> 20,
              cut, cut_sessions, sent_most >> 20, MEMORY_GUARD_MS);
    else
        LOG_E("kenneld's heap holds %zu MiB, past --max-memory (%zu MiB), and not for clients "
              "that do not read (messages libzmq is taking in, say): cut all %zu client "
              "connections of %zu sessions; clients reconnect", used >> 20,
              b->cfg.max_memory >> 20, cut, k);
    malloc_trim(0);
    return 0;
}

/* ---- what the zygote and the snapshot store say ---------------------------------------------- */

static void s_zygote_answered(void *ctx)
{
    broker_t *b = ctx;
    pool_collect(b->pool);
    s_sess_collect(b);
}

static void s_zygote_stopped(void *ctx)
{
    broker_t *b = ctx;
    if (b->pool)
        pool_forget_pending(b->pool);
    s_sess_collect(b);
    /* Kernels a zygote cloned but never named (it died, or was killed, between a clone and
     * its answer) are kenneld's children (CLONE_PARENT) that nothing holds. */
    if (b->orphans)
        orphans_strays(b->orphans, s_pid_known, b);
}

static void s_zygote_changed(void *ctx, int lost)
{
    broker_t *b = ctx;
    pool_refill(b->pool, lost);
}

/*  The snapshot store's ops: a session is found again by id. */
static int s_snap_live(void *ctx, const char *id)
{
    return s_find_id(ctx, id) != NULL;
}

static void s_snap_stored(void *ctx, const char *id, const char *why)
{
    sess_t *s = s_find_id(ctx, id);
    session_on_snapshot_stored(s->core, why);
    /* The record goes with the state it describes (cells, names the save lost). */
    if (!why && s_write_meta(s) < 0)
        PLOG_W("session=%s: cannot update its meta.json", s->id);
}

/* ---- the broker ------------------------------------------------------------------------------ */

broker_t *broker_new(loop_t *loop, const broker_cfg_t *cfg)
{
    broker_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    self->cfg = *cfg;
    char *boot = util_read_file("/proc/sys/kernel/random/boot_id", 64, NULL);
    snprintf(self->boot_id, sizeof self->boot_id, "%.*s",
             boot ? (int)strcspn(boot, "\n") : 0, boot ? boot : "");
    free(boot);
    self->sessions = zlistx_new();
    self->closing = zlistx_new();
    self->respawn_timer = -1;
    self->tick_timer = -1;
    self->cgroup_timer = -1;
    cgroup_on_pending(s_arm_cgroup_retry, self);
    self->memory_timer = -1;
    self->worker = worker_new(loop);
    self->snap_worker = worker_new(loop);
    meter_ops_t mo = {s_mem_measured, s_mem_done};
    self->meter = meter_new(loop, &mo, self);
    self->signer = worker_new(loop);
    self->sweeper = sweeper_new(loop, cfg->state_dir);
    snapstore_ops_t snap_ops = {s_snap_live, s_snap_stored};
    self->snaps = self->snap_worker
                      ? snapstore_new(self->snap_worker, cfg->max_pipe_frame, &snap_ops, self)
                      : NULL;
    if (self->worker && cfg->runs_keep_days && cfg->runs_dir) {
        runlog_cfg_t rc = {cfg->runs_dir, cfg->record_code, cfg->runs_keep_days};
        if (!(self->runlog = runlog_new(self->worker, &rc)))
            PLOG_W("no run records: cannot use %s", cfg->runs_dir);
    }
    launch_cfg_t lc = {cfg->sandbox, cfg->own_ids, cfg->uid_base, cfg->python, cfg->kernel_dir,
                       cfg->init_path, cfg->binds, cfg->nbinds};
    self->launch =
        launch_new(&lc, cfg->max_sessions + (cfg->sandbox && cfg->zygote ? cfg->pool_max : 0));
    zygote_cfg_t zc = {cfg->state_dir,  cfg->python,  cfg->kernel_dir, cfg->zygote_dir,
                       cfg->preload,    cfg->init_path, cfg->merge_pages, cfg->binds,
                       cfg->nbinds};
    zygote_ops_t zo = {s_zygote_answered, s_zygote_stopped, s_zygote_changed};
    self->zygote = self->launch ? zygote_new(loop, &zc, self->launch, &zo, self) : NULL;
    self->orphans = self->zygote && self->sweeper
                        ? orphans_new(loop, self->zygote, self->sweeper)
                        : NULL;
    pool_cfg_t pc = {cfg->pool,      cfg->pool_max,     cfg->pool_linger_s * 1000,
                     cfg->state_dir, cfg->limits,       cfg->disk_ok,
                     cfg->disk_desc, self->zygote,      self->launch,
                     self->worker,   &self->warn_limit};
    self->pool = self->zygote ? pool_new(loop, &pc) : NULL;
    if (!self->sessions || !self->closing || !self->orphans || !self->launch || !self->pool ||
        !self->worker || !self->snaps || !self->meter || !self->signer || !self->sweeper ||
        !self->zygote) {
        broker_destroy(&self);
        return NULL;
    }
    if (cfg->max_memory && (self->memory_timer = loop_timer(loop, MEMORY_GUARD_MS, 0,
                                                            s_on_memory_guard, self)) < 0) {
        broker_destroy(&self);
        return NULL;
    }
    /* The zygote warms up while kenneld starts serving; the first kernel waits for it. */
    if (cfg->sandbox && cfg->zygote && zygote_start(self->zygote) < 0)
        PLOG_W("cannot start the zygote (tried again with the first kernel)");
    self->ops = (session_ops_t){s_op_send,           s_op_to_kernel,      s_op_kernel_start,
                                s_op_kernel_signal,  s_op_ended,          s_op_timer_arm,
                                s_op_timer_cancel,   s_op_snapshot_store, s_op_snapshot_load,
                                s_op_snapshot_drop,  s_op_iopub_backlog,  s_op_cell_done,
                                s_op_forked,         s_op_snapshot_fd,    s_op_fd_to_kernel,
                                s_op_snapshot_file,  s_op_snapshot_fits,  s_op_snapshot_store_fd};
    return self;
}

void broker_destroy(broker_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    broker_t *self = *self_p;
    json_decref(self->fork.info); /* a fork's answer no one asked for again */
    json_decref(self->fork.lost);
    /* A measure under way ends first; its done callback finds the sessions still there. */
    meter_destroy(&self->meter);
    sess_t *s;
    while (self->sessions && (s = zlistx_first(self->sessions)))
        s_close_sess(s, 0);
    /* The signings under way end and what waited behind them goes (their end's error
     * replies, say); a large message sent meanwhile is signed at once. */
    worker_destroy(&self->signer);
    while (self->closing && (s = zlistx_detach(self->closing, NULL)))
        s_free_sess(&s);
    /* Before the orphans are reaped: the zygote's strays join them. */
    if (self->zygote)
        zygote_stop(self->zygote);
    orphans_destroy(&self->orphans);
    if (self->respawn_timer >= 0)
        loop_timer_end(self->loop, self->respawn_timer);
    if (self->tick_timer >= 0)
        loop_timer_end(self->loop, self->tick_timer);
    if (self->cgroup_timer >= 0)
        loop_timer_end(self->loop, self->cgroup_timer);
    cgroup_on_pending(NULL, NULL);
    if (self->memory_timer >= 0)
        loop_timer_end(self->loop, self->memory_timer);
    pool_destroy(&self->pool);
    /* The kernels are reaped: what is left in their groups is on its way out (for up to 3 s
     * on a loaded machine). */
    for (int i = 0; i < 300 && cgroup_retry() > 0; i++)
        usleep(10000);
    /* Every job is abandoned by now: their callbacks only unmount and remove. What the
     * trash still holds is removed by the next kenneld: a stop does not wait for it. */
    if (self->sweeper)
        sweeper_stop(self->sweeper);
    worker_destroy(&self->worker);
    worker_destroy(&self->snap_worker);
    runlog_destroy(&self->runlog);
    snapstore_destroy(&self->snaps);
    sweeper_destroy(&self->sweeper);
    zygote_destroy(&self->zygote);
    zlistx_destroy(&self->sessions);
    zlistx_destroy(&self->closing);
    launch_destroy(&self->launch);
    free(self);
    *self_p = NULL;
}
