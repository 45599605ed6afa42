/*  kenneld: the kennel broker daemon. Sets up signals before any thread exists, opens the
 *  state directory, binds the manager socket, writes kenneld.json once it is ready to serve,
 *  and runs one loop until SIGTERM, SIGINT or SIGHUP. On the way out every kernel is killed
 *  and reaped and kenneld.json is removed. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <czmq.h>
#include <sodium.h>

#include <sys/wait.h>

#include "broker.h"
#include "channels.h"
#include "cgroup.h"
#include "config.h"
#include "disk.h"
#include "kpipe.h"
#include "log.h"
#include "loop.h"
#include "cluster.h"
#include "manager.h"
#include "statedir.h"
#include "securemem.h"
#include "tenants.h"
#include "util.h"
#include "walls.h"

#define STOP_SAVE_MS 5000 /* how long kenneld waits for kernels to save when it stops */

static long long s_stop_deadline_ms; /* set once a stop signal came */

/*  While stopping: end the loop once every save is done, or at the deadline. */
static int s_on_stop_tick(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    broker_t *broker = arg;
    if (broker_saving(broker) == 0)
        return -1;
    if (util_now_ms() >= s_stop_deadline_ms) {
        LOG_W("%d sessions did not finish saving their state in time", broker_saving(broker));
        return -1;
    }
    return 0;
}

/*  SIGTERM, SIGINT, SIGHUP: save every idle session's state, then stop. A second signal stops
 *  at once. */
static int s_on_signal(loop_t *loop, int fd, int revents, void *arg)
{
    (void)revents;
    broker_t *broker = arg;
    struct signalfd_siginfo si;
    if (read(fd, &si, sizeof si) != (ssize_t)sizeof si)
        return 0;
    LOG_I("signal %u (SIG%s): shutting down", si.ssi_signo,
          sigabbrev_np((int)si.ssi_signo) ? sigabbrev_np((int)si.ssi_signo) : "?");
    if (s_stop_deadline_ms)
        return -1;
    s_stop_deadline_ms = util_now_ms() + STOP_SAVE_MS;
    int pending = broker_save_all(broker);
    if (pending == 0)
        return -1; /* ends loop_run */
    LOG_I("saving the state of %d sessions", pending);
    if (loop_timer(loop, 20, 0, s_on_stop_tick, broker) < 0)
        return -1;
    return 0;
}

/*  Start one sandboxed Python that does nothing, before any thread exists, to learn whether
 *  this machine lets us build the sandbox. 0, or -1 (kennel-init said why on stderr). */
static int s_probe_sandbox(const char *init_path, const char *state_dir, const config_t *cfg,
                           uid_t probe_uid, gid_t probe_gid)
{
    char ws[PATH_MAX + 16], uid[32], gid[32];
    snprintf(ws, sizeof ws, "%s/probe", state_dir);
    snprintf(uid, sizeof uid, "%u", (unsigned)probe_uid);
    snprintf(gid, sizeof gid, "%u", (unsigned)probe_gid);
    if ((mkdir(ws, 0700) < 0 && errno != EEXIST) || chown(ws, probe_uid, probe_gid) < 0) {
        PLOG_E("probe workspace %s", ws);
        return -1;
    }
    char *argv[] = {(char *)init_path, "--workspace", ws, "--kernel-dir", (char *)cfg->kernel_dir,
                    "--uid", uid, "--gid", gid, "--", (char *)cfg->python, "-I", "-S", "-c",
                    "import sys", NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    pid_t pid = fork();
    if (pid == 0) {
        int null_fd = open("/dev/null", O_RDWR);
        dup2(null_fd, 0);
        dup2(null_fd, 3);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    int st = 0;
    int rc = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
    rmdir(ws);
    return rc;
}

#define SOCKETS_PER_SESSION 5  /* shell, control, stdin, iopub, heartbeat */
#define FDS_PER_SESSION 24     /* its sockets (listening, accepted, mailboxes), pipe, pidfd */

/*  Room for --max-sessions sessions, before any ZeroMQ socket exists: czmq's default of 1024
 *  sockets (about 200 sessions) would end kenneld on an assertion, and the soft limit on open
 *  files is often 1024. 0, or -1 (said why) when this system cannot hold that many. */
static int s_size_for_sessions(size_t max_sessions)
{
    size_t sockets = max_sessions * SOCKETS_PER_SESSION + 64;
    if (sockets > zsys_socket_limit()) {
        LOG_E("--max-sessions %zu needs %zu ZeroMQ sockets; this system allows %zu", max_sessions,
              sockets, zsys_socket_limit());
        return -1;
    }
    zsys_set_max_sockets(sockets);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    rlim_t need = (rlim_t)(max_sessions * FDS_PER_SESSION + 256);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
        LOG_W("open files are limited to %llu; --max-sessions %zu may need %llu (raise ulimit -n)",
              (unsigned long long)rl.rlim_cur, max_sessions, (unsigned long long)need);
    return 0;
}

/*  --merge-pages: say what it costs, and whether the host's KSM will do anything at all. */
static void s_log_merge_pages(void)
{
    char run[4] = "";
    int fd = open("/sys/kernel/mm/ksm/run", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)!read(fd, run, sizeof run - 1);
        close(fd);
    }
    if (run[0] != '1')
        LOG_W("--merge-pages: KSM is not running on this host (/sys/kernel/mm/ksm/run is not 1): "
              "no page is merged until it is");
    else
        LOG_W("--merge-pages: identical pages of sessions are merged (KSM); a session can time "
              "its writes to learn whether another holds a page of content it can guess");
}

/*  Under --tenants, tenants' users must reach the tenant manager socket and their sessions'
 *  connection files: the state directory and its sessions/ become 0711 (entered, not
 *  listed); each tenant session's directory is its group's (broker). Directories above it
 *  are the operator's to open: one that others cannot enter is warned of. 0, or -1. */
static int s_open_for_tenants(const char *state_dir)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/sessions", state_dir);
    if (chmod(state_dir, 0711) < 0 || chmod(path, 0711) < 0) {
        PLOG_E("chmod 0711 %s and its sessions/", state_dir);
        return -1;
    }
    snprintf(path, sizeof path, "%s", state_dir);
    for (char *slash = strrchr(path, '/'); slash && slash > path; slash = strrchr(path, '/')) {
        *slash = '\0';
        struct stat st;
        if (stat(path, &st) == 0 && !(st.st_mode & S_IXOTH))
            LOG_W("--tenants: %s (above the state directory) is mode %04o: tenants' users "
                  "cannot enter it, nor reach the tenant manager socket; make it o+x or use "
                  "another --state-dir", path, (unsigned)(st.st_mode & 07777));
    }
    return 0;
}

int main(int argc, char **argv)
{
    config_t cfg;
    int rc = config_load(&cfg, argc, argv);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    log_init("kenneld", (log_level_t)cfg.log_level);
    umask(077);
    tenants_t *tenants = NULL;
    if (cfg.tenants[0] && geteuid() != 0) {
        /* Unprivileged, every kernel runs as kenneld's one uid: tenants' kernels could reach
         * each other's files and processes, and their files could not be given to them. */
        LOG_E("--tenants needs kenneld to run as root (as an ordinary user every tenant's "
              "kernels would share its uid)");
        return 2;
    }
    if (cfg.tenants[0]) {
        char err[600];
        if (!(tenants = tenants_load(cfg.tenants, err, sizeof err))) {
            LOG_E("%s", err);
            return 2;
        }
        LOG_I("tenants: %zu from %s", tenants_size(tenants), cfg.tenants);
    }
    /* Before any thread or helper exists: the workspace images are mounted in a mount
     * namespace of kenneld's own, so no mount outlives it, however it ends. */
    int privileged = geteuid() == 0;
    if (privileged && disk_private_mounts() < 0)
        PLOG_W("no mount namespace of kenneld's own (unshare): workspace images are mounted in "
               "the host's, and unmounted when kenneld stops");

    /* Block the shutdown signals before libzmq starts its threads, so they inherit the mask
     * and the signals arrive only through our signalfd. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0) {
        PLOG_E("sigprocmask");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        PLOG_E("signalfd");
        return 1;
    }
    if (sodium_init() < 0) {
        LOG_E("libsodium failed to initialise");
        return 1;
    }
    securemem_use(); /* CURVE connections' keys off libsodium's guarded heap: securemem.h */
    zsys_handler_set(NULL);
    if (s_size_for_sessions(cfg.max_sessions) < 0)
        return 1;

    /* A node's session directories live in --shared, where another node finds them. */
    if (cfg.cluster[0] && cluster_prepare(cfg.state_dir, cfg.shared, cfg.node) < 0)
        return 1;
    if (statedir_prepare(cfg.state_dir) < 0) {
        PLOG_E("state directory %s", cfg.state_dir);
        return 1;
    }
    char state_dir[PATH_MAX];
    if (!realpath(cfg.state_dir, state_dir)) {
        PLOG_E("realpath(%s)", cfg.state_dir);
        return 1;
    }
    char info_path[PATH_MAX + 16], tenants_path[PATH_MAX + 16];
    snprintf(info_path, sizeof info_path, "%s/kenneld.json", state_dir);
    snprintf(tenants_path, sizeof tenants_path, "%s/tenants.json", state_dir);
    if (tenants && s_open_for_tenants(state_dir) < 0)
        return 1;
    long other = statedir_kenneld_pid(state_dir);
    if (other && other != (long)getpid()) {
        LOG_E("another kenneld (pid %ld) serves %s", other, state_dir);
        return 1;
    }

    char init_path[PATH_MAX], sandbox_desc[768] = "none: --insecure-no-sandbox";
    walls_t walls = {0};
    ssize_t n = readlink("/proc/self/exe", init_path, sizeof init_path - 16);
    if (n <= 0) {
        PLOG_E("readlink(/proc/self/exe)");
        return 1;
    }
    init_path[n] = '\0';
    snprintf(strrchr(init_path, '/'), 16, "/kennel-init");
    if (cfg.insecure_no_sandbox) {
        LOG_W("--insecure-no-sandbox: kernels run UNCONFINED as kenneld's user; never serve "
              "untrusted code like this");
    } else {
        char cg[256];
        cgroup_set_owner(state_dir);
        int ncg = cgroup_probe(cg, sizeof cg);
        int swept = cgroup_sweep();
        if (swept > 0)
            LOG_I("removed %d control groups (%s*) that an earlier kenneld of this state "
                  "directory left", swept, cgroup_prefix());
        /* A uid no session or pooled kernel uses: past max_sessions + the largest pool. */
        uid_t probe_uid = privileged ? (uid_t)(cfg.uid_base + cfg.max_sessions + 64) : getuid();
        gid_t probe_gid = privileged ? (gid_t)(cfg.uid_base + cfg.max_sessions + 64) : getgid();
        if (s_probe_sandbox(init_path, state_dir, &cfg, probe_uid, probe_gid) < 0) {
            LOG_E("the start-up probe could not run %s in the sandbox (kennel-init's line above "
                  "says why); fix that, or run with --insecure-no-sandbox for debugging only",
                  cfg.python);
            return 1;
        }
        snprintf(sandbox_desc, sizeof sandbox_desc,
                 "namespaces user,pid,net,mount,ipc,uts,cgroup; new root; no capabilities; "
                 "no_new_privs; seccomp; rlimits; %s; %s", cg,
                 privileged ? "a host uid per session" : "kernels as kenneld's own uid");
        walls_add_identity(&walls);
        walls_add_cgroups(&walls, ncg, cg);
    }
    /* Workspace caps: tried for real, whether or not --disk asks for one by default, so
     * stats says what a session asking for one would get. */
    char probed[320];
    int disk_ok = disk_probe(state_dir, probed, sizeof probed) == 0;
    char templates[PATH_MAX];
    if (disk_ok && (snprintf(templates, sizeof templates, "%s/disk-templates", state_dir) >=
                        (int)sizeof templates ||
                    disk_templates(templates) < 0))
        PLOG_W("no workspace image templates in %s: mke2fs runs for every image", templates);
    if (!disk_ok) {
        walls_add(&walls, "workspace size cap (--disk): %s; sessions that ask for one are "
                          "refused, never run uncapped",
                  probed);
        if (cfg.disk_bytes)
            LOG_E("workspace caps cannot be made here (%s): every session with a disk cap (the "
                  "default is --disk %llu MiB) will be refused; start kenneld with --disk 0 to "
                  "serve sessions without one",
                  probed, cfg.disk_bytes >> 20);
    }
    LOG_I("sandbox: %s", sandbox_desc);
    if (!cfg.insecure_no_sandbox)
        LOG_I("spawner: %s", strcmp(cfg.spawner, "zygote") != 0 ? "exec (a cold Python per kernel)"
                             : privileged ? "zygote (kernels fork from a warm Python)"
                                          : "exec: the zygote needs root (--spawner zygote ignored)");
    LOG_I("workspace caps: %s%s", disk_ok ? "" : "unavailable: ", probed);
    if (cfg.merge_pages && strcmp(cfg.spawner, "zygote") == 0 && privileged)
        s_log_merge_pages();
    for (const char *const *w = walls_list(&walls); *w; w++)
        LOG_W("lost wall: %s", *w);

    char manager_ep[PATH_MAX + 32];
    if (cfg.manager[0])
        snprintf(manager_ep, sizeof manager_ep, "%s", cfg.manager);
    else if (strlen(state_dir) + strlen("/manager") < 107)
        snprintf(manager_ep, sizeof manager_ep, "ipc://%s/manager", state_dir);
    else
        snprintf(manager_ep, sizeof manager_ep, "tcp://127.0.0.1:*");

    /* --site at /opt/site and each --data NAME=DIR at /data/NAME, read-only in every kernel. */
    static sandbox_bind_t binds[SANDBOX_MAX_BINDS];
    static char data_inside[KENNEL_MAX_DATA][sizeof SANDBOX_DATA_DIR + KENNEL_DATA_NAME_MAX + 1];
    size_t nbinds = 0;
    if (cfg.site[0])
        binds[nbinds++] = (sandbox_bind_t){cfg.site, SANDBOX_SITE_DIR};
    for (size_t d = 0; d < cfg.ndata; d++) {
        snprintf(data_inside[d], sizeof data_inside[d], SANDBOX_DATA_DIR "/%s", cfg.data[d].name);
        binds[nbinds++] = (sandbox_bind_t){cfg.data[d].dir, data_inside[d]};
    }
    char runs_dir[PATH_MAX];
    snprintf(runs_dir, sizeof runs_dir, "%s/runs", state_dir);
    for (size_t i = 0; i < cfg.nadmit; i++)
        (void)channels_admit_user(cfg.admit[i]); /* config_load allows no more than fit */
    loop_t *loop = loop_new();
    /* Every session's sockets are guarded: the gate admits at most --max-clients connections
     * on each. */
    gate_t *gate = loop ? gate_new(loop) : NULL;
    /* What a failure from here on ends, in one place (fail:): each is NULL until made. */
    broker_t *broker = NULL;
    manager_t *manager = NULL, *tmanager = NULL;
    cluster_t *cluster = NULL;
    int tenants_written = 0; /* tenants.json is ours to remove */
    int status = 1;
    if (loop && !gate) {
        PLOG_E("cannot serve ZAP (the gate)");
        goto fail;
    }
    broker_cfg_t bcfg = {
        .state_dir = state_dir,
        .transport = cfg.transport,
        .ip = cfg.ip,
        .python = cfg.python,
        .kernel_dir = cfg.kernel_dir,
        .max_sessions = cfg.max_sessions,
        /* A request that passed --max-message always fits, with its op header and part
         * lengths; a kernel's frames are at most 64 MiB whatever the limit (kennel_pipe). */
        .max_pipe_frame = (cfg.max_message_bytes > KERNEL_SEND_MAX ? cfg.max_message_bytes
                                                                    : KERNEL_SEND_MAX) +
                          KPIPE_FRAME_SLACK,
        .sandbox = !cfg.insecure_no_sandbox,
        .init_path = init_path,
        .binds = binds,
        .nbinds = nbinds,
        .runs_dir = runs_dir,
        .runs_keep_days = (unsigned)cfg.runs_keep_days,
        .record_code = cfg.record_code,
        /* The zygote hands kernels their workspace as a detached mount (open_tree), which
         * needs root: an unprivileged kenneld starts every kernel with kennel-init. */
        .zygote = strcmp(cfg.spawner, "zygote") == 0 && privileged,
        .zygote_dir = cfg.zygote_dir,
        .preload = cfg.preload,
        .pool = cfg.pool,
        .pool_max = cfg.pool_max,
        .pool_linger_s = cfg.pool_linger_s,
        .merge_pages = cfg.merge_pages,
        .uid_base = cfg.uid_base,
        .own_ids = !privileged,
        .disk_ok = disk_ok,
        .disk_desc = probed,
        .lost = walls_list(&walls),
        .limits = {{cfg.memory_bytes, cfg.pids, cfg.cpus}, cfg.tmp_bytes, cfg.nofile,
                   (long long)(cfg.timeout_s * 1000), (long long)(cfg.idle_s * 1000),
                   cfg.disk_bytes, (long long)(cfg.budget_cpu_s * 1000),
                   (long long)(cfg.budget_wall_s * 1000), (long long)cfg.budget_cells,
                   cfg.budget_output},
        .sandbox_desc = sandbox_desc,
        .ttl_ms = (long long)(cfg.ttl_s * 1000),
        .max_unread = cfg.max_unread,
        .max_memory = cfg.max_memory,
        .gate = gate,
        .max_clients = cfg.max_clients,
        .curve = cfg.curve,
        .tenants = tenants,
        .session_limits = {.max_queued = cfg.max_queued,
                           .grace_ms = (long long)(cfg.grace_s * 1000),
                           .max_output = cfg.max_output,
                           .max_output_msgs = cfg.max_output_msgs,
                           .journal_bytes = cfg.journal_bytes,
                           .journal_age_ms = (long long)(cfg.journal_age_s * 1000),
                           .checkpoint_ms =
                               cfg.cluster[0] ? (long long)(cfg.checkpoint_s * 1000) : 0},
    };
    wire_limits_default(&bcfg.wire_limits);
    bcfg.wire_limits.max_msg_bytes = cfg.max_message_bytes;
    broker = loop ? broker_new(loop, &bcfg) : NULL;
    char key[40];
    util_uuid(key);
    /* Under --curve the manager's key pair goes into kenneld.json (0600, in the 0700 state
     * directory), beside the HMAC key: whoever may read one may read the other. A cluster's
     * nodes share theirs (--cluster-key), so `kennel --cluster` reaches every manager. */
    char curve_pub[41] = "", curve_sec[41] = "";
    if (cfg.cluster[0] && cluster_keys(cfg.cluster_key, key, curve_pub, curve_sec) < 0)
        goto fail;
    if (cfg.curve && !cfg.cluster[0] && zmq_curve_keypair(curve_pub, curve_sec) < 0) {
        PLOG_E("cannot make a CURVE key pair (libzmq without libsodium?)");
        goto fail;
    }
    manager = loop && broker ? manager_new(loop, broker, manager_ep, key, cfg.max_file, NULL,
                                           gate, cfg.curve ? curve_sec : NULL, tenants, 0)
                             : NULL;
    if (!manager) {
        PLOG_E("cannot serve the manager on %s", manager_ep);
        goto fail;
    }
    /* The tenant manager: a socket of its own, with an HMAC key of its own that every tenant
     * may read (tenants.json, 0644): there the gate's answer (the caller's uid or CURVE key)
     * is the credential, not the key. kenneld.json's key stays the operators' alone. */
    char tkey[40] = "", tpub[41] = "", tsec[41] = "", tenant_ep[PATH_MAX + 32];
    if (tenants) {
        util_uuid(tkey);
        if (cfg.tenant_manager[0])
            snprintf(tenant_ep, sizeof tenant_ep, "%s", cfg.tenant_manager);
        else
            snprintf(tenant_ep, sizeof tenant_ep, "ipc://%s/tenants", state_dir);
        int is_ipc = strncmp(tenant_ep, "ipc://", 6) == 0;
        if (is_ipc && strlen(tenant_ep) - 6 > 107) {
            LOG_E("the tenant manager's path %s is too long for an ipc socket; use a shorter "
                  "--state-dir or --tenant-manager", tenant_ep + 6);
            tmanager = NULL;
        } else if (!is_ipc && zmq_curve_keypair(tpub, tsec) < 0) {
            PLOG_E("cannot make a CURVE key pair");
        } else {
            tmanager = manager_new(loop, broker, tenant_ep, tkey, cfg.max_file, NULL, gate,
                                   is_ipc ? NULL : tsec, tenants, 1);
            if (!tmanager)
                PLOG_E("cannot serve the tenant manager on %s", tenant_ep);
        }
        sodium_memzero(tsec, sizeof tsec);
        /* Anyone may connect; the gate admits only the tenants file's uids. */
        if (tmanager && is_ipc && chmod(tenant_ep + 6, 0666) < 0) {
            PLOG_E("chmod 0666 %s", tenant_ep + 6);
            manager_destroy(&tmanager);
        }
        if (!tmanager)
            goto fail;
    }
    if (loop_fd(loop, sfd, LOOP_IN, s_on_signal, broker) < 0) {
        PLOG_E("cannot watch the signalfd");
        goto fail;
    }
    broker_restore(broker);
    if (cfg.cluster[0]) {
        cluster_cfg_t ccfg = {cfg.cluster, cfg.node, cfg.advertise, cfg.shared, state_dir,
                              cfg.max_sessions};
        cluster = cluster_new(loop, broker, &ccfg);
        if (!cluster)
            goto fail;
        manager_set_cluster(manager, cluster);
        cluster_serve(cluster, manager_endpoint(manager));
    }

    unsigned long long started = 0; /* with the pid, names this process (statedir_kenneld_pid) */
    if (util_start_time(getpid(), &started) < 0)
        PLOG_W("cannot read this process's start time");
    /* Before kenneld.json, whose appearance says kenneld is ready to serve. */
    if (tmanager) {
        json_t *t = json_pack("{s:{s:s, s:s, s:s}, s:I, s:I, s:s, s:s}", "manager", "endpoint",
                              manager_endpoint(tmanager), "key", tkey, "signature_scheme",
                              "hmac-sha256", "pid", (json_int_t)getpid(), "start",
                              (json_int_t)started, "version", KENNEL_VERSION, "state_dir",
                              state_dir);
        if (tpub[0])
            json_object_set_new(json_object_get(t, "manager"), "curve_serverkey",
                                json_string(tpub));
        int wrote = statedir_write_json(tenants_path, t, STATEDIR_DURABLE);
        json_decref(t);
        if (wrote < 0 || chmod(tenants_path, 0644) < 0) {
            PLOG_E("write %s", tenants_path);
            goto fail;
        }
        tenants_written = 1;
        LOG_I("tenant manager %s", manager_endpoint(tmanager));
    }
    json_t *info = json_pack("{s:{s:s, s:s, s:s}, s:I, s:I, s:s, s:s}", "manager", "endpoint",
                             manager_endpoint(manager), "key", key, "signature_scheme",
                             "hmac-sha256", "pid", (json_int_t)getpid(), "start",
                             (json_int_t)started, "version", KENNEL_VERSION, "state_dir",
                             state_dir);
    /* What `kennel runtime` needs to list the kernels' packages as they see them. */
    json_t *data = json_object();
    for (size_t d = 0; d < cfg.ndata; d++)
        json_object_set_new(data, cfg.data[d].name, json_string(cfg.data[d].dir));
    json_object_set_new(info, "runtime", json_pack("{s:s, s:s, s:s, s:o}", "python", cfg.python,
                                                   "kernel_dir", cfg.kernel_dir, "site",
                                                   cfg.site, "data", data));
    if (cfg.curve) {
        json_t *m = json_object_get(info, "manager");
        json_object_set_new(m, "curve_publickey", json_string(curve_pub));
        json_object_set_new(m, "curve_secretkey", json_string(curve_sec));
    }
    sodium_memzero(curve_sec, sizeof curve_sec);
    int wrote = statedir_write_json(info_path, info, STATEDIR_DURABLE);
    json_decref(info);
    if (wrote < 0) {
        PLOG_E("write %s", info_path);
        goto fail;
    }
    LOG_I("serving: state %s, manager %s, sessions on %s", state_dir, manager_endpoint(manager),
          cfg.transport);

    if (loop_run(loop) < 0)
        PLOG_E("the loop failed (epoll_wait)");
    unlink(info_path);
    status = 0;
fail: /* the managers and the sessions' sockets go before the gate that guards them */
    cluster_destroy(&cluster);
    if (tenants_written)
        unlink(tenants_path);
    manager_destroy(&tmanager);
    manager_destroy(&manager);
    broker_destroy(&broker);
    gate_destroy(&gate);
    tenants_destroy(&tenants);
    if (loop)
        loop_fd_end(loop, sfd);
    loop_destroy(&loop);
    close(sfd);
    sodium_memzero(key, sizeof key);
    if (status == 0)
        LOG_I("stopped");
    return status;
}
