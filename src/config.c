/*  config: a flat table of options, each with a parser, so --help and parsing cannot drift. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "statedir.h"

#define DEFAULT_PRELOAD                                                                            \
    "numpy,pandas,matplotlib.pyplot,matplotlib_inline.backend_inline,sklearn,seaborn"

static const char s_usage[] =
    "usage: kenneld [options]\n"
    "  --state-dir DIR     state directory (env KENNEL_STATE_DIR; default ~/.local/state/kennel)\n"
    "  --transport T       session channels on tcp (127.0.0.1) or ipc (default tcp)\n"
    "  --manager EP        manager endpoint (default ipc://STATE/manager)\n"
    "  --python PATH       interpreter for kernels (env KENNEL_PYTHON; default " KENNEL_PYTHON ")\n"
    "  --kernel-dir DIR    directory of kennel_kernel.py\n"
    "  --max-sessions N    live sessions at most (default 256)\n"
    "  --max-queued N      shell requests waiting per session (default 256)\n"
    "  --max-message SIZE  largest client message or kernel frame, e.g. 64M (default 64M)\n"
    "  --max-unread SIZE   output a session's iopub holds for clients that have not read it,\n"
    "                      and replies its sockets hold for one client; past it, they are\n"
    "                      dropped until the readers catch up (default 64M)\n"
    "  --curve             every session's sockets, and the manager's, are CURVE servers: only\n"
    "                      clients holding the session's key pair (its connection file's\n"
    "                      curve_publickey and curve_secretkey) get in; traffic is encrypted\n"
    "  --max-clients N     connections each of a session's five sockets admits; past it a\n"
    "                      peer's handshake is refused (default 64; 0: no bound)\n"
    "  --admit-user USER   a user (name or uid) whose connections sessions without CURVE\n"
    "                      admit, besides kenneld's own and root: kennel-gateway's --user\n"
    "                      (repeatable, at most 8)\n"
    "  --tenants FILE      serve several teams: the file names each tenant (its uids or\n"
    "                      CURVE keys, its quotas) and the operators; a tenant sees, attaches\n"
    "                      to and ends only its own sessions, through a second manager socket\n"
    "                      (docs/security.md, \"Tenants\"). Owned by root, mode 0600 or 0640\n"
    "  --tenant-manager EP  that socket (default ipc://STATE/tenants; tcp needs --curve:\n"
    "                      callers are then known by their CURVE client key)\n"
    "  --max-memory SIZE   kenneld's own heap in use past which it cuts every client\n"
    "                      connection of every session (they reconnect); 0: never\n"
    "                      (default 2G)\n"
    "  --cluster URL       join a cluster: redis://HOST:PORT holds the catalog (sessions, nodes);\n"
    "                      needs --node, --advertise and --shared (docs/cluster.md)\n"
    "  --node NAME         this node's name in the cluster\n"
    "  --advertise ADDR    the IPv4 address sessions and the manager bind and clients reach\n"
    "  --shared DIR        a directory every node mounts: session directories live there, so\n"
    "                      another node revives a dead node's sessions from their checkpoint\n"
    "  --cluster-key FILE  the manager's keys, the same on every node and for `kennel\n"
    "                      --cluster` (default SHARED/cluster-key.json, made by the first node)\n"
    "  --checkpoint S      a cluster session idle S seconds after a cell has its state saved\n"
    "                      to DIR, its kernel kept (default 10)\n"
    "  --log-level L       error, warn, info or debug (env KENNEL_LOG_LEVEL; default info)\n"
    "  --spawner S         zygote: kernels are forks of a warm Python that imported the\n"
    "                      preload list once; exec: a cold python3 per kernel (env\n"
    "                      KENNEL_SPAWNER; default zygote)\n"
    "  --preload LIST      modules the zygote imports, comma-separated (default\n"
    "                      " DEFAULT_PRELOAD ")\n"
    "  --pool N            sealed kernels kept ready for new sessions (zygote only; default 2)\n"
    "  --pool-max N        the pool grows to a burst of new sessions, up to N kernels\n"
    "                      (~7 MiB each; default 24, or --pool's N if larger; with\n"
    "                      --pool 0 the default is 0: no pool at all)\n"
    "  --pool-linger S     a grown pool halves back toward --pool after S seconds\n"
    "                      without a burst (default 60)\n"
    "  --runs-keep DAYS    a JSON line per cell in STATE/runs/YYYY-MM-DD.jsonl, kept this\n"
    "                      many days (default 30; 0: no run records)\n"
    "  --record-code       run records carry each cell's code (secret-like strings\n"
    "                      redacted), not only its sha256\n"
    "  --site DIR          an extra site-packages (a venv's, built elsewhere), mounted\n"
    "                      read-only into every kernel and put on sys.path after Debian's\n"
    "  --data NAME=DIR     a dataset, mounted read-only at /data/NAME in every kernel\n"
    "                      (repeatable, at most 16). DIR and what is in it must be readable\n"
    "                      by others: kernels run as unprivileged host uids. Mounts below\n"
    "                      DIR keep their own flags\n"
    "  --merge-pages       let Linux's KSM merge identical pages of the zygote's sessions\n"
    "                      (zygote only; off by default; needs /sys/kernel/mm/ksm/run = 1):\n"
    "                      an idle session then owns ~1 MiB instead of ~5. Weakens isolation:\n"
    "                      a session can time its own writes to learn whether another session\n"
    "                      holds a page of content it can guess\n"
    "per-session defaults (a session may ask for others when it is created):\n"
    "  --memory SIZE       memory limit, cgroup and RLIMIT_AS (the latter on top of what a\n"
    "                      kernel inherits from the zygote; default 1G)\n"
    "  --pids N            processes and threads (default 256)\n"
    "  --cpu N             CPUs' worth of time, e.g. 0.5 (default 1)\n"
    "  --tmp SIZE          size of /tmp and /dev/shm (default 256M)\n"
    "  --disk SIZE         workspace size cap: an ext4 image loop-mounted at the workspace\n"
    "                      (default 1G; 0: none). Needs root: where loop mounts fail, sessions\n"
    "                      with a cap are refused, not started without one\n"
    "  --nofile N          open files (default 1024)\n"
    "  --timeout SECONDS   a cell's deadline (default 0: none)\n"
    "  --idle SECONDS      evict a session idle this long, saving its state (default 900;\n"
    "                      0: never)\n"
    "  --ttl SECONDS       end an evicted session unused this long, files and all (default\n"
    "                      86400; 0: never)\n"
    "  --budget-cpu SECONDS  kernel CPU time a session's cells may use in all; past it, a\n"
    "                      cell is refused (BudgetExhausted) (default 0: none)\n"
    "  --budget-wall SECONDS  cells' wall time in all, likewise (default 0: none)\n"
    "  --budget-cells N    cells in all, likewise (default 0: none)\n"
    "  --budget-output SIZE  output bytes in all, likewise (default 0: none)\n"
    "  --grace SECONDS     how long a cell may run past its deadline before the kernel is\n"
    "                      killed and restarted (default 2)\n"
    "  --max-output SIZE   output a cell may publish before it is cut off, each message\n"
    "                      counting 64 bytes beyond its own (default 10M)\n"
    "  --max-output-msgs N output messages a cell may publish before it is cut off\n"
    "                      (default 100000; 0: no bound)\n"
    "  --max-file SIZE     largest file kennel put/get moves (default 32M)\n"
    "  --journal SIZE      iopub messages of a session's last cells kept for replays\n"
    "                      (kennel_replay_request, kennel exec --attach); 0: none\n"
    "                      (default 4M)\n"
    "  --journal-age SECONDS  a cell ended longer ago is no longer kept (default 600)\n"
    "  --uid-base N        kernels run as host uids N, N+1, … (default 1900000000)\n"
    "  --insecure-no-sandbox  run kernels as kenneld's own user, unconfined (debugging only)\n"
    "As root, kenneld gives each session its own host uid, cgroups and workspace image. As\n"
    "another user it builds the rest of the sandbox with user namespaces alone: kernels map to\n"
    "its own uid, cgroups only where delegated to it, no workspace caps (sessions asking for\n"
    "one are refused: use --disk 0). It logs each wall it lost and `kennel stats` lists them.\n";

static int s_copy(char *dst, size_t cap, const char *src, const char *what)
{
    if (strlen(src) >= cap) {
        fprintf(stderr, "kenneld: %s is too long\n", what);
        return -1;
    }
    strcpy(dst, src);
    return 0;
}

/*  An existing directory, as an absolute path, into dst. */
static int s_dir(char *dst, size_t cap, const char *src, const char *what)
{
    struct stat st;
    if (src[0] != '/' || stat(src, &st) < 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "kenneld: %s must be an existing directory, as an absolute path\n", what);
        return -1;
    }
    return s_copy(dst, cap, src, what);
}

/*  --data NAME=DIR: NAME is letters, digits, '.', '_' and '-', not starting with '.', and
 *  unique; DIR an existing directory. */
static int s_data(config_t *cfg, const char *arg)
{
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : 0;
    if (cfg->ndata == KENNEL_MAX_DATA) {
        fprintf(stderr, "kenneld: at most %d --data\n", KENNEL_MAX_DATA);
        return -1;
    }
    int ok = n > 0 && n <= KENNEL_DATA_NAME_MAX && arg[0] != '.';
    for (size_t i = 0; ok && i < n; i++)
        ok = (arg[i] >= 'a' && arg[i] <= 'z') || (arg[i] >= 'A' && arg[i] <= 'Z') ||
             (arg[i] >= '0' && arg[i] <= '9') || arg[i] == '.' || arg[i] == '_' || arg[i] == '-';
    if (!ok) {
        fprintf(stderr, "kenneld: --data takes NAME=DIR, NAME of letters, digits, '.', '_' and "
                        "'-' (not starting with '.'), at most %d\n", KENNEL_DATA_NAME_MAX);
        return -1;
    }
    for (size_t i = 0; i < cfg->ndata; i++)
        if (strlen(cfg->data[i].name) == n && strncmp(cfg->data[i].name, arg, n) == 0) {
            fprintf(stderr, "kenneld: --data %.*s given twice\n", (int)n, arg);
            return -1;
        }
    if (s_dir(cfg->data[cfg->ndata].dir, sizeof cfg->data[0].dir, eq + 1, "--data's DIR") < 0)
        return -1;
    memcpy(cfg->data[cfg->ndata].name, arg, n);
    cfg->data[cfg->ndata].name[n] = '\0';
    cfg->ndata++;
    return 0;
}

/*  A size with an optional K, M or G suffix (powers of 1024). */
static int s_spawner(config_t *cfg, const char *name)
{
    if (strcmp(name, "zygote") != 0 && strcmp(name, "exec") != 0) {
        fprintf(stderr, "kenneld: the spawner is zygote or exec\n");
        return -1;
    }
    strcpy(cfg->spawner, name);
    return 0;
}

/*  --admit-user USER: a name, or a uid in digits. */
static int s_admit(config_t *cfg, const char *text)
{
    if (cfg->nadmit == KENNEL_MAX_ADMIT) {
        fprintf(stderr, "kenneld: at most %d --admit-user\n", KENNEL_MAX_ADMIT);
        return -1;
    }
    char *end;
    errno = 0;
    unsigned long n = strtoul(text, &end, 10);
    if (*text >= '0' && *text <= '9' && !*end && errno == 0 && n < (uid_t)-1) {
        cfg->admit[cfg->nadmit++] = (uid_t)n;
        return 0;
    }
    const struct passwd *pw = getpwnam(text);
    if (!pw) {
        fprintf(stderr, "kenneld: --admit-user %s: no such user\n", text);
        return -1;
    }
    cfg->admit[cfg->nadmit++] = pw->pw_uid;
    return 0;
}

static int s_size(const char *text, size_t min, size_t max, size_t *out, const char *what)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        end++;
    if (errno || end == text || *end || text[0] == '-' || v > (max >> shift) ||
        (v << shift) < min) {
        fprintf(stderr, "kenneld: %s must be between %zu and %zu\n", what, min, max);
        return -1;
    }
    *out = (size_t)(v << shift);
    return 0;
}

/*  --cluster's companions, checked together. Clients on other machines reach the sessions and
 *  the manager at --advertise; without CURVE the gate admits only local clients of kenneld's
 *  user (docs/security.md), so a cluster is always CURVE. */
static int s_cluster(config_t *cfg)
{
    if (strncmp(cfg->cluster, "redis://", 8) != 0 || !cfg->node[0] || !cfg->advertise[0] ||
        !cfg->shared[0]) {
        fprintf(stderr, "kenneld: --cluster takes redis://HOST:PORT and needs --node NAME, "
                        "--advertise ADDR and --shared DIR\n");
        return -1;
    }
    for (const char *p = cfg->node; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.')) {
            fprintf(stderr, "kenneld: --node may contain only letters, digits, '-', '_', '.'\n");
            return -1;
        }
    struct in_addr a;
    if (inet_pton(AF_INET, cfg->advertise, &a) != 1) {
        fprintf(stderr, "kenneld: --advertise must be an IPv4 address\n");
        return -1;
    }
    if (cfg->shared[0] != '/') {
        fprintf(stderr, "kenneld: --shared must be an absolute path\n");
        return -1;
    }
    snprintf(cfg->ip, sizeof cfg->ip, "%s", cfg->advertise);
    strcpy(cfg->transport, "tcp");
    cfg->curve = 1;
    if (!cfg->manager[0])
        snprintf(cfg->manager, sizeof cfg->manager, "tcp://%s:*", cfg->advertise);
    if (!cfg->cluster_key[0] &&
        snprintf(cfg->cluster_key, sizeof cfg->cluster_key, "%s/cluster-key.json", cfg->shared) >=
            (int)sizeof cfg->cluster_key) {
        fprintf(stderr, "kenneld: --shared is too long\n");
        return -1;
    }
    if (cfg->checkpoint_s == 0)
        cfg->checkpoint_s = 10;
    return 0;
}

int config_load(config_t *cfg, int argc, char **argv)
{
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->transport, "tcp");
    strcpy(cfg->ip, "127.0.0.1");
    strcpy(cfg->python, KENNEL_PYTHON);
    strcpy(cfg->kernel_dir, KENNEL_KERNEL_DIR);
    cfg->max_sessions = 256;
    cfg->max_queued = 256;
    cfg->max_message_bytes = 64u << 20;
    cfg->log_level = LOG_LEVEL_INFO;
    cfg->memory_bytes = 1ull << 30;
    cfg->pids = 256;
    cfg->cpus = 1.0;
    cfg->tmp_bytes = 256ull << 20;
    cfg->disk_bytes = 1ull << 30;
    cfg->nofile = 1024;
    cfg->uid_base = 1900000000;
    cfg->grace_s = 2;
    cfg->idle_s = 900;
    cfg->ttl_s = 86400;
    cfg->max_output = 10u << 20;
    cfg->max_output_msgs = 100000;
    cfg->journal_bytes = 4u << 20;
    cfg->journal_age_s = 600;
    cfg->max_file = 32u << 20;
    cfg->max_unread = 64u << 20;
    cfg->max_memory = (size_t)2 << 30;
    cfg->max_clients = 64;
    strcpy(cfg->spawner, "zygote");
    strcpy(cfg->zygote_dir, KENNEL_ZYGOTE_DIR);
    strcpy(cfg->preload, DEFAULT_PRELOAD);
    cfg->pool = 2;
    cfg->pool_max = 24;
    cfg->pool_linger_s = 60;
    cfg->runs_keep_days = 30;
    if (statedir_default(cfg->state_dir, sizeof cfg->state_dir) < 0) {
        fprintf(stderr, "kenneld: no state directory: set --state-dir or HOME\n");
        return -1;
    }
    const char *env;
    if ((env = getenv("KENNEL_PYTHON")) && *env && s_copy(cfg->python, sizeof cfg->python, env, "KENNEL_PYTHON") < 0)
        return -1;
    if ((env = getenv("KENNEL_LOG_LEVEL")) && *env && (cfg->log_level = log_level_parse(env)) < 0) {
        fprintf(stderr, "kenneld: KENNEL_LOG_LEVEL must be error, warn, info or debug\n");
        return -1;
    }
    if ((env = getenv("KENNEL_SPAWNER")) && *env && s_spawner(cfg, env) < 0)
        return -1;
    static const struct option opts[] = {
        {"state-dir", required_argument, NULL, 's'}, {"transport", required_argument, NULL, 't'},
        {"manager", required_argument, NULL, 'm'},   {"python", required_argument, NULL, 'p'},
        {"kernel-dir", required_argument, NULL, 'k'}, {"max-sessions", required_argument, NULL, 'S'},
        {"max-queued", required_argument, NULL, 'Q'}, {"max-message", required_argument, NULL, 'M'},
        {"log-level", required_argument, NULL, 'l'}, {"help", no_argument, NULL, 'h'},
        {"memory", required_argument, NULL, 'y'},    {"pids", required_argument, NULL, 'P'},
        {"cpu", required_argument, NULL, 'c'},       {"tmp", required_argument, NULL, 'T'},
        {"nofile", required_argument, NULL, 'F'},    {"uid-base", required_argument, NULL, 'U'},
        {"insecure-no-sandbox", no_argument, NULL, 'I'},
        {"timeout", required_argument, NULL, 'o'},   {"grace", required_argument, NULL, 'g'},
        {"max-output", required_argument, NULL, 'O'}, {"idle", required_argument, NULL, 'd'},
        {"max-output-msgs", required_argument, NULL, 'N'},
        {"journal", required_argument, NULL, 'J'}, {"journal-age", required_argument, NULL, 'A'},
        {"max-file", required_argument, NULL, 'X'}, {"disk", required_argument, NULL, 'D'},
        {"ttl", required_argument, NULL, 'L'},       {"max-unread", required_argument, NULL, 'B'}, {"max-memory", required_argument, NULL, 'Y'},
        {"spawner", required_argument, NULL, 'Z'},   {"preload", required_argument, NULL, 'R'},
        {"pool", required_argument, NULL, 'W'},      {"merge-pages", no_argument, NULL, 'K'},
        {"site", required_argument, NULL, 'E'},      {"data", required_argument, NULL, 'G'},
        {"runs-keep", required_argument, NULL, 'H'}, {"record-code", no_argument, NULL, 'C'},
        {"max-clients", required_argument, NULL, 'a'}, {"curve", no_argument, NULL, 'V'},
        {"admit-user", required_argument, NULL, 'b'},
        {"tenants", required_argument, NULL, 0x104},
        {"tenant-manager", required_argument, NULL, 0x105},
        {"budget-cpu", required_argument, NULL, 0x100}, {"budget-wall", required_argument, NULL, 0x101},
        {"budget-cells", required_argument, NULL, 0x102},
        {"budget-output", required_argument, NULL, 0x103},
        {"pool-max", required_argument, NULL, 0x110},
        {"pool-linger", required_argument, NULL, 0x111},
        {"cluster", required_argument, NULL, 0x200}, {"node", required_argument, NULL, 0x201},
        {"advertise", required_argument, NULL, 0x202}, {"shared", required_argument, NULL, 0x203},
        {"cluster-key", required_argument, NULL, 0x204},
        {"checkpoint", required_argument, NULL, 0x205},
        {NULL, 0, NULL, 0}};
    int c, pool_max_set = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 's': rc = s_copy(cfg->state_dir, sizeof cfg->state_dir, optarg, "--state-dir"); break;
        case 't':
            if (strcmp(optarg, "tcp") != 0 && strcmp(optarg, "ipc") != 0) {
                fprintf(stderr, "kenneld: --transport must be tcp or ipc\n");
                return -1;
            }
            strcpy(cfg->transport, optarg);
            break;
        case 'm': rc = s_copy(cfg->manager, sizeof cfg->manager, optarg, "--manager"); break;
        case 'p': rc = s_copy(cfg->python, sizeof cfg->python, optarg, "--python"); break;
        case 'k': rc = s_copy(cfg->kernel_dir, sizeof cfg->kernel_dir, optarg, "--kernel-dir"); break;
        case 'S': rc = s_size(optarg, 1, 100000, &cfg->max_sessions, "--max-sessions"); break;
        case 'Q': rc = s_size(optarg, 1, 100000, &cfg->max_queued, "--max-queued"); break;
        case 'M': rc = s_size(optarg, 4096, 1u << 30, &cfg->max_message_bytes, "--max-message"); break;
        case 'l':
            if ((cfg->log_level = log_level_parse(optarg)) < 0) {
                fprintf(stderr, "kenneld: --log-level must be error, warn, info or debug\n");
                return -1;
            }
            break;
        case 'y': {
            size_t v = 0;
            rc = s_size(optarg, KENNEL_MEMORY_MIN, (size_t)1 << 40, &v, "--memory");
            cfg->memory_bytes = v;
            break;
        }
        case 'P': rc = s_size(optarg, 8, 65536, &cfg->pids, "--pids"); break;
        case 'c': {
            char *end;
            cfg->cpus = strtod(optarg, &end);
            if (*end || end == optarg || cfg->cpus < 0.01 || cfg->cpus > 1024) {
                fprintf(stderr, "kenneld: --cpu must be between 0.01 and 1024\n");
                return -1;
            }
            break;
        }
        case 'T': {
            size_t v = 0;
            rc = s_size(optarg, 1u << 20, (size_t)1 << 40, &v, "--tmp");
            cfg->tmp_bytes = v;
            break;
        }
        case 'D': {
            size_t v = 0;
            rc = s_size(optarg, 0, (size_t)1 << 40, &v, "--disk");
            if (rc == 0 && v && v < (16u << 20)) { /* disk.h DISK_MIN_BYTES */
                fprintf(stderr, "kenneld: --disk must be 0 (no cap) or at least 16M\n");
                rc = -1;
            }
            cfg->disk_bytes = v;
            break;
        }
        case 'F': rc = s_size(optarg, 64, 1u << 20, &cfg->nofile, "--nofile"); break;
        case 'U': rc = s_size(optarg, 1000, 4000000000u, &cfg->uid_base, "--uid-base"); break;
        case 'I': cfg->insecure_no_sandbox = 1; break;
        case 'K': cfg->merge_pages = 1; break;
        case 'V': cfg->curve = 1; break;
        case 'o':
        case 'g':
        case 'd':
        case 'L': {
            char *end;
            double v = strtod(optarg, &end);
            const char *opt = c == 'g' ? "grace" : c == 'o' ? "timeout" : c == 'd' ? "idle" : "ttl";
            if (*end || end == optarg || v < (c == 'g' ? 0.1 : 0) || v > 365 * 86400) {
                fprintf(stderr, "kenneld: --%s must be seconds between %s and a year\n", opt,
                        c == 'g' ? "0.1" : "0");
                return -1;
            }
            *(c == 'g'   ? &cfg->grace_s
              : c == 'o' ? &cfg->timeout_s
              : c == 'd' ? &cfg->idle_s
                         : &cfg->ttl_s) = v;
            break;
        }
        case 'O': rc = s_size(optarg, 1024, 1u << 30, &cfg->max_output, "--max-output"); break;
        case 'N':
            rc = s_size(optarg, 0, 1000000000, &cfg->max_output_msgs, "--max-output-msgs");
            break;
        case 'J': rc = s_size(optarg, 0, 1u << 30, &cfg->journal_bytes, "--journal"); break;
        case 'A': {
            char *end;
            double v = strtod(optarg, &end);
            if (*end || end == optarg || v < 1 || v > 7 * 86400) {
                fprintf(stderr, "kenneld: --journal-age must be seconds between 1 and a week\n");
                return -1;
            }
            cfg->journal_age_s = v;
            break;
        }
        case 'X': rc = s_size(optarg, 1024, 1u << 30, &cfg->max_file, "--max-file"); break;
        case 'B':
            rc = s_size(optarg, 64u << 10, (size_t)16 << 30, &cfg->max_unread, "--max-unread");
            break;
        case 'Y':
            rc = strcmp(optarg, "0") == 0 ? (cfg->max_memory = 0, 0)
                                         : s_size(optarg, 64u << 20, (size_t)1 << 40,
                                                  &cfg->max_memory, "--max-memory");
            break;
        case 'a': rc = s_size(optarg, 0, 100000, &cfg->max_clients, "--max-clients"); break;
        case 'Z': rc = s_spawner(cfg, optarg); break;
        case 'R': rc = s_copy(cfg->preload, sizeof cfg->preload, optarg, "--preload"); break;
        case 'W': rc = s_size(optarg, 0, 64, &cfg->pool, "--pool"); break;
        case 'E': rc = s_dir(cfg->site, sizeof cfg->site, optarg, "--site"); break;
        case 'G': rc = s_data(cfg, optarg); break;
        case 'b': rc = s_admit(cfg, optarg); break;
        case 'H': rc = s_size(optarg, 0, 36500, &cfg->runs_keep_days, "--runs-keep"); break;
        case 'C': cfg->record_code = 1; break;
        case 0x100:
        case 0x101: {
            char *end;
            double v = strtod(optarg, &end);
            const char *opt = c == 0x100 ? "budget-cpu" : "budget-wall";
            if (*end || end == optarg || !(v >= 0) || v > 365 * 86400) {
                fprintf(stderr, "kenneld: --%s must be seconds between 0 and a year\n", opt);
                return -1;
            }
            *(c == 0x100 ? &cfg->budget_cpu_s : &cfg->budget_wall_s) = v;
            break;
        }
        case 0x102:
            rc = s_size(optarg, 0, 1000000000000ULL, &cfg->budget_cells, "--budget-cells");
            break;
        case 0x103:
            rc = s_size(optarg, 0, (size_t)1 << 50, &cfg->budget_output, "--budget-output");
            break;
        case 0x110:
            rc = s_size(optarg, 0, 64, &cfg->pool_max, "--pool-max");
            pool_max_set = rc == 0;
            break;
        case 0x111: rc = s_size(optarg, 1, 86400, &cfg->pool_linger_s, "--pool-linger"); break;
        case 0x200: rc = s_copy(cfg->cluster, sizeof cfg->cluster, optarg, "--cluster"); break;
        case 0x201: rc = s_copy(cfg->node, sizeof cfg->node, optarg, "--node"); break;
        case 0x202: rc = s_copy(cfg->advertise, sizeof cfg->advertise, optarg, "--advertise"); break;
        case 0x203: rc = s_copy(cfg->shared, sizeof cfg->shared, optarg, "--shared"); break;
        case 0x204: rc = s_copy(cfg->cluster_key, sizeof cfg->cluster_key, optarg, "--cluster-key"); break;
        case 0x205: {
            char *end;
            errno = 0;
            double v = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(v >= 1 && v <= 86400)) {
                fprintf(stderr, "kenneld: --checkpoint must be between 1 and 86400 seconds\n");
                return -1;
            }
            cfg->checkpoint_s = v;
            break;
        }
        case 0x104: rc = s_copy(cfg->tenants, sizeof cfg->tenants, optarg, "--tenants"); break;
        case 0x105:
            rc = s_copy(cfg->tenant_manager, sizeof cfg->tenant_manager, optarg,
                        "--tenant-manager");
            break;
        case 'h': fputs(s_usage, stdout); return 1;
        default: fputs(s_usage, stderr); return -1;
        }
        if (rc < 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "kenneld: unexpected argument %s\n%s", argv[optind], s_usage);
        return -1;
    }
    if (!pool_max_set && (cfg->pool == 0 || cfg->pool_max < cfg->pool))
        cfg->pool_max = cfg->pool; /* --pool 0: no pool at all; --pool 40: above the default */
    if (cfg->pool_max < cfg->pool) {
        fprintf(stderr, "kenneld: --pool-max (%zu) must be at least --pool (%zu)\n", cfg->pool_max,
                cfg->pool);
        return -1;
    }
    if (cfg->insecure_no_sandbox && (cfg->site[0] || cfg->ndata)) {
        fprintf(stderr, "kenneld: --site and --data are mounts of the sandbox, which "
                        "--insecure-no-sandbox leaves out\n");
        return -1;
    }
    if (cfg->cluster[0] && s_cluster(cfg) < 0)
        return -1;
    if (cfg->tenant_manager[0] && !cfg->tenants[0]) {
        fprintf(stderr, "kenneld: --tenant-manager needs --tenants\n");
        return -1;
    }
    if (cfg->tenant_manager[0] && strncmp(cfg->tenant_manager, "ipc://", 6) != 0 &&
        (strncmp(cfg->tenant_manager, "tcp://", 6) != 0 || !cfg->curve)) {
        fprintf(stderr, "kenneld: --tenant-manager is ipc://PATH, or tcp://ADDR:PORT with "
                        "--curve (a TCP caller is known by its CURVE key; ZAP is not told its "
                        "uid)\n");
        return -1;
    }
    if (cfg->python[0] != '/' || cfg->kernel_dir[0] != '/') {
        fprintf(stderr, "kenneld: --python and --kernel-dir must be absolute paths\n");
        return -1;
    }
    return 0;
}
