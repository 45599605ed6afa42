/*  broker: kenneld's table of live sessions, and what makes each one run: it binds the
 *  session's channels, starts its kernel (from the pool, the zygote or a cold start) and
 *  serves its pipe, does the I/O the session module asks for, ends and frees sessions, and
 *  brings back those an earlier kenneld left. It owns the modules that do the jobs around
 *  sessions (zygote, pool, diskjob, snapstore, meter, sweeper, orphans, record) and tells
 *  them what happens. Used by kenneld's main and by the manager. */
#ifndef KENNEL_BROKER_H
#define KENNEL_BROKER_H

#include <stddef.h>
#include <sys/types.h>

#include <czmq.h>
#include <jansson.h>

#include "gate.h"
#include "loop.h"
#include "reslimits.h"
#include "sandbox.h"
#include "session.h"
#include "tenants.h"
#include "wire.h"


typedef struct {
    const char *state_dir;
    const char *transport;        /* "tcp" or "ipc" for session channels */
    const char *ip;               /* tcp bind address */
    const char *python;           /* the interpreter that runs kernels */
    const char *kernel_dir;       /* where kennel_kernel.py lives */
    int sandbox;                  /* 0 only with --insecure-no-sandbox */
    const char *init_path;        /* kennel-init, which builds the sandbox (--spawner exec) */
    const sandbox_bind_t *binds;  /* --site and --data, bound read-only into every kernel */
    size_t nbinds;
    const char *runs_dir;         /* run records go to RUNS/YYYY-MM-DD.jsonl (runlog.h) */
    unsigned runs_keep_days;      /* days of them kept; 0: no run records */
    int record_code;              /* the records carry the (redacted) code too */
    int zygote;                   /* sandboxed kernels are forks of a zygote */
    const char *zygote_dir;       /* the zygote's C part */
    const char *preload;          /* what the zygote imports, comma-separated */
    size_t pool;                  /* sealed kernels kept waiting for new sessions */
    size_t pool_max;              /* ...and how far a burst grows them */
    size_t pool_linger_s;         /* how long a grown pool stays grown */
    int merge_pages;              /* the zygote's kernels offer their pages to KSM */
    unsigned long uid_base;       /* session n's kernel runs as host uid uid_base + n */
    int own_ids;                  /* unprivileged kenneld: every kernel maps to its own ids */
    int disk_ok;                  /* workspace caps (ext4 images) can be made here */
    const char *disk_desc;        /* what the disk probe found: its cost, or why not */
    const char *const *lost;      /* the walls kenneld could not build here, for stats;
                                     NULL-terminated, or NULL */
    reslimits_t limits;       /* defaults for sessions that ask for none */
    const char *sandbox_desc;     /* what the start-up probe found, for stats */
    long long ttl_ms;             /* an evicted session unused this long ends for good */
    size_t max_sessions;
    size_t max_pipe_frame;        /* largest kernel-pipe frame accepted */
    size_t max_unread;            /* bytes a session's iopub holds for clients that lag */
    size_t max_memory;            /* kenneld's heap in use past which every client is cut;
                                     0: no guard */
    gate_t *gate;                 /* kenneld's ZAP handler, guarding every session's sockets
                                     (borrowed; outlives the broker), or NULL */
    size_t max_clients;           /* connections each session socket admits; 0: no bound */
    int curve;                    /* every session's sockets are CURVE servers (--curve) */
    const tenants_t *tenants;     /* kenneld --tenants (borrowed; outlives the broker), or
                                     NULL: a session's tenant's uids get into its sockets,
                                     its group reads its directory and connection file */
    session_limits_t session_limits;
    wire_limits_t wire_limits;
} broker_cfg_t;

typedef struct broker broker_t;

/*  A broker serving in loop. cfg strings must outlive the broker. NULL on failure. */
broker_t *broker_new(loop_t *loop, const broker_cfg_t *cfg);
/*  Stop every kernel (killed and reaped) and free. Session directories are kept, so the next
 *  kenneld restores them; broker_end is what removes a session for good. */
void broker_destroy(broker_t **self_p);

/*  Errors of broker_create, reported as manager error names. */
typedef struct {
    const char *ename;   /* "TooManySessions", "BadRequest", "AddressInUse", "SpawnFailed",
                            "DiskUnavailable" */
    char evalue[256];
} broker_error_t;

/*  Create a session named name (NULL: named after its id), or return the existing one of that
 *  name (*created = 0). connection (borrowed, may be NULL) asks for exact endpoints and key;
 *  limits (may be NULL) replaces the defaults.
 *  launched: the session belongs to a kernelspec launcher, so any shutdown ends it; launcher
 *  (0: unknown) is that launcher's pid, and the session ends when that process does.
 *  curve: the session's sockets are CURVE servers with keys of their own (a connection's
 *  curve_publickey/curve_secretkey are used as they are; one without them is refused under
 *  cfg.curve).
 *  Returns a new reference to the session's info, or NULL with *err filled. */
json_t *broker_create(broker_t *self, const char *name, const char *tenant,
                      const json_t *connection, int curve, const reslimits_t *limits,
                      int launched, pid_t launcher, int *created, broker_error_t *err);
/*  The tenant of the session with this id or name: "" for none (an operator's), NULL when
 *  there is no such session. Borrowed, until the session ends. tenant (NULL: "") is the
 *  session's, made by broker_create and kept in its record. */
const char *broker_tenant(broker_t *self, const char *id_or_name);
/*  What tenant's live sessions have: how many, the sum of their memory and CPU limits. */
tenants_usage_t broker_usage(broker_t *self, const char *tenant);
/*  Give the session new CURVE keys: its sockets refuse the old ones and cut the connections
 *  made with them; its connection file is written again. Its info, or NULL with *err
 *  (NoSuchSession; BadRequest: not a CURVE session). */
json_t *broker_rekey(broker_t *self, const char *id_or_name, broker_error_t *err);
/*  Fork session src (id or name) into a new session named name, with limits: its kernel
 *  starts with a copy of src's namespace (src's kernel saves it and serves on; an evicted
 *  src's snapshot is read) and its workspace a copy of src's files. The first call starts
 *  the save and answers NULL with *pending = 1: call again, with the same arguments, once
 *  broker_on_settled's listener is called, for the answer. The fork's info (new reference)
 *  and *lost (new reference: the names and files not copied), or NULL with *err:
 *  NoSuchSession, SessionExists, SessionBusy (src is neither idle nor evicted),
 *  TooManySessions, ForkFailed (its state could not be had), or create's errors. One fork
 *  at a time. */
json_t *broker_fork(broker_t *self, const char *src, const char *name, const reslimits_t *limits,
                    json_t **lost, int *pending, broker_error_t *err);
/*  The limits of the session with this id or name into *out: 0, or -1 when there is none. */
int broker_limits_of(broker_t *self, const char *id_or_name, reslimits_t *out);
/*  Bring back the sessions an earlier kenneld left in the state directory. Call once, before
 *  serving. */
void broker_restore(broker_t *self);
/*  Ask every idle session's kernel to save its state (kenneld is stopping). Returns how many
 *  saves are under way; broker_saving says how many are still running. */
int broker_save_all(broker_t *self);
int broker_saving(const broker_t *self);
/*  Info of the session with this id or name: a new reference, or NULL when there is none, or
 *  NULL and *pending = 1 when its memory is being measured (off the loop): ask again once
 *  broker_on_settled's listener is called. */
json_t *broker_info(broker_t *self, const char *id_or_name, int *pending);
/*  A new JSON array of every session's info, oldest first; or NULL and *pending = 1, as for
 *  broker_info. */
json_t *broker_list(broker_t *self, int *pending);
/*  End the session with this id or name. 0, or -1 when there is none. */
int broker_end(broker_t *self, const char *id_or_name);
/*  The limits sessions get unless they ask otherwise. */
reslimits_t broker_default_limits(const broker_t *self);
/*  A new JSON object for stats_reply: status, sessions, max_sessions, sandbox layers, limits. */
json_t *broker_stats(const broker_t *self);
/*  The workspace directory (into out) and the kernel's host ids of a session. 0; 1 when the
 *  session's workspace image is still being made (ask again soon); or -1 with err
 *  (NoSuchSession, or DiskUnavailable when its image could not be mounted). */
int broker_workspace(broker_t *self, const char *id_or_name, char *out, size_t out_len,
                     uid_t *uid, gid_t *gid, broker_error_t *err);
/*  fn(arg) is called whenever a call that waited may answer otherwise: a workspace that
 *  broker_workspace answered 1 for is mounted or failed, or its session ended; a measure that
 *  broker_info or broker_list was pending on is done. It may run inside a broker call
 *  (broker_end), so it must not call the broker: it schedules. One listener; NULL for none. */
typedef void broker_notify_fn(void *arg);
void broker_on_settled(broker_t *self, broker_notify_fn *fn, void *arg);
/*  Cluster (cluster.c): a new array of {name, id, kernel} of every session (kernel: one runs),
 *  and in *busy how many are running a cell or saving. */
json_t *broker_held(broker_t *self, int *busy);
/*  Stop serving a session but keep its directory (another node takes it). 0, or -1: none. */
int broker_release(broker_t *self, const char *id_or_name);
/*  Serve the session whose directory (named after its id) another node left in ours, as
 *  broker_restore does; its next cell is told notice (may be NULL). Its info (new reference),
 *  or NULL when it could not be restored (the log says why). */
json_t *broker_adopt(broker_t *self, const char *dir, const char *id, const char *notice);
/*  1 when a session has this id or name, else 0. */
int broker_has(broker_t *self, const char *id_or_name);
/*  Number of live sessions. */
size_t broker_size(const broker_t *self);

#endif
