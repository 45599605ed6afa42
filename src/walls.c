/*  walls: the sentences are the documentation an operator reads at start; docs/sandbox.md,
 *  "Running kenneld unprivileged", says the same at length. */
#include "walls.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

void walls_add(walls_t *self, const char *fmt, ...)
{
    if (self->n == WALLS_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(self->text[self->n], sizeof self->text[self->n], fmt, ap);
    va_end(ap);
    self->list[self->n] = self->text[self->n];
    self->n++;
    self->list[self->n] = NULL;
}

void walls_add_identity(walls_t *self)
{
    if (geteuid() == 0)
        return;
    unsigned uid = (unsigned)getuid(), gid = (unsigned)getgid();
    walls_add(self,
              "a host uid per session: kenneld is not root, so every kernel maps to its own uid "
              "%u and gid %u. Sessions stay apart by their own user, pid, mount, ipc, net and "
              "uts namespaces, but a kernel that escaped them would act as kenneld (its state "
              "directory, its manager key, every session's files); and RLIMIT_NPROC, still "
              "each session's own cap, also counts every session's processes against uid %u's "
              "limit, so sessions together can exhaust it",
              uid, gid, uid);
    gid_t groups[64];
    int n = getgroups(64, groups);
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof list - 16; i++)
        if (groups[i] != getgid())
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%u", len ? "," : "",
                                    (unsigned)groups[i]);
    if (len)
        walls_add(self,
                  "dropping supplementary groups: kernels keep kenneld's groups %s (an "
                  "unprivileged user namespace cannot drop them); run kenneld as a user "
                  "without supplementary groups",
                  list);
}

void walls_add_cgroups(walls_t *self, int ncg, const char *desc)
{
    if (ncg < 3)
        walls_add(self,
                  "cgroup controllers (found %s): where memory is missing, memory is capped per "
                  "process by RLIMIT_AS only; pids, by RLIMIT_NPROC only; cpu, not at all",
                  desc);
}

const char *const *walls_list(const walls_t *self)
{
    return self->list;
}
