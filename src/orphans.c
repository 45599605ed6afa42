/*  orphans: a list, found by pidfd when one is readable. */
#include "orphans.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <czmq.h>

#include "disk.h"
#include "log.h"

struct orphans {
    loop_t *loop;
    zygote_t *zygote;
    sweeper_t *sweeper;
    zlistx_t *list;          /* orphan_t*: killed kernels waiting to be reaped */
};

orphans_t *orphans_new(loop_t *loop, zygote_t *zygote, sweeper_t *sweeper)
{
    orphans_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    self->zygote = zygote;
    self->sweeper = sweeper;
    self->list = zlistx_new();
    if (!self->list) {
        free(self);
        errno = ENOMEM;
        return NULL;
    }
    return self;
}

static void s_finish(orphans_t *self, orphan_t *o)
{
    spawner_release(&o->proc);
    cgroup_destroy(&o->cg);
    if (o->mount[0] && disk_unmount(o->mount, 0) < 0)
        PLOG_E("umount(%s)", o->mount);
    if (o->dir[0])
        sweeper_remove(self->sweeper, o->remover, o->dir);
    free(o);
}

static int s_on_orphan(loop_t *loop, int fd, int revents, void *arg)
{
    (void)revents;
    orphans_t *self = arg;
    for (orphan_t *o = zlistx_first(self->list); o; o = zlistx_next(self->list)) {
        if (o->proc.pidfd != fd)
            continue;
        char how[128];
        if (spawner_reap(&o->proc, how, sizeof how) != 0) {
            loop_fd_end(loop, fd);
            zlistx_detach_cur(self->list);
            s_finish(self, o);
        }
        break;
    }
    return 0;
}

int orphans_add(orphans_t *self, const orphan_t *given)
{
    orphan_t *o = malloc(sizeof *o);
    if (!o) {
        LOG_E("out of memory");
        exit(1);
    }
    *o = *given;
    if (o->ticket) {
        /* Killed once the zygote says which pid it is (orphans_collect). */
        zlistx_add_end(self->list, o);
        return 0;
    }
    if (o->proc.pidfd < 0) {
        s_finish(self, o);
        return 0;
    }
    spawner_signal(&o->proc, SIGKILL);
    zlistx_add_end(self->list, o);
    return loop_fd(self->loop, o->proc.pidfd, LOOP_IN, s_on_orphan, self);
}

void orphans_collect(orphans_t *self)
{
    orphan_t *o = zlistx_first(self->list);
    while (o) {
        char why[256];
        int rc = !o->ticket ? 0 : zygote_take(self->zygote, o->ticket, &o->proc, why, sizeof why);
        if (rc == 0) {
            o = zlistx_next(self->list);
            continue;
        }
        o->ticket = 0;
        if (rc > 0) {
            spawner_signal(&o->proc, SIGKILL);
            if (loop_fd(self->loop, o->proc.pidfd, LOOP_IN, s_on_orphan, self) < 0)
                PLOG_W("cannot watch a killed kernel's pidfd");
            o = zlistx_next(self->list);
        } else {
            zlistx_detach_cur(self->list);
            s_finish(self, o);
            o = zlistx_first(self->list);
        }
    }
}

int orphans_has(const orphans_t *self, pid_t pid)
{
    for (orphan_t *o = zlistx_first(self->list); o; o = zlistx_next(self->list))
        if (o->proc.pid == pid)
            return 1;
    return 0;
}

void orphans_strays(orphans_t *self, orphans_known_fn *known, void *ctx)
{
    pid_t kids[4096];
    int n = spawner_children(kids, sizeof kids / sizeof kids[0]);
    for (int i = 0; i < n; i++) {
        if (known(ctx, kids[i]) || orphans_has(self, kids[i]))
            continue;
        orphan_t *o = calloc(1, sizeof *o);
        if (!o || spawner_adopt(kids[i], &o->proc) < 0) {
            if (o)
                PLOG_W("a kernel the zygote never named (pid %d)", (int)kids[i]);
            free(o);
            continue;
        }
        LOG_W("a kernel the zygote never named (pid %d): killed", (int)kids[i]);
        spawner_signal(&o->proc, SIGKILL);
        zlistx_add_end(self->list, o);
        if (loop_fd(self->loop, o->proc.pidfd, LOOP_IN, s_on_orphan, self) < 0)
            PLOG_W("a kernel the zygote never named (pid %d): cannot watch it", (int)kids[i]);
    }
}

/*  Wait (bounded) for a killed process and release it. Used only at shutdown, when the loop
 *  no longer runs. */
static void s_reap_blocking(spawner_proc_t *p)
{
    char how[128];
    for (int i = 0; i < 500 && spawner_reap(p, how, sizeof how) == 0; i++)
        usleep(2000);
}

void orphans_destroy(orphans_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    orphans_t *self = *self_p;
    orphan_t *o;
    while ((o = zlistx_detach(self->list, NULL))) {
        loop_fd_end(self->loop, o->proc.pidfd);
        s_reap_blocking(&o->proc);
        s_finish(self, o);
    }
    zlistx_destroy(&self->list);
    free(self);
    *self_p = NULL;
}
