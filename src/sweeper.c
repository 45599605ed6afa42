/*  sweeper: one worker thread; each removal is a job that touches only itself and the stop
 *  flag. */
#include "sweeper.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/resource.h>
#include <sys/syscall.h>

#include "log.h"
#include "statedir.h"

struct sweeper {
    const char *state_dir;
    worker_t *worker;        /* removes trashed directories, off the loop and out of the
                              * worker's way */
    atomic_int stop;         /* set at kenneld's end: what is left in the trash waits for the
                              * next kenneld */
};

/*  The removal of a directory, on the sweeper (or, behind a snapshot still being written
 *  there, on the worker). */
typedef struct {
    const atomic_int *stop;
    char path[PATH_MAX];
    int background;          /* on the sweeper: at the lowest CPU and I/O priority */
    int rc, err;
} sweep_job_t;

#define IOPRIO_CLASS_BE 2
#define IOPRIO_VALUE(class, level) ((class) << 13 | (level))

static void s_sweep_run(void *arg)
{
    sweep_job_t *j = arg;
    /* Removing a million files is seconds of the kernel's time: on two cores it must not
     * take the loop's thread's share (Linux gives each thread its own nice and I/O class). */
    if (j->background) {
        (void)setpriority(PRIO_PROCESS, 0, 19);
        (void)syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, 0,
                      IOPRIO_VALUE(IOPRIO_CLASS_BE, 7));
    }
    j->rc = statedir_remove_tree_until(j->path, j->stop);
    j->err = j->rc < 0 ? errno : 0;
}

static void s_sweep_done(void *arg)
{
    sweep_job_t *j = arg;
    if (j->rc < 0 && j->err != ECANCELED)
        LOG_W("remove %s: %s", j->path, strerror(j->err));
    free(j);
}

void sweeper_remove(sweeper_t *self, worker_t *behind, const char *dir)
{
    sweep_job_t *j = calloc(1, sizeof *j);
    if (j) {
        j->stop = &self->stop;
        j->background = !behind;
        snprintf(j->path, sizeof j->path, "%s", dir);
        if (worker_submit(behind ? behind : self->worker, s_sweep_run, s_sweep_done, j) == 0)
            return;
        free(j);
    }
    if (statedir_remove_tree(dir) < 0)
        PLOG_W("remove %s", dir);
}

void sweeper_trash(sweeper_t *self, const char *dir, char *out, size_t out_len)
{
    if (statedir_trash(self->state_dir, dir, out, out_len) == 0)
        return;
    PLOG_W("cannot move %s to %s/trash; it is removed where it is", dir, self->state_dir);
    snprintf(out, out_len, "%s", dir);
}

void sweeper_discard(sweeper_t *self, const char *dir)
{
    char path[PATH_MAX];
    sweeper_trash(self, dir, path, sizeof path);
    sweeper_remove(self, NULL, path);
}

/*  What a kenneld before this one left in the trash. */
static void s_sweep_trash(sweeper_t *self)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/trash", self->state_dir);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (snprintf(path, sizeof path, "%s/trash/%s", self->state_dir, e->d_name) <
            (int)sizeof path)
            sweeper_remove(self, NULL, path);
    }
    closedir(d);
}

sweeper_t *sweeper_new(loop_t *loop, const char *state_dir)
{
    sweeper_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->state_dir = state_dir;
    self->worker = worker_new(loop);
    if (!self->worker) {
        free(self);
        return NULL;
    }
    s_sweep_trash(self);
    return self;
}

void sweeper_stop(sweeper_t *self)
{
    atomic_store(&self->stop, 1);
}

void sweeper_destroy(sweeper_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sweeper_stop(*self_p);
    worker_destroy(&(*self_p)->worker);
    free(*self_p);
    *self_p = NULL;
}
