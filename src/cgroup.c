/*  cgroup: probing is by looking, not by assuming: /proc/self/cgroup says where kenneld is in
 *  each hierarchy, and a controller counts as available only if its files are there.
 *  v1 OOM kills are read from memory.oom_control (oom_kill), v2 from memory.events. */
#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

enum { C_MEMORY, C_PIDS, C_CPU, C_N };
static const char *const s_names[C_N] = {"memory", "pids", "cpu"};

/*  Where each controller's kenneld group is (a directory), and whether it is v2. */
static char s_base[C_N][PATH_MAX];
static int s_is_v2[C_N];
static int s_probed;
/*  "kennel-<tag>-": the names of this state directory's groups (cgroup_set_owner). */
static char s_prefix[32] = "kennel-";

struct cgroup {
    char dir[C_N][PATH_MAX];     /* "" where the controller is unavailable */
    char *procs[C_N + 1];        /* cgroup.procs paths, NULL-terminated, no duplicates */
};

static int s_exists(const char *dir, const char *file)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return access(path, F_OK) == 0;
}

static int s_write(const char *dir, const char *file, const char *value)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "we");
    if (!f)
        return -1;
    int rc = fputs(value, f) < 0 ? -1 : 0;
    if (fclose(f) != 0)
        rc = -1;
    return rc;
}

static long long s_read_ll(const char *dir, const char *file, const char *key)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *text = util_read_file(path, 8192, NULL);
    if (!text)
        return -1;
    long long v = -1;
    if (!key) {
        v = strtoll(text, NULL, 10);
    } else {
        size_t klen = strlen(key);
        for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
            if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
                v = strtoll(line + klen + 1, NULL, 10);
                break;
            }
    }
    free(text);
    return v;
}

/*  The file a group has when controller i is enabled in it. */
static const char *s_marker(int i)
{
    static const char *const v1[C_N] = {"memory.limit_in_bytes", "pids.max", "cpu.cfs_quota_us"};
    static const char *const v2[C_N] = {"memory.max", "pids.max", "cpu.max"};
    return s_is_v2[i] ? v2[i] : v1[i];
}

/*  v2 lets a group hand controllers to its children only while no process sits in it
 *  ("no internal processes"). A delegated kenneld (a systemd service with Delegate=yes) is
 *  in its group alone: it moves itself into a leaf, <group>/kenneld, so that its sessions'
 *  groups can be its siblings. 0 when moved. */
static int s_leave_for_leaf(const char *base)
{
    char leaf[PATH_MAX];
    snprintf(leaf, sizeof leaf, "%.4000s/kenneld", base);
    if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
        return -1;
    if (s_write(leaf, "cgroup.procs", "0") < 0) {
        rmdir(leaf);
        return -1;
    }
    return 0;
}

/*  Can kenneld make a group under s_base[i] with controller i in it? Tries, then cleans up. */
static int s_usable(int i)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.3000s/kennel-probe-%d", s_base[i], (int)getpid());
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return 0;
    if (s_is_v2[i]) {
        char plus[16];
        snprintf(plus, sizeof plus, "+%s", s_names[i]);
        if (s_write(s_base[i], "cgroup.subtree_control", plus) < 0 && errno == EBUSY &&
            s_leave_for_leaf(s_base[i]) == 0 &&
            s_write(s_base[i], "cgroup.subtree_control", plus) < 0) {
            /* Others share the group (a login session's scope): back where we were. */
            char leaf[PATH_MAX];
            snprintf(leaf, sizeof leaf, "%.4000s/kenneld", s_base[i]);
            (void)s_write(s_base[i], "cgroup.procs", "0");
            rmdir(leaf);
        }
    }
    int ok = s_exists(dir, s_marker(i));
    rmdir(dir);
    return ok;
}

int cgroup_probe(char *desc, size_t desc_len)
{
    char *self = util_read_file("/proc/self/cgroup", 65536, NULL);
    int found = 0;
    memset(s_base, 0, sizeof s_base);
    for (char *line = self ? strtok(self, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        /* "hierarchy-id:controller-list:path"; v2 is "0::path". */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        for (int i = 0; i < C_N; i++) {
            char dir[PATH_MAX];
            if (*ctrls == '\0') {
                /* v2: the unified hierarchy, if it offers this controller. */
                const char *mounts[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
                for (int m = 0; m < 2 && !s_base[i][0]; m++) {
                    snprintf(dir, sizeof dir, "%s%s", mounts[m], strcmp(path, "/") ? path : "");
                    char ctl[PATH_MAX + 32];
                    snprintf(ctl, sizeof ctl, "%s/cgroup.controllers", dir);
                    char *list = util_read_file(ctl, 4096, NULL);
                    if (list && strstr(list, s_names[i])) {
                        snprintf(s_base[i], PATH_MAX, "%s", dir);
                        s_is_v2[i] = 1;
                    }
                    free(list);
                }
            } else {
                char copy[256];
                snprintf(copy, sizeof copy, "%s", ctrls);
                for (char *save, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                    if (strcmp(t, s_names[i]) != 0 || s_base[i][0])
                        continue;
                    /* cpu may be mounted as cpu,cpuacct; find the directory that has it. */
                    const char *cands[] = {s_names[i], "cpu,cpuacct", "cpuacct,cpu"};
                    for (int k = 0; k < 3 && !s_base[i][0]; k++) {
                        snprintf(dir, sizeof dir, "/sys/fs/cgroup/%s%s", cands[k], strcmp(path, "/") ? path : "");
                        if (s_exists(dir, "cgroup.procs")) {
                            snprintf(s_base[i], PATH_MAX, "%s", dir);
                            s_is_v2[i] = 0;
                        }
                    }
                }
            }
        }
    }
    free(self);
    /* Found is not usable: kenneld must be able to make a group with the controller in it
     * (an unprivileged kenneld only can in a delegated subtree; in v2 the controller must
     * also be enabled for the children of kenneld's group). */
    char unusable[128] = "";
    for (int i = 0; i < C_N; i++)
        if (s_base[i][0] && !s_usable(i)) {
            size_t len = strlen(unusable);
            snprintf(unusable + len, sizeof unusable - len, " %s", s_names[i]);
            s_base[i][0] = '\0';
        }
    int n = snprintf(desc, desc_len, "cgroups:");
    for (int i = 0; i < C_N; i++) {
        if (s_base[i][0]) {
            found++;
            n += snprintf(desc + n, desc_len > (size_t)n ? desc_len - (size_t)n : 0, " %s (v%d)",
                          s_names[i], s_is_v2[i] ? 2 : 1);
        }
    }
    if (!found)
        n += snprintf(desc + n, desc_len > (size_t)n ? desc_len - (size_t)n : 0, " none");
    if (unusable[0])
        snprintf(desc + n, desc_len > (size_t)n ? desc_len - (size_t)n : 0,
                 " (not usable by kenneld:%s)", unusable);
    s_probed = 1;
    return found;
}

static int s_set_limits(cgroup_t *self, const cgroup_limits_t *lim)
{
    char v[64];
    const char *mem = self->dir[C_MEMORY], *pids = self->dir[C_PIDS], *cpu = self->dir[C_CPU];
    if (mem[0] && lim->memory_bytes) {
        snprintf(v, sizeof v, "%llu", lim->memory_bytes);
        if (s_is_v2[C_MEMORY]) {
            if (s_write(mem, "memory.max", v) < 0 || s_write(mem, "memory.swap.max", "0") < 0)
                if (errno != ENOENT)
                    return -1;
        } else {
            if (s_write(mem, "memory.limit_in_bytes", v) < 0)
                return -1;
            /* Swap counts too where swap accounting exists; otherwise there is no swap to use. */
            if (s_exists(mem, "memory.memsw.limit_in_bytes") && s_write(mem, "memory.memsw.limit_in_bytes", v) < 0)
                return -1;
        }
    }
    if (pids[0] && lim->pids) {
        snprintf(v, sizeof v, "%lu", lim->pids);
        if (s_write(pids, "pids.max", v) < 0)
            return -1;
    }
    if (cpu[0] && lim->cpus > 0) {
        long long quota = (long long)(lim->cpus * 100000);
        if (s_is_v2[C_CPU])
            snprintf(v, sizeof v, "%lld 100000", quota);
        else
            snprintf(v, sizeof v, "%lld", quota);
        if (s_is_v2[C_CPU] ? s_write(cpu, "cpu.max", v) < 0
                           : (s_write(cpu, "cpu.cfs_period_us", "100000") < 0 ||
                              s_write(cpu, "cpu.cfs_quota_us", v) < 0))
            return -1;
    }
    return 0;
}

int cgroup_set_background(cgroup_t *self, int on)
{
    const char *cpu = self->dir[C_CPU];
    if (!cpu[0])
        return 0;
    if (s_is_v2[C_CPU])
        return s_write(cpu, "cpu.weight", on ? "1" : "100");
    return s_write(cpu, "cpu.shares", on ? "2" : "1024");
}

/*  Kill every process listed in dir's cgroup.procs (v1 has no cgroup.kill). */
static void s_kill_all(const char *dir)
{
    if (s_exists(dir, "cgroup.kill") && s_write(dir, "cgroup.kill", "1") == 0)
        return;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    char *text = util_read_file(path, 1 << 20, NULL);
    for (char *t = text ? strtok(text, "\n") : NULL; t; t = strtok(NULL, "\n"))
        kill((pid_t)atoi(t), SIGKILL);
    free(text);
}

/*  Is dirs[i] one of dirs[0..i-1]? (cgroup v2: one directory for every controller.) */
static int s_repeated(char (*dirs)[PATH_MAX], int i)
{
    for (int j = 0; j < i; j++)
        if (strcmp(dirs[j], dirs[i]) == 0)
            return 1;
    return 0;
}

static void s_probe_once(void)
{
    if (!s_probed) {
        char desc[128];
        cgroup_probe(desc, sizeof desc);
    }
}

/*  Groups still busy when they were removed: a killed process leaves its group only once it
 *  has run its exit, which on a loaded machine can take longer than kenneld may wait on its
 *  loop (it waited up to 100 ms, then left the group behind). Each is tried again, killing
 *  what is in it, from a timer of kenneld's (cgroup_on_pending), for up to a minute. */
#define PENDING_MAX 256
#define PENDING_TRIES 300
static struct {
    char *dir;
    int tries;
} s_pending[PENDING_MAX];
static size_t s_npending;
static void (*s_arm)(void *);
static void *s_arm_arg;

/*  Kill what is in dir and remove it: 0 when it is gone, else -1 with errno (EBUSY: a
 *  process has yet to leave). */
static int s_try_remove(const char *dir)
{
    s_kill_all(dir);
    return rmdir(dir) == 0 || errno == ENOENT ? 0 : -1;
}

static void s_defer(const char *dir)
{
    for (size_t i = 0; i < s_npending; i++)
        if (strcmp(s_pending[i].dir, dir) == 0)
            return;
    char *copy = s_npending < PENDING_MAX ? strdup(dir) : NULL;
    if (!copy) {
        LOG_W("cannot remove %s: a process is still in it, and %zu other groups wait", dir,
              s_npending);
        return;
    }
    s_pending[s_npending].dir = copy;
    s_pending[s_npending++].tries = 0;
    if (s_arm)
        s_arm(s_arm_arg);
}

/*  A group made again under a name that waits for removal is in use: no longer waiting. */
static void s_undefer(const char *dir)
{
    for (size_t i = 0; i < s_npending; i++)
        if (strcmp(s_pending[i].dir, dir) == 0) {
            free(s_pending[i].dir);
            s_pending[i] = s_pending[--s_npending];
            return;
        }
}

void cgroup_on_pending(void (*arm)(void *), void *arg)
{
    s_arm = arm;
    s_arm_arg = arg;
    if (arm && s_npending) /* what cgroup_sweep left, say */
        arm(arg);
}

size_t cgroup_retry(void)
{
    size_t kept = 0;
    for (size_t i = 0; i < s_npending; i++) {
        if (s_try_remove(s_pending[i].dir) == 0) {
            free(s_pending[i].dir);
        } else if (errno != EBUSY || ++s_pending[i].tries >= PENDING_TRIES) {
            PLOG_W("gave up removing %s", s_pending[i].dir);
            free(s_pending[i].dir);
        } else {
            s_pending[kept++] = s_pending[i];
        }
    }
    s_npending = kept;
    return kept;
}

/*  Kill what is in dir and remove it, waiting up to ~10 ms for its processes to leave;
 *  else it is tried again later (s_defer). 0 when removed, 1 when left for later, -1 when
 *  it cannot be removed. */
static int s_remove(const char *dir)
{
    for (int tries = 0; s_try_remove(dir) < 0; tries++) {
        if (errno != EBUSY) {
            PLOG_W("rmdir(%s)", dir);
            return -1;
        }
        if (tries >= 5) {
            s_defer(dir);
            return 1;
        }
        usleep(2000);
    }
    return 0;
}

cgroup_t *cgroup_create(const char *name, const cgroup_limits_t *limits)
{
    s_probe_once();
    cgroup_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    size_t np = 0;
    for (int i = 0; i < C_N; i++) {
        if (!s_base[i][0])
            continue;
        snprintf(self->dir[i], PATH_MAX, "%.3000s/%s%.64s", s_base[i], s_prefix, name);
        if (s_repeated(self->dir, i))
            continue;
        if (mkdir(self->dir[i], 0755) < 0) {
            if (errno != EEXIST)
                goto fail;
            /* Left by a kenneld that died, or the last kernel's and waiting to be removed:
             * whatever still runs in it goes first. */
            s_undefer(self->dir[i]);
            s_kill_all(self->dir[i]);
        }
        if (s_is_v2[i]) {
            /* Enable the controller for our children; harmless if it already is. */
            char plus[16];
            snprintf(plus, sizeof plus, "+%s", s_names[i]);
            (void)s_write(s_base[i], "cgroup.subtree_control", plus);
        }
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/cgroup.procs", self->dir[i]);
        if (!(self->procs[np++] = strdup(path)))
            goto fail;
    }
    if (s_set_limits(self, limits) < 0)
        goto fail;
    return self;
fail:;
    int saved = errno;
    cgroup_destroy(&self);
    errno = saved;
    return NULL;
}

void cgroup_set_owner(const char *state_dir)
{
    /* FNV-1a: a name, not a secret; 48 bits keep two state directories' apart. */
    unsigned long long h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)state_dir; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    snprintf(s_prefix, sizeof s_prefix, "kennel-%012llx-", h & 0xffffffffffffULL);
}

const char *cgroup_prefix(void)
{
    return s_prefix;
}

int cgroup_sweep(void)
{
    s_probe_once();
    int removed = 0;
    size_t plen = strlen(s_prefix);
    for (int i = 0; i < C_N; i++) {
        DIR *d = s_base[i][0] && !s_repeated(s_base, i) ? opendir(s_base[i]) : NULL;
        if (!d)
            continue;
        for (struct dirent *e; (e = readdir(d));) {
            if (strncmp(e->d_name, s_prefix, plen) != 0 || e->d_type != DT_DIR)
                continue;
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%.3000s/%.255s", s_base[i], e->d_name);
            if (s_remove(dir) >= 0)
                removed++;
        }
        closedir(d);
    }
    return removed;
}

char *const *cgroup_procs_paths(const cgroup_t *self)
{
    return self->procs;
}

void cgroup_destroy(cgroup_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    cgroup_t *self = *self_p;
    for (int i = 0; i < C_N; i++) {
        if (s_repeated(self->dir, i) || !self->dir[i][0] || access(self->dir[i], F_OK) < 0)
            continue;
        (void)s_remove(self->dir[i]);
    }
    for (int i = 0; i < C_N; i++)
        free(self->procs[i]);
    free(self);
    *self_p = NULL;
}

void cgroup_stats(const cgroup_t *self, long long *memory_bytes, long long *peak_bytes,
                  long long *oom_kills)
{
    const char *mem = self->dir[C_MEMORY];
    *memory_bytes = *peak_bytes = *oom_kills = -1;
    if (!mem[0])
        return;
    if (s_is_v2[C_MEMORY]) {
        *memory_bytes = s_read_ll(mem, "memory.current", NULL);
        *peak_bytes = s_read_ll(mem, "memory.peak", NULL);
        *oom_kills = s_read_ll(mem, "memory.events", "oom_kill");
    } else {
        *memory_bytes = s_read_ll(mem, "memory.usage_in_bytes", NULL);
        *peak_bytes = s_read_ll(mem, "memory.max_usage_in_bytes", NULL);
        *oom_kills = s_read_ll(mem, "memory.oom_control", "oom_kill");
    }
}
