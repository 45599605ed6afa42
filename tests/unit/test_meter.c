/*  Unit tests of the meter: a measure runs off the loop and reports each kernel it measured,
 *  then that it is over; busy while under way; a listing's end and a session's own measure
 *  are each taken once; a measure the session did not take leaves nothing to take. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "loop.h"
#include "meter.h"
#include "util.h"

typedef struct {
    int take;                /* what measured answers */
    int measured, done;
    char last_id[40];
    pid_t last_pid;
    long long pss, uss;
} owner_t;

static int s_measured(void *ctx, const char *id, pid_t pid, long long pss, long long uss)
{
    owner_t *o = ctx;
    o->measured++;
    snprintf(o->last_id, sizeof o->last_id, "%s", id);
    o->last_pid = pid;
    o->pss = pss;
    o->uss = uss;
    return o->take;
}

static void s_done(void *ctx)
{
    ((owner_t *)ctx)->done++;
}

static const meter_ops_t OPS = {s_measured, s_done};

static int s_until_done(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    owner_t *o = arg;
    return o->done ? -1 : 0;
}

/*  Turn the loop until the measure is over (5 s at most). */
static void s_wait(loop_t *loop, owner_t *o)
{
    long long deadline = util_now_ms() + 5000;
    int t = loop_timer(loop, 5, 0, s_until_done, o);
    while (!o->done && util_now_ms() < deadline)
        loop_run(loop);
    loop_timer_end(loop, t);
}

TEST(a_sessions_own_measure_is_taken_once)
{
    loop_t *loop = loop_new();
    owner_t o = {.take = 1};
    meter_t *m = meter_new(loop, &OPS, &o);
    CHECK(!meter_busy(m));
    meter_kernel_t k = {"a", getpid()};
    CHECK_EQ_INT(meter_start(m, &k, 1, 0, 0), 0);
    CHECK(meter_busy(m));
    s_wait(loop, &o);
    CHECK(!meter_busy(m));
    CHECK_EQ_INT(o.measured, 1);
    CHECK_EQ_INT(o.done, 1);
    CHECK_STR(o.last_id, "a");
    CHECK_EQ_INT(o.last_pid, getpid());
    CHECK(o.pss > 0 && o.uss > 0);
    CHECK_EQ_INT(meter_take_list(m), 0);
    CHECK_EQ_INT(meter_take_info(m, "b"), 0);
    CHECK_EQ_INT(meter_take_info(m, "a"), 1);
    CHECK_EQ_INT(meter_take_info(m, "a"), 0);
    meter_destroy(&m);
    CHECK(m == NULL);
    meter_destroy(&m);
    loop_destroy(&loop);
}

TEST(a_listings_end_is_taken_once)
{
    loop_t *loop = loop_new();
    owner_t o = {.take = 1};
    meter_t *m = meter_new(loop, &OPS, &o);
    meter_kernel_t k[3] = {{"a", getpid()}, {"b", getpid()}, {"c", getpid()}};
    CHECK_EQ_INT(meter_start(m, k, 3, 1, 0), 0);
    s_wait(loop, &o);
    CHECK_EQ_INT(o.measured, 3);
    CHECK_STR(o.last_id, "c");
    CHECK_EQ_INT(meter_take_info(m, "c"), 0); /* a listing's, not c's own */
    CHECK_EQ_INT(meter_take_list(m), 1);
    CHECK_EQ_INT(meter_take_list(m), 0);
    meter_destroy(&m);
    loop_destroy(&loop);
}

TEST(a_measure_not_taken_leaves_nothing_to_take)
{
    loop_t *loop = loop_new();
    owner_t o = {.take = 0};
    meter_t *m = meter_new(loop, &OPS, &o);
    meter_kernel_t k = {"a", getpid()};
    CHECK_EQ_INT(meter_start(m, &k, 1, 0, 0), 0);
    s_wait(loop, &o);
    CHECK_EQ_INT(o.measured, 1);
    CHECK_EQ_INT(meter_take_info(m, "a"), 0);
    meter_destroy(&m);
    loop_destroy(&loop);
}

TEST(destroy_lets_the_measure_under_way_end)
{
    loop_t *loop = loop_new();
    owner_t o = {.take = 1};
    meter_t *m = meter_new(loop, &OPS, &o);
    meter_kernel_t k = {"a", getpid()};
    CHECK_EQ_INT(meter_start(m, &k, 1, 0, 0), 0);
    meter_destroy(&m);
    CHECK_EQ_INT(o.done, 1);
    loop_destroy(&loop);
}

int main(void)
{
    RUN(a_sessions_own_measure_is_taken_once);
    RUN(a_listings_end_is_taken_once);
    RUN(a_measure_not_taken_leaves_nothing_to_take);
    RUN(destroy_lets_the_measure_under_way_end);
    return harness_done();
}
