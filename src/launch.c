/*  launch: the uid slots are a byte each (taken or not); the table grows only for a restored
 *  session whose slot is past its end. */
#include "launch.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox.h"

struct launch {
    launch_cfg_t cfg;
    unsigned char *slots; /* slots[n] = 1 while a session (or a pooled kernel) runs as
                           * uid_base + n */
    size_t nslots;
};

launch_t *launch_new(const launch_cfg_t *cfg, size_t nslots)
{
    launch_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->cfg = *cfg;
    self->nslots = nslots;
    self->slots = calloc(nslots ? nslots : 1, 1);
    if (!self->slots) {
        free(self);
        return NULL;
    }
    return self;
}

void launch_destroy(launch_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->slots);
    free(*self_p);
    *self_p = NULL;
}

int launch_slot_take(launch_t *self, long want, size_t *slot)
{
    size_t i = 0;
    if (want >= 0 && (size_t)want < self->nslots && !self->slots[want])
        i = (size_t)want;
    else
        while (i < self->nslots && self->slots[i])
            i++;
    if (i >= self->nslots)
        return -1;
    self->slots[i] = 1;
    *slot = i;
    return 0;
}

void launch_slot_free(launch_t *self, size_t slot)
{
    assert(slot < self->nslots);
    self->slots[slot] = 0;
}

int launch_slot_grow(launch_t *self, size_t slot)
{
    if (slot < self->nslots)
        return 0;
    unsigned char *grown = realloc(self->slots, slot + 1);
    if (!grown)
        return -1;
    memset(grown + self->nslots, 0, slot + 1 - self->nslots);
    self->slots = grown;
    self->nslots = slot + 1;
    return 0;
}

int launch_slot_taken(const launch_t *self, size_t slot)
{
    return slot < self->nslots && self->slots[slot];
}

void launch_ids(const launch_t *self, size_t slot, uid_t *uid, gid_t *gid)
{
    int own = !self->cfg.sandbox || self->cfg.own_ids;
    *uid = own ? getuid() : (uid_t)(self->cfg.uid_base + slot);
    *gid = own ? getgid() : (gid_t)(self->cfg.uid_base + slot);
}

void launch_env(const launch_t *self, const char *workspace, const char *dir, launch_env_t env)
{
    const char *home = self->cfg.sandbox ? SANDBOX_WORKSPACE : workspace;
    /* IPython's profile and matplotlib's cache go to scratch space, not the workspace. */
    const char *scratch = self->cfg.sandbox ? "/tmp" : dir;
    snprintf(env[0], sizeof env[0], "PATH=/usr/local/bin:/usr/bin:/bin");
    snprintf(env[1], sizeof env[1], "LANG=C.UTF-8");
    snprintf(env[2], sizeof env[2], "HOME=%s", home);
    snprintf(env[3], sizeof env[3], "IPYTHONDIR=%s/.ipython", scratch);
    snprintf(env[4], sizeof env[4], "MPLCONFIGDIR=%s/.matplotlib", scratch);
}

void launch_cold(const launch_t *self, const char *workspace, const char *dir, size_t slot,
                 const reslimits_t *limits, launch_cmd_t *l)
{
    const launch_cfg_t *cfg = &self->cfg;
    size_t a = 0, b = 0;
#define ARG(x) (assert(a + 1 < sizeof l->argv / sizeof l->argv[0]), l->argv[a++] = (char *)(x))
#define FMT(...) (assert(b < sizeof l->buf / sizeof l->buf[0]), snprintf(l->buf[b], sizeof l->buf[b], __VA_ARGS__), l->buf[b++])
    uid_t uid;
    gid_t gid;
    launch_ids(self, slot, &uid, &gid);
    const char *kernel_dir = cfg->kernel_dir;
    if (cfg->sandbox) {
        ARG(cfg->init_path);
        ARG("--workspace"), ARG(workspace);
        ARG("--kernel-dir"), ARG(cfg->kernel_dir);
        ARG("--uid"), ARG(FMT("%u", (unsigned)uid)), ARG("--gid"), ARG(FMT("%u", (unsigned)gid));
        ARG("--tmp"), ARG(FMT("%llu", limits->tmp_bytes));
        ARG("--as"), ARG(FMT("%llu", limits->cg.memory_bytes));
        ARG("--fsize"), ARG(FMT("%llu", limits->disk_bytes)); /* 0: none */
        ARG("--nproc"), ARG(FMT("%lu", limits->cg.pids));
        ARG("--nofile"), ARG(FMT("%lu", limits->nofile));
        for (size_t i = 0; i < cfg->nbinds && i < SANDBOX_MAX_BINDS; i++)
            ARG("--ro-bind"), ARG(FMT("%s=%s", cfg->binds[i].inside, cfg->binds[i].host));
        ARG("--");
        kernel_dir = SANDBOX_KERNEL_DIR;
    }
    ARG(cfg->python);
    /* -I: no user site, no PYTHON* variables, no script directory on sys.path, so nothing
     * planted in the workspace runs at the next start. */
    ARG("-I");
    ARG(FMT("%s/kennel_kernel.py", kernel_dir));
    ARG("--pipe-fd"), ARG("3");
    l->argv[a] = NULL;
    launch_env(self, workspace, dir, l->env);
    for (size_t e = 0; e < LAUNCH_ENV_N; e++)
        l->envp[e] = l->env[e];
    l->envp[LAUNCH_ENV_N] = NULL;
#undef ARG
#undef FMT
}
