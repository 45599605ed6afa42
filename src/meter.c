/*  meter: a worker thread and the one job on it; the job copies the ids it measures, so it
 *  holds nothing of the sessions, which may end meanwhile. */
#include "meter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spawner.h"
#include "util.h"
#include "worker.h"

typedef struct {
    char id[40];
    pid_t pid;
    long long pss, uss;
    int measured;
} mem_entry_t;

typedef struct mem_job {
    meter_t *meter;
    int for_list;
    long long budget_ms; /* stop after the session that passes it; 0: none */
    size_t n;
    mem_entry_t e[];
} mem_job_t;

struct meter {
    worker_t *worker;
    meter_ops_t ops;
    void *ctx;
    mem_job_t *job;          /* the measure under way, or NULL */
    int list_done;           /* a listing's measure is over: the next listing answers */
    char info_done[40];      /* the session whose own measure is over: its info answers,
                              * however long the retry took to come (or "") */
};

meter_t *meter_new(loop_t *loop, const meter_ops_t *ops, void *ctx)
{
    meter_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->ops = *ops;
    self->ctx = ctx;
    self->worker = worker_new(loop);
    if (!self->worker) {
        free(self);
        return NULL;
    }
    return self;
}

void meter_destroy(meter_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    worker_destroy(&(*self_p)->worker);
    free(*self_p);
    *self_p = NULL;
}

/*  On the meter's thread: touches nothing but the job. */
static void s_mem_run(void *arg)
{
    mem_job_t *j = arg;
    long long t0 = util_now_ms();
    for (size_t i = 0; i < j->n; i++) {
        if (j->budget_ms && i > 0 && util_now_ms() - t0 >= j->budget_ms)
            break;
        spawner_tree_memory(j->e[i].pid, &j->e[i].pss, &j->e[i].uss);
        j->e[i].measured = 1;
    }
}

static void s_mem_done(void *arg)
{
    mem_job_t *j = arg;
    meter_t *self = j->meter;
    self->info_done[0] = '\0';
    for (size_t i = 0; i < j->n; i++) {
        if (!j->e[i].measured ||
            !self->ops.measured(self->ctx, j->e[i].id, j->e[i].pid, j->e[i].pss, j->e[i].uss))
            continue;
        if (!j->for_list)
            snprintf(self->info_done, sizeof self->info_done, "%s", j->e[i].id);
    }
    self->job = NULL;
    self->list_done = j->for_list;
    free(j);
    self->ops.done(self->ctx);
}

int meter_start(meter_t *self, const meter_kernel_t *kernels, size_t n, int for_list,
                long long budget_ms)
{
    mem_job_t *j = calloc(1, sizeof *j + n * sizeof j->e[0]);
    if (!j)
        return -1;
    j->meter = self;
    j->for_list = for_list;
    j->budget_ms = budget_ms;
    j->n = n;
    for (size_t i = 0; i < n; i++) {
        snprintf(j->e[i].id, sizeof j->e[i].id, "%s", kernels[i].id);
        j->e[i].pid = kernels[i].pid;
    }
    if (worker_submit(self->worker, s_mem_run, s_mem_done, j) < 0) {
        free(j);
        return -1;
    }
    self->job = j;
    return 0;
}

int meter_busy(const meter_t *self)
{
    return self->job != NULL;
}

int meter_take_list(meter_t *self)
{
    int done = self->list_done;
    self->list_done = 0;
    return done;
}

int meter_take_info(meter_t *self, const char *id)
{
    if (strcmp(self->info_done, id) != 0)
        return 0;
    self->info_done[0] = '\0';
    return 1;
}
