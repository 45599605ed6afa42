/*  config: kenneld's settings: defaults, then environment (KENNEL_STATE_DIR, KENNEL_PYTHON,
 *  KENNEL_LOG_LEVEL, KENNEL_SPAWNER), then the command line. Validated once; read-only afterwards. */
#ifndef KENNEL_CONFIG_H
#define KENNEL_CONFIG_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

/*  kenneld's Python and kernel runtime unless the build (the Makefile passes both) or the
 *  environment says otherwise; `kennel runtime` falls back to them when no kenneld runs. */
#ifndef KENNEL_PYTHON
#define KENNEL_PYTHON "/usr/bin/python3"
#endif
#ifndef KENNEL_KERNEL_DIR
#define KENNEL_KERNEL_DIR "/usr/lib/kennel/kernels/python"
#endif

/*  The smallest memory limit a session may have, kenneld's default or its own: a kernel's
 *  address space alone (the zygote's mappings) is over 224 MiB, and below this every start
 *  failed, for good. */
#define KENNEL_MEMORY_MIN (256ull << 20)

/*  Datasets kenneld --data may mount, and the longest NAME of one. */
#define KENNEL_MAX_DATA 16
#define KENNEL_MAX_ADMIT 8
#define KENNEL_DATA_NAME_MAX 64

typedef struct {
    char state_dir[PATH_MAX];
    char transport[8];         /* "tcp" or "ipc" for session channels */
    char ip[64];
    char manager[PATH_MAX + 16]; /* manager endpoint; "" means ipc://STATE/manager */
    char python[PATH_MAX];
    char kernel_dir[PATH_MAX];
    size_t max_sessions;
    size_t max_queued;
    size_t max_message_bytes;   /* client messages and kernel-pipe frames */
    int insecure_no_sandbox;    /* run kernels without the sandbox (debugging only) */
    int merge_pages;            /* the zygote's kernels offer their pages to KSM */
    int curve;                  /* sessions and the manager are CURVE servers */
    char spawner[8];            /* "zygote" (fork a warm Python) or "exec" (a cold start each) */
    char zygote_dir[PATH_MAX];  /* where the zygote's C part (_kennel_zygote.so) is */
    char preload[1024];         /* modules the zygote imports once, comma-separated */
    size_t pool;                /* sealed kernels kept waiting for new sessions */
    size_t pool_max;            /* the pool grows to bursts up to this many */
    size_t pool_linger_s;       /* a grown pool halves back after this long without a burst */
    size_t runs_keep_days;      /* run records kept this many days; 0: none */
    int record_code;            /* run records carry the code (redacted), not only its hash */
    char site[PATH_MAX];        /* --site: a site-packages bound read-only into kernels; "" */
    size_t ndata;               /* --data NAME=DIR, each bound read-only at /data/NAME */
    struct {
        char name[KENNEL_DATA_NAME_MAX + 1];
        char dir[PATH_MAX];
    } data[KENNEL_MAX_DATA];
    unsigned long long memory_bytes; /* per-session defaults */
    size_t pids;
    double cpus;
    unsigned long long tmp_bytes;
    unsigned long long disk_bytes; /* workspace cap; 0: none */
    size_t nofile;
    double timeout_s;           /* a cell's default deadline; 0: none */
    double idle_s;              /* evict a session idle this long; 0: never */
    double ttl_s;               /* end an evicted session unused this long; 0: never */
    double budget_cpu_s;        /* a session's budgets, over all its cells; 0: none */
    double budget_wall_s;
    size_t budget_cells;
    size_t budget_output;
    double grace_s;             /* after the deadline, how long before the kernel is killed */
    size_t max_output;          /* output bytes per cell */
    size_t max_output_msgs;     /* output messages per cell; 0: no bound */
    size_t journal_bytes;       /* a session's journal of its last cells' iopub; 0: none */
    double journal_age_s;       /* a cell ended longer ago leaves the journal */
    size_t max_unread;          /* bytes a session's iopub holds for clients that lag */
    size_t max_clients;         /* connections per session socket; 0: no bound */
    size_t nadmit;              /* --admit-user: users admitted without CURVE, besides */
    uid_t admit[KENNEL_MAX_ADMIT]; /* kenneld's own and root (kennel-gateway's --user) */
    size_t max_memory;          /* kenneld's heap in use past which clients are cut; 0: off */
    size_t max_file;            /* largest file put into or got from a workspace */
    size_t uid_base;            /* kernels run as host uids uid_base .. uid_base+max_sessions */
    int log_level;
    /* Many machines (docs/cluster.md); cluster[0] == '\0': a single-host kenneld, as ever. */
    char cluster[256];          /* --cluster redis://HOST:PORT */
    char node[64];              /* --node NAME: this node's name in the catalog */
    char advertise[64];         /* --advertise ADDR: sessions and the manager bind it */
    char shared[PATH_MAX];      /* --shared DIR: every node's session directories, mounted by all */
    char cluster_key[PATH_MAX]; /* --cluster-key FILE: the manager's keys, the same on every node */
    double checkpoint_s;        /* --checkpoint: a cluster session idle this long is saved */
    char tenants[PATH_MAX];     /* --tenants FILE; "": none (one user, as before) */
    char tenant_manager[PATH_MAX + 16]; /* its socket's endpoint; "": ipc://STATE/tenants */
} config_t;

/*  Fill cfg from defaults, environment and argv. Returns 0; 1 when --help was printed; or -1
 *  after printing the problem to stderr. */
int config_load(config_t *cfg, int argc, char **argv);

#endif
