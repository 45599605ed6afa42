/*  Unit tests of the worker: jobs run off the loop's thread, one at a time and in order; their
 *  done callbacks run on the loop's thread, in the same order, after their run; the loop keeps
 *  turning while a job blocks; a done callback may queue another job; destroy lets queued
 *  jobs finish and calls their callbacks, and refuses jobs from then on. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../harness.h"
#include "loop.h"
#include "util.h"
#include "worker.h"

#define JOBS 50

typedef struct {
    pthread_t loop_thread;
    atomic_int running;     /* jobs inside run at once */
    atomic_int max_running;
    int ran[JOBS];          /* order run was called in */
    atomic_int nran;
    int done[JOBS];         /* order done was called in */
    int ndone;
    int wrong_thread;       /* run on the loop's thread, or done off it */
    int done_before_run;
    int stop_after;         /* stop the loop after this many done callbacks */
    loop_t *loop;
} trace_t;

typedef struct {
    trace_t *t;
    int tag;
    int has_run;
    useconds_t sleep_us;
} item_t;

static void s_run(void *arg)
{
    item_t *it = arg;
    trace_t *t = it->t;
    if (pthread_equal(pthread_self(), t->loop_thread))
        t->wrong_thread = 1;
    int now = atomic_fetch_add(&t->running, 1) + 1;
    if (now > atomic_load(&t->max_running))
        atomic_store(&t->max_running, now);
    if (it->sleep_us)
        usleep(it->sleep_us);
    t->ran[atomic_fetch_add(&t->nran, 1)] = it->tag;
    it->has_run = 1;
    atomic_fetch_sub(&t->running, 1);
}

static void s_done(void *arg)
{
    item_t *it = arg;
    trace_t *t = it->t;
    if (!pthread_equal(pthread_self(), t->loop_thread))
        t->wrong_thread = 1;
    if (!it->has_run)
        t->done_before_run = 1;
    t->done[t->ndone++] = it->tag;
}

static int s_stop_when_done(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    trace_t *t = arg;
    return t->ndone >= t->stop_after ? -1 : 0;
}

static int s_stop(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    (void)arg;
    return -1;
}

TEST(jobs_run_in_order_off_the_loop_and_finish_on_it)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    CHECK(w != NULL);
    static trace_t t;
    t.loop_thread = pthread_self();
    t.stop_after = JOBS;
    static item_t items[JOBS];
    for (int i = 0; i < JOBS; i++) {
        items[i] = (item_t){&t, i, 0, (useconds_t)(i % 3 == 0 ? 200 : 0)};
        CHECK_EQ_INT(worker_submit(w, s_run, s_done, &items[i]), 0);
    }
    loop_timer(loop, 1, 0, s_stop_when_done, &t);
    loop_timer(loop, 10000, 1, s_stop, NULL); /* a bound, should the callbacks never come */
    loop_run(loop);
    CHECK_EQ_INT(t.ndone, JOBS);
    CHECK_EQ_INT(atomic_load(&t.max_running), 1);
    CHECK_EQ_INT(t.wrong_thread, 0);
    CHECK_EQ_INT(t.done_before_run, 0);
    for (int i = 0; i < JOBS; i++) {
        CHECK_EQ_INT(t.ran[i], i);
        CHECK_EQ_INT(t.done[i], i);
    }
    worker_destroy(&w);
    CHECK(w == NULL);
    loop_destroy(&loop);
}

/*  A job that blocks for 300 ms does not hold up the loop: a 10 ms repeating timer keeps
 *  firing meanwhile. */
typedef struct {
    int ticks;
    int finished;
} blocked_t;

static void s_block(void *arg)
{
    (void)arg;
    usleep(300 * 1000);
}

static void s_block_done(void *arg)
{
    ((blocked_t *)arg)->finished = 1;
}

static int s_tick(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    blocked_t *b = arg;
    b->ticks++;
    return b->finished ? -1 : 0;
}

TEST(a_blocking_job_leaves_the_loop_turning)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    blocked_t b = {0, 0};
    CHECK_EQ_INT(worker_submit(w, s_block, s_block_done, &b), 0);
    loop_timer(loop, 10, 0, s_tick, &b);
    loop_timer(loop, 10000, 1, s_stop, NULL);
    long long t0 = util_now_ms();
    loop_run(loop);
    CHECK_EQ_INT(b.finished, 1);
    CHECK(util_now_ms() - t0 >= 290);
    /* 30 ticks fit in 300 ms; a loop held by the job would see one or two. */
    CHECK(b.ticks >= 5);
    worker_destroy(&w);
    loop_destroy(&loop);
}

TEST(destroy_finishes_queued_jobs)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    static trace_t t;
    t.loop_thread = pthread_self();
    static item_t items[5];
    for (int i = 0; i < 5; i++) {
        items[i] = (item_t){&t, i, 0, 20000};
        CHECK_EQ_INT(worker_submit(w, s_run, s_done, &items[i]), 0);
    }
    /* The loop never ran: every callback comes from destroy, after every run. */
    worker_destroy(&w);
    CHECK_EQ_INT(t.ndone, 5);
    CHECK_EQ_INT(atomic_load(&t.nran), 5);
    CHECK_EQ_INT(t.done_before_run, 0);
    CHECK_EQ_INT(t.wrong_thread, 0);
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(t.done[i], i);
    loop_destroy(&loop);
}

/*  A done callback may queue the next job (a chain of steps). */
typedef struct {
    worker_t *w;
    int left;
    int finished;
} chain_t;

static void s_nothing(void *arg)
{
    (void)arg;
}

static void s_chain_done(void *arg)
{
    chain_t *c = arg;
    if (--c->left > 0)
        CHECK_EQ_INT(worker_submit(c->w, s_nothing, s_chain_done, c), 0);
    else
        c->finished = 1;
}

static int s_stop_chain(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    return ((chain_t *)arg)->finished ? -1 : 0;
}

TEST(a_done_callback_may_submit)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    chain_t c = {w, 10, 0};
    CHECK_EQ_INT(worker_submit(w, s_nothing, s_chain_done, &c), 0);
    loop_timer(loop, 1, 0, s_stop_chain, &c);
    loop_timer(loop, 10000, 1, s_stop, NULL);
    loop_run(loop);
    CHECK_EQ_INT(c.finished, 1);
    CHECK_EQ_INT(c.left, 0);
    worker_destroy(&w);
    loop_destroy(&loop);
}

/*  During destroy, a done callback's submit is refused (the thread is gone). */
typedef struct {
    worker_t *w;
    int rc, err;
} refused_t;

static void s_refused_done(void *arg)
{
    refused_t *r = arg;
    errno = 0;
    r->rc = worker_submit(r->w, s_nothing, s_refused_done, r);
    r->err = errno;
}

TEST(a_submit_during_destroy_is_refused)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    refused_t r = {w, 0, 0};
    CHECK_EQ_INT(worker_submit(w, s_nothing, s_refused_done, &r), 0);
    worker_destroy(&w);
    CHECK_EQ_INT(r.rc, -1);
    CHECK_EQ_INT(r.err, ECANCELED);
    loop_destroy(&loop);
}

int main(void)
{
    RUN(jobs_run_in_order_off_the_loop_and_finish_on_it);
    RUN(a_blocking_job_leaves_the_loop_turning);
    RUN(destroy_finishes_queued_jobs);
    RUN(a_done_callback_may_submit);
    RUN(a_submit_during_destroy_is_refused);
    return harness_done();
}
