/*  launch: what a session's kernel runs as and with. Its host ids: one uid slot per session
 *  or pooled kernel, uid_base + slot, or kenneld's own ids when kenneld can map no other
 *  (unprivileged) or runs kernels unsandboxed. Its environment: an allowlist, nothing of
 *  kenneld's. And the command line of a cold start (kennel-init, then Python). Starts no
 *  process: the spawner and the zygote do. */
#ifndef KENNEL_LAUNCH_H
#define KENNEL_LAUNCH_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "reslimits.h"
#include "sandbox.h"

typedef struct {
    int sandbox;                  /* 0 only with --insecure-no-sandbox */
    int own_ids;                  /* unprivileged kenneld: every kernel maps to its own ids */
    unsigned long uid_base;       /* slot n's kernel runs as host uid uid_base + n */
    const char *python;           /* the interpreter that runs kernels */
    const char *kernel_dir;       /* where kennel_kernel.py lives */
    const char *init_path;        /* kennel-init, which builds the sandbox (--spawner exec) */
    const sandbox_bind_t *binds;  /* --site and --data: kennel-init's --ro-bind INSIDE=HOST */
    size_t nbinds;
} launch_cfg_t;

typedef struct launch launch_t;

/*  nslots uid slots, none taken. cfg's strings must outlive it. NULL with errno. */
launch_t *launch_new(const launch_cfg_t *cfg, size_t nslots);
void launch_destroy(launch_t **self_p);

/*  Take slot want if it is in the table and free (want < 0: any), else the first free one,
 *  into *slot. 0, or -1 when every slot is taken. */
int launch_slot_take(launch_t *self, long want, size_t *slot);
/*  Give a slot back. */
void launch_slot_free(launch_t *self, size_t slot);
/*  Make the table reach slot (a restored session's, from a kenneld with more slots). 0, or -1
 *  with errno. */
int launch_slot_grow(launch_t *self, size_t slot);
/*  1 when slot is taken, else 0. */
int launch_slot_taken(const launch_t *self, size_t slot);

/*  The host ids of slot's kernel. */
void launch_ids(const launch_t *self, size_t slot, uid_t *uid, gid_t *gid);

/*  A kernel's environment, "NAME=value" each. workspace and dir (the session's directory)
 *  serve only an unsandboxed kernel, which sees the host's paths; dir may then be NULL. */
#define LAUNCH_ENV_N 5
typedef char launch_env_t[LAUNCH_ENV_N][PATH_MAX + 32];
void launch_env(const launch_t *self, const char *workspace, const char *dir, launch_env_t env);

/*  The command and environment of a cold-started kernel. Sandboxed, kennel-init builds the
 *  walls and runs Python inside them; with --insecure-no-sandbox Python runs directly, as
 *  kenneld's user. argv and envp point into the struct. */
typedef struct {
    char *argv[32 + 2 * SANDBOX_MAX_BINDS];
    char *envp[LAUNCH_ENV_N + 1];
    launch_env_t env;
    char buf[12 + SANDBOX_MAX_BINDS][PATH_MAX + 32];
} launch_cmd_t;
void launch_cold(const launch_t *self, const char *workspace, const char *dir, size_t slot,
                 const reslimits_t *limits, launch_cmd_t *out);

#endif
