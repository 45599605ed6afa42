/*  Unit tests of the loop: timers (order, ties, cancel, re-arm, repeat, a heap of thousands),
 *  fd pollers (level-triggered, events changed, errors never end them), ZeroMQ readers (every
 *  queued message delivered, fairness, a lost wake-up and its cure, sends on the read socket
 *  from its own handler, from fd and timer handlers and from another thread's traffic),
 *  items ended from inside callbacks, and 1000 idle sockets beside one busy one. The safety
 *  sweep is off except where it is the subject, so the wake-up rule is proven alone. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <czmq.h>

#include "../harness.h"
#include "log.h"
#include "loop.h"
#include "util.h"

static loop_t *s_new_loop(void)
{
    loop_t *loop = loop_new();
    if (loop)
        loop_set_sweep(loop, 0);
    return loop;
}

static int s_stop(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    if (arg)
        (*(int *)arg)++;
    return -1;
}

/* ---- timers ------------------------------------------------------------------------------ */

typedef struct {
    int order[64];
    int n;
} trace_t;

typedef struct {
    trace_t *trace;
    int tag;
} tagged_t;

static int s_record(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    tagged_t *t = arg;
    if (t->trace->n < 64)
        t->trace->order[t->trace->n++] = t->tag;
    return 0;
}

TEST(timers_fire_in_deadline_order_ties_in_arming_order)
{
    loop_t *loop = s_new_loop();
    trace_t tr = {{0}, 0};
    tagged_t t30 = {&tr, 30}, t10a = {&tr, 10}, t20 = {&tr, 20}, t10b = {&tr, 11}, t0 = {&tr, 0};
    /* Delays 200 ms apart: under valgrind on a busy machine, arming the first timers can
     * take tens of milliseconds (code translated on first use), which must not reorder them. */
    CHECK(loop_timer(loop, 600, 1, s_record, &t30) >= 0);
    CHECK(loop_timer(loop, 200, 1, s_record, &t10a) >= 0);
    CHECK(loop_timer(loop, 400, 1, s_record, &t20) >= 0);
    CHECK(loop_timer(loop, 200, 1, s_record, &t10b) >= 0);
    CHECK(loop_timer(loop, 0, 1, s_record, &t0) >= 0);
    CHECK(loop_timer(loop, 800, 1, s_stop, NULL) >= 0);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(tr.n, 5);
    int want[] = {0, 10, 11, 20, 30};
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(tr.order[i], want[i]);
    loop_destroy(&loop);
    CHECK(loop == NULL);
    loop_destroy(&loop); /* no-op */
}

typedef struct {
    int victim;
    int fired;
} canceller_t;

static int s_cancel_other(loop_t *loop, int timer_id, void *arg)
{
    (void)timer_id;
    canceller_t *c = arg;
    loop_timer_end(loop, c->victim);
    c->fired++;
    return 0;
}

static int s_count(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    (*(int *)arg)++;
    return 0;
}

TEST(timers_cancel_before_and_during_a_turn)
{
    loop_t *loop = s_new_loop();
    int a = 0, b = 0, c = 0;
    int ta = loop_timer(loop, 5, 1, s_count, &a);
    loop_timer_end(loop, ta);
    loop_timer_end(loop, ta);   /* twice: no-op */
    loop_timer_end(loop, -1);   /* never an id */
    loop_timer_end(loop, 12345); /* no such timer */
    /* Both due in the same turn: the first ends the second, which must not fire. */
    canceller_t k = {0, 0};
    int tk = loop_timer(loop, 10, 1, s_cancel_other, &k);
    k.victim = loop_timer(loop, 10, 1, s_count, &b);
    CHECK(tk >= 0 && k.victim >= 0);
    usleep(15000); /* both are due when the loop first looks */
    CHECK(loop_timer(loop, 5, 1, s_count, &c) >= 0);
    CHECK(loop_timer(loop, 40, 1, s_stop, NULL) >= 0);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(a, 0);
    CHECK_EQ_INT(k.fired, 1);
    CHECK_EQ_INT(b, 0);
    CHECK_EQ_INT(c, 1);
    loop_destroy(&loop);
}

typedef struct {
    int target;
    long long delay;
    int rc;
} resetter_t;

static int s_reset_other(loop_t *loop, int timer_id, void *arg)
{
    (void)timer_id;
    resetter_t *r = arg;
    r->rc = loop_timer_reset(loop, r->target, r->delay);
    return 0;
}

static long long s_fired_at;

static int s_mark_time(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    s_fired_at = util_now_ms();
    (*(int *)arg)++;
    return 0;
}

typedef struct {
    int count;
    int times_to_reset;
} self_resetter_t;

static int s_reset_self(loop_t *loop, int timer_id, void *arg)
{
    self_resetter_t *r = arg;
    r->count++;
    if (r->times_to_reset-- > 0)
        loop_timer_reset(loop, timer_id, 2);
    return 0;
}

TEST(timers_reset_moves_the_deadline_and_revives_a_firing_one_shot)
{
    loop_t *loop = s_new_loop();
    int fired = 0;
    long long start = util_now_ms();
    int t = loop_timer(loop, 30, 1, s_mark_time, &fired);
    resetter_t r = {t, 50, -2};
    CHECK(loop_timer(loop, 10, 1, s_reset_other, &r) >= 0);
    self_resetter_t sr = {0, 3};
    CHECK(loop_timer(loop, 1, 1, s_reset_self, &sr) >= 0);
    CHECK(loop_timer(loop, 120, 1, s_stop, NULL) >= 0);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(r.rc, 0);
    CHECK_EQ_INT(fired, 1);
    CHECK(s_fired_at - start >= 60); /* reset at >= 10 ms to 50 ms from then */
    CHECK_EQ_INT(sr.count, 4);       /* one firing, then three re-arms from its own handler */
    /* A one-shot that has fired is gone: its id no longer resets. */
    errno = 0;
    CHECK_EQ_INT(loop_timer_reset(loop, t, 5), -1);
    CHECK_EQ_INT(errno, ENOENT);
    /* Resetting often (an idle clock on every message) keeps one timer, pushed back. */
    int idle = 0;
    int ti = loop_timer(loop, 20, 1, s_count, &idle);
    for (int i = 0; i < 10000; i++)
        CHECK_EQ_INT(loop_timer_reset(loop, ti, 20), 0);
    CHECK(loop_timer(loop, 60, 1, s_stop, NULL) >= 0);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(idle, 1);
    loop_destroy(&loop);
}

typedef struct {
    int count;
    int end_at;
} repeater_t;

static int s_repeat_then_end(loop_t *loop, int timer_id, void *arg)
{
    repeater_t *r = arg;
    if (++r->count == r->end_at)
        loop_timer_end(loop, timer_id);
    return 0;
}

static int s_count_turns(loop_t *loop, int fd, int revents, void *arg)
{
    (void)loop;
    (void)fd;
    (void)revents;
    (*(int *)arg)++;
    return 0;
}

static int s_chain_zero(loop_t *loop, int timer_id, void *arg)
{
    (void)timer_id;
    int *n = arg;
    if (++*n == 1000)
        return -1;
    loop_timer(loop, 0, 1, s_chain_zero, n);
    return 0;
}

TEST(timers_repeat_a_set_number_of_times_or_until_ended)
{
    loop_t *loop = s_new_loop();
    int three = 0;
    CHECK(loop_timer(loop, 2, 3, s_count, &three) >= 0);
    repeater_t forever = {0, 4};
    CHECK(loop_timer(loop, 3, 0, s_repeat_then_end, &forever) >= 0);
    CHECK(loop_timer(loop, 80, 1, s_stop, NULL) >= 0);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(three, 3);
    CHECK_EQ_INT(forever.count, 4);
    /* A delay-0 timer armed by a handler waits for the next turn, so a chain of them runs
     * one link per turn, and the loop keeps turning (here a timer 10 s away never fires). */
    int chain = 0, late = 0, turns = 0;
    int p[2];
    CHECK_EQ_INT(pipe2(p, O_CLOEXEC), 0);
    CHECK_EQ_INT(write(p[1], "x", 1), 1);
    CHECK_EQ_INT(loop_fd(loop, p[0], LOOP_IN, s_count_turns, &turns), 0); /* never read */
    CHECK(loop_timer(loop, 0, 1, s_chain_zero, &chain) >= 0);
    int guard = loop_timer(loop, 10000, 1, s_stop, &late);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(chain, 1000);
    CHECK_EQ_INT(late, 0);
    CHECK(turns >= 999); /* the readable pipe is served on every turn between links */
    loop_timer_end(loop, guard);
    loop_fd_end(loop, p[0]);
    close(p[0]);
    close(p[1]);
    loop_destroy(&loop);
}

#define HEAP_N 5000

typedef struct {
    long long lo, hi;  /* the loop's deadline is within [lo, hi] */
    int fired;
    int cancelled;
} heap_timer_t;

static heap_timer_t s_ht[HEAP_N];
static int s_ht_order[HEAP_N];
static int s_ht_n;
static long long s_ht_early; /* firings before their deadline */

static int s_heap_fire(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    heap_timer_t *h = arg;
    h->fired++;
    if (util_now_ms() < h->lo)
        s_ht_early++;
    s_ht_order[s_ht_n++] = (int)(h - s_ht);
    return 0;
}

TEST(timers_heap_of_thousands_with_cancels_and_resets)
{
    loop_t *loop = s_new_loop();
    static int ids[HEAP_N];
    srand(42);
    for (int i = 0; i < HEAP_N; i++) {
        long long d = rand() % 60;
        s_ht[i].lo = util_now_ms() + d;
        ids[i] = loop_timer(loop, d, 1, s_heap_fire, &s_ht[i]);
        s_ht[i].hi = util_now_ms() + d;
        CHECK(ids[i] >= 0);
    }
    for (int i = 0; i < HEAP_N; i++) {
        if (i % 3 == 0) {
            loop_timer_end(loop, ids[i]);
            s_ht[i].cancelled = 1;
        } else if (i % 3 == 1) {
            long long d = rand() % 60;
            s_ht[i].lo = util_now_ms() + d;
            CHECK_EQ_INT(loop_timer_reset(loop, ids[i], d), 0);
            s_ht[i].hi = util_now_ms() + d;
        }
    }
    CHECK(loop_timer(loop, 150, 1, s_stop, NULL) >= 0);
    CHECK_EQ_INT(loop_run(loop), 0);
    int bad_fire = 0, bad_order = 0;
    for (int i = 0; i < HEAP_N; i++)
        bad_fire += s_ht[i].fired != (s_ht[i].cancelled ? 0 : 1);
    for (int k = 1; k < s_ht_n; k++)
        bad_order += s_ht[s_ht_order[k - 1]].lo > s_ht[s_ht_order[k]].hi;
    CHECK_EQ_INT(bad_fire, 0);
    CHECK_EQ_INT(bad_order, 0);
    CHECK_EQ_INT(s_ht_early, 0);
    CHECK_EQ_INT(s_ht_n, HEAP_N - (HEAP_N + 2) / 3);
    loop_destroy(&loop);
}

TEST(timers_outlive_nothing_when_the_loop_is_destroyed)
{
    loop_t *loop = s_new_loop();
    int n = 0;
    for (int i = 0; i < 100; i++)
        CHECK(loop_timer(loop, 1000 + i, 0, s_count, &n) >= 0);
    loop_destroy(&loop); /* valgrind: nothing leaks */
    CHECK_EQ_INT(n, 0);
}

/* ---- plain fds --------------------------------------------------------------------------- */

typedef struct {
    int pipe[2];
    int reads, writes, errs;
    int stop_after;
    int end_on_err;
    char got[64];
    size_t got_len;
} fdrec_t;

static int s_on_fd(loop_t *loop, int fd, int revents, void *arg)
{
    fdrec_t *r = arg;
    if (revents & LOOP_ERR) {
        r->errs++;
        if (r->end_on_err && r->errs >= r->end_on_err) {
            loop_fd_end(loop, fd);
            return -1;
        }
    }
    if (revents & LOOP_IN) {
        char buf[64];
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0 && r->got_len + (size_t)n <= sizeof r->got) {
            memcpy(r->got + r->got_len, buf, (size_t)n);
            r->got_len += (size_t)n;
        }
        r->reads++;
    }
    if (revents & LOOP_OUT) {
        r->writes++;
        loop_fd_events(loop, fd, LOOP_IN); /* one write wake-up is enough */
    }
    return r->stop_after && r->reads + r->writes >= r->stop_after ? -1 : 0;
}

TEST(fds_are_level_triggered_and_change_events)
{
    loop_t *loop = s_new_loop();
    fdrec_t r = {{-1, -1}, 0, 0, 0, 2, 0, "", 0};
    CHECK_EQ_INT(pipe2(r.pipe, O_CLOEXEC | O_NONBLOCK), 0);
    CHECK_EQ_INT(loop_fd(loop, r.pipe[0], LOOP_IN, s_on_fd, &r), 0);
    errno = 0;
    CHECK_EQ_INT(loop_fd(loop, r.pipe[0], LOOP_IN, s_on_fd, &r), -1);
    CHECK_EQ_INT(errno, EEXIST);
    errno = 0;
    CHECK_EQ_INT(loop_fd_events(loop, r.pipe[1], LOOP_OUT), -1);
    CHECK_EQ_INT(errno, ENOENT);
    CHECK_EQ_INT(write(r.pipe[1], "hello", 5), 5);
    /* two turns: the read, then a write wake-up once the write end is watched too */
    CHECK_EQ_INT(loop_fd(loop, r.pipe[1], 0, s_on_fd, &r), 0);
    CHECK_EQ_INT(loop_fd_events(loop, r.pipe[1], LOOP_OUT), 0);
    CHECK(loop_timer(loop, 2000, 1, s_stop, NULL) >= 0);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(r.reads, 1);
    CHECK_EQ_INT(r.writes, 1);
    CHECK(r.got_len == 5 && memcmp(r.got, "hello", 5) == 0);
    loop_fd_end(loop, r.pipe[1]);
    loop_fd_end(loop, r.pipe[1]); /* twice: no-op */
    /* Level-triggered: a read that leaves bytes behind is called again. */
    r.stop_after = 0;
    r.reads = r.writes = 0;
    r.got_len = 0;
    char big[200];
    memset(big, 'x', sizeof big);
    CHECK_EQ_INT(write(r.pipe[1], big, sizeof big), (int)sizeof big);
    int stopped = 0;
    int guard = loop_timer(loop, 2000, 1, s_stop, &stopped);
    r.stop_after = 4; /* 200 bytes in 64-byte reads: 4 calls */
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(r.reads, 4);
    CHECK_EQ_INT(stopped, 0);
    loop_timer_end(loop, guard);
    /* An error or hang-up never ends an fd by itself (zloop's "tolerant"): the handler is
     * called on each turn until it ends the fd. */
    close(r.pipe[1]);
    r.pipe[1] = -1;
    r.stop_after = 0;
    r.end_on_err = 3;
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(r.errs, 3);
    close(r.pipe[0]);
    loop_destroy(&loop);
}

typedef struct {
    int a[2], b[2], c[2];
    int a_calls, b_calls, c_calls;
    loop_t *loop;
} swap_t;

static int s_on_first(loop_t *loop, int fd, int revents, void *arg);

static int s_on_c(loop_t *loop, int fd, int revents, void *arg)
{
    (void)loop;
    (void)revents;
    swap_t *s = arg;
    char buf[16];
    if (read(fd, buf, sizeof buf) > 0)
        s->c_calls++;
    return -1;
}

/*  Whichever of A and B runs first ends the other (whose event is pending in the same turn),
 *  closes it, and registers a new pipe that takes its fd numbers: the stale event must reach
 *  nobody. */
static int s_on_first(loop_t *loop, int fd, int revents, void *arg)
{
    (void)revents;
    swap_t *s = arg;
    int *mine = fd == s->a[0] ? s->a : s->b;
    int *other = fd == s->a[0] ? s->b : s->a;
    if (mine == s->a)
        s->a_calls++;
    else
        s->b_calls++;
    loop_fd_end(loop, fd);
    loop_fd_end(loop, other[0]);
    close(other[0]);
    close(other[1]);
    other[0] = other[1] = -1;
    if (pipe2(s->c, O_CLOEXEC | O_NONBLOCK) == 0)
        loop_fd(loop, s->c[0], LOOP_IN, s_on_c, s);
    return 0;
}

static int s_write_c(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    swap_t *s = arg;
    return write(s->c[1], "c", 1) == 1 ? 0 : -1;
}

TEST(fds_ended_inside_a_callback_get_no_stale_event)
{
    loop_t *loop = s_new_loop();
    swap_t s = {{-1, -1}, {-1, -1}, {-1, -1}, 0, 0, 0, loop};
    CHECK_EQ_INT(pipe2(s.a, O_CLOEXEC | O_NONBLOCK), 0);
    CHECK_EQ_INT(pipe2(s.b, O_CLOEXEC | O_NONBLOCK), 0);
    CHECK_EQ_INT(loop_fd(loop, s.a[0], LOOP_IN, s_on_first, &s), 0);
    CHECK_EQ_INT(loop_fd(loop, s.b[0], LOOP_IN, s_on_first, &s), 0);
    CHECK_EQ_INT(write(s.a[1], "a", 1), 1);
    CHECK_EQ_INT(write(s.b[1], "b", 1), 1);
    CHECK(loop_timer(loop, 30, 1, s_write_c, &s) >= 0);
    CHECK(loop_timer(loop, 2000, 1, s_stop, NULL) >= 0);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(s.a_calls + s.b_calls, 1);
    CHECK_EQ_INT(s.c_calls, 1);
    loop_fd_end(loop, s.c[0]);
    int *left = s.a[0] >= 0 ? s.a : s.b;
    close(left[0]);
    close(left[1]);
    close(s.c[0]);
    close(s.c[1]);
    loop_destroy(&loop);
}

/* ---- ZeroMQ readers ---------------------------------------------------------------------- */

static int s_ep_n;

/*  A bound ROUTER and a DEALER connected to it (inproc, or tcp on loopback). */
static zsock_t *s_router(int tcp, char *ep, size_t ep_len)
{
    zsock_t *r = zsock_new(ZMQ_ROUTER);
    zsock_set_linger(r, 0);
    zsock_set_rcvhwm(r, 0);
    zsock_set_sndhwm(r, 0);
    if (tcp) {
        zsock_bind(r, "tcp://127.0.0.1:*");
        char *last = zsock_last_endpoint(r);
        snprintf(ep, ep_len, "%s", last);
        zstr_free(&last);
    } else {
        snprintf(ep, ep_len, "inproc://loop-test-%d", s_ep_n++);
        zsock_bind(r, "%s", ep);
    }
    return r;
}

static zsock_t *s_dealer(const char *ep)
{
    zsock_t *d = zsock_new(ZMQ_DEALER);
    zsock_set_linger(d, 0);
    zsock_set_rcvhwm(d, 0);
    zsock_set_sndhwm(d, 0);
    zsock_connect(d, "%s", ep);
    return d;
}

typedef struct {
    int n;           /* messages received */
    int stop_at;     /* return -1 once n reaches it (0: never) */
    int reply;       /* echo each message back on the same socket */
    int *trace;      /* the tag of each delivery, in order */
    int *trace_n;
    int tag;
} rdr_t;

static int s_on_msg(loop_t *loop, zsock_t *sock, void *arg)
{
    (void)loop;
    rdr_t *r = arg;
    zmsg_t *m = zmsg_recv(sock);
    if (!m)
        return 0;
    r->n++;
    if (r->trace)
        r->trace[(*r->trace_n)++] = r->tag;
    if (r->reply)
        zmsg_send(&m, sock);
    zmsg_destroy(&m);
    return r->stop_at && r->n >= r->stop_at ? -1 : 0;
}

/*  Wait (bounded) until sock's ZMQ_FD gives a hint: a message is on its way in. */
static int s_wait_hint(zsock_t *sock)
{
    struct pollfd pfd = {zsock_fd(sock), POLLIN, 0};
    return poll(&pfd, 1, 2000) > 0;
}

TEST(zmq_every_queued_message_is_delivered_one_per_turn_fairly)
{
    loop_t *loop = s_new_loop();
    char ep1[64], ep2[64];
    zsock_t *r1 = s_router(0, ep1, sizeof ep1), *r2 = s_router(0, ep2, sizeof ep2);
    zsock_t *d1 = s_dealer(ep1), *d2 = s_dealer(ep2);
    /* Queued before the reader exists: a reader starts by looking. */
    for (int i = 0; i < 50; i++) {
        zstr_send(d1, "one");
        zstr_send(d2, "two");
    }
    int trace[100], tn = 0;
    rdr_t a = {0, 0, 0, trace, &tn, 1}, b = {0, 0, 0, trace, &tn, 2};
    zclock_sleep(20);
    CHECK_EQ_INT(loop_reader(loop, r1, s_on_msg, &a), 0);
    errno = 0;
    CHECK_EQ_INT(loop_reader(loop, r1, s_on_msg, &a), -1);
    CHECK_EQ_INT(errno, EEXIST);
    CHECK_EQ_INT(loop_reader(loop, r2, s_on_msg, &b), 0);
    b.stop_at = 50;
    CHECK(loop_timer(loop, 5000, 1, s_stop, NULL) >= 0);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(a.n, 50);
    CHECK_EQ_INT(b.n, 50);
    /* one message per socket per turn: never two in a row from one while both have some */
    int runs = 0;
    for (int i = 1; i < tn; i++)
        runs += trace[i] == trace[i - 1];
    CHECK_EQ_INT(runs, 0);
    loop_reader_end(loop, r1);
    loop_reader_end(loop, r2);
    zsock_destroy(&d1);
    zsock_destroy(&d2);
    zsock_destroy(&r1);
    zsock_destroy(&r2);
    loop_destroy(&loop);
}

typedef struct {
    int slices;      /* left of the message being worked on */
    int calls;
    int *trace;
    int *trace_n;
} slicer_t;

/*  Works on each message in 5 slices, one per call, asking to be called again meanwhile. */
static int s_on_sliced(loop_t *loop, zsock_t *sock, void *arg)
{
    slicer_t *sl = arg;
    if (sl->slices == 0) {
        zmsg_t *m = zmsg_recv(sock);
        if (!m)
            return 0;
        zmsg_destroy(&m);
        sl->slices = 5;
    }
    sl->calls++;
    sl->trace[(*sl->trace_n)++] = 1;
    if (--sl->slices > 0)
        loop_reader_again(loop, sock);
    return 0;
}

TEST(zmq_a_reader_asking_again_is_called_each_turn_between_the_others)
{
    loop_t *loop = s_new_loop();
    char ep1[64], ep2[64];
    zsock_t *r1 = s_router(0, ep1, sizeof ep1), *r2 = s_router(0, ep2, sizeof ep2);
    zsock_t *d1 = s_dealer(ep1), *d2 = s_dealer(ep2);
    zstr_send(d1, "one message, five slices");
    for (int i = 0; i < 10; i++)
        zstr_send(d2, "two");
    zclock_sleep(20);
    int trace[64], tn = 0;
    slicer_t a = {0, 0, trace, &tn};
    rdr_t b = {0, 10, 0, trace, &tn, 2};
    CHECK_EQ_INT(loop_reader(loop, r1, s_on_sliced, &a), 0);
    CHECK_EQ_INT(loop_reader(loop, r2, s_on_msg, &b), 0);
    int guard = loop_timer(loop, 5000, 1, s_stop, NULL);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(a.calls, 5); /* four of them with no message there */
    CHECK_EQ_INT(a.slices, 0);
    CHECK_EQ_INT(b.n, 10);
    for (int i = 1; i < tn; i++) /* a slice, then the other socket's message, ... */
        CHECK(!(trace[i] == 1 && trace[i - 1] == 1));
    loop_timer_end(loop, guard);
    loop_reader_end(loop, r1);
    loop_reader_end(loop, r2);
    zsock_destroy(&d1);
    zsock_destroy(&d2);
    zsock_destroy(&r1);
    zsock_destroy(&r2);
    loop_destroy(&loop);
}

TEST(zmq_a_handler_returning_minus_one_stops_and_the_loop_resumes)
{
    loop_t *loop = s_new_loop();
    char ep[64];
    zsock_t *r = s_router(0, ep, sizeof ep), *d = s_dealer(ep);
    for (int i = 0; i < 3; i++)
        zstr_send(d, "x");
    rdr_t a = {0, 1, 0, NULL, NULL, 0};
    CHECK_EQ_INT(loop_reader(loop, r, s_on_msg, &a), 0);
    CHECK(s_wait_hint(r));
    int timeouts = 0;
    int guard = loop_timer(loop, 5000, 1, s_stop, &timeouts);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(a.n, 1);
    a.stop_at = 3;
    CHECK_EQ_INT(loop_run(loop), 0); /* the two left are still there */
    CHECK_EQ_INT(a.n, 3);
    CHECK_EQ_INT(timeouts, 0);
    loop_timer_end(loop, guard);
    loop_reader_end(loop, r);
    zsock_destroy(&d);
    zsock_destroy(&r);
    loop_destroy(&loop);
}

TEST(zmq_a_swallowed_wakeup_is_lost_without_touch_and_found_with_it)
{
    for (int touch = 0; touch < 2; touch++) {
        loop_t *loop = s_new_loop();
        char ep[64];
        zsock_t *r = s_router(1, ep, sizeof ep), *d = s_dealer(ep);
        /* One exchange first: the connection is up and the reader has drained its pipe, so
         * the next message comes with a hint of its own. */
        rdr_t a = {0, 1, 0, NULL, NULL, 0};
        CHECK_EQ_INT(loop_reader(loop, r, s_on_msg, &a), 0);
        zstr_send(d, "hello");
        CHECK(loop_timer(loop, 5000, 1, s_stop, NULL) >= 0);
        CHECK_EQ_INT(loop_run(loop), 0);
        CHECK_EQ_INT(a.n, 1);
        a.stop_at = 0;
        zstr_send(d, "late");
        CHECK(s_wait_hint(r));
        /* What a send on the socket does outside its handler: it processes the socket's
         * commands, the hint of "late" among them. */
        CHECK(zsock_events(r) & ZMQ_POLLIN);
        /* With the touch, the loop stops once the message is served (the timer is only a
         * bound); without, 300 ms unseen show the hazard, and that no sweep is on (the
         * default one would have looked after 100 ms). */
        if (touch) {
            loop_reader_touch(loop, r);
            a.stop_at = 2;
        }
        int guard = loop_timer(loop, touch ? 5000 : 300, 1, s_stop, NULL);
        CHECK(guard >= 0);
        CHECK_EQ_INT(loop_run(loop), 0);
        loop_timer_end(loop, guard);
        /* Without the touch the message sits there, unseen: the hazard is real. */
        CHECK_EQ_INT(a.n, touch ? 2 : 1);
        if (!touch) {
            /* The sweep finds it, serves it, and counts it (the run stops then). */
            loop_set_sweep(loop, 10);
            a.stop_at = 2;
            guard = loop_timer(loop, 5000, 1, s_stop, NULL);
            CHECK(guard >= 0);
            CHECK_EQ_INT(loop_run(loop), 0);
            loop_timer_end(loop, guard);
            CHECK_EQ_INT(a.n, 2);
            CHECK_EQ_INT(loop_missed(loop), 1);
        }
        CHECK_EQ_INT(loop_missed(loop), touch ? 0 : 1);
        loop_reader_end(loop, r);
        zsock_destroy(&d);
        zsock_destroy(&r);
        loop_destroy(&loop);
    }
}

/* ---- sends on the read socket while messages arrive --------------------------------------- */

#define CLIENTS 4   /* at most */
#define WINDOW 8

typedef struct {
    char ep[64];
    int clients;        /* dealers, at most CLIENTS */
    int window;         /* requests each keeps in flight, at most WINDOW */
    int per_client;     /* requests each client sends */
    int replies;        /* replies the clients got */
    int done;
    zsock_t *ready;     /* PAIR: the thread says "connected" */
} blaster_t;

/*  Another thread: b->clients dealers, each keeping b->window requests in flight. */
static void *s_blaster(void *arg)
{
    blaster_t *b = arg;
    zsock_t *d[CLIENTS];
    int sent[CLIENTS] = {0}, got[CLIENTS] = {0};
    zpoller_t *poller = zpoller_new(NULL);
    for (int i = 0; i < b->clients; i++) {
        d[i] = zsock_new(ZMQ_DEALER);
        zsock_set_linger(d[i], 0);
        zsock_set_identity(d[i], (char[]){'c', (char)('0' + i), 0});
        zsock_connect(d[i], "%s", b->ep);
        zpoller_add(poller, d[i]);
    }
    zsock_signal(b->ready, 0);
    long long deadline = util_now_ms() + 60000;
    int total = 0;
    while (total < b->clients * b->per_client && util_now_ms() < deadline) {
        for (int i = 0; i < b->clients; i++)
            while (sent[i] < b->per_client && sent[i] - got[i] < b->window) {
                zstr_send(d[i], "req");
                sent[i]++;
            }
        zsock_t *which = zpoller_wait(poller, 100);
        if (!which)
            continue;
        for (int i = 0; i < b->clients; i++) {
            char *s;
            while ((zsock_events(d[i]) & ZMQ_POLLIN) && (s = zstr_recv(d[i]))) {
                if (strcmp(s, "rep") == 0) {
                    got[i]++;
                    total++;
                }
                zstr_free(&s);
            }
        }
    }
    b->replies = total;
    zpoller_destroy(&poller);
    for (int i = 0; i < b->clients; i++)
        zsock_destroy(&d[i]);
    b->done = 1;
    return NULL;
}

/*  Where the server sends its replies from. */
enum { REPLY_IN_HANDLER, REPLY_FROM_FD, REPLY_FROM_TIMER };

typedef struct {
    zsock_t *router;
    int expected;
    int handled;
    int reply;          /* REPLY_* */
    int wake[2];        /* REPLY_FROM_FD: the reader pokes the fd handler through this pipe */
    int flush_timer;    /* REPLY_FROM_TIMER: armed by the reader, or -1 */
    zmsg_t *pending[CLIENTS * WINDOW * 2];
    int npending;
    int timed_out;
} server_t;

static void s_reply(zmsg_t **req, zsock_t *router)
{
    zframe_t *id = zmsg_pop(*req);
    zmsg_destroy(req);
    zmsg_t *rep = zmsg_new();
    zmsg_append(rep, &id);
    zmsg_addstr(rep, "rep");
    zmsg_send(&rep, router);
}

/*  Replies sent outside the reader's handler, after a pause (as the broker answers when a
 *  kernel has worked on a cell), so the loop learns of the sends only through
 *  loop_reader_touch. The pause lets the next request arrive meanwhile, and lets libzmq's
 *  throttle (about 1 ms) lapse, so the first send processes the socket's commands: that
 *  request's hint is swallowed, and without the touch the session would hang. */
static int s_send_pending(loop_t *loop, server_t *s)
{
    usleep(1500);
    for (int i = 0; i < s->npending; i++)
        s_reply(&s->pending[i], s->router);
    s->npending = 0;
    loop_reader_touch(loop, s->router);
    return s->handled == s->expected ? -1 : 0;
}

static int s_flush_on_fd(loop_t *loop, int fd, int revents, void *arg)
{
    (void)revents;
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0)
        ;
    return s_send_pending(loop, arg);
}

static int s_flush_on_timer(loop_t *loop, int timer_id, void *arg)
{
    (void)timer_id;
    server_t *s = arg;
    s->flush_timer = -1;
    return s_send_pending(loop, s);
}

static int s_serve(loop_t *loop, zsock_t *sock, void *arg)
{
    server_t *s = arg;
    zmsg_t *m = zmsg_recv(sock);
    if (!m)
        return 0;
    s->handled++;
    if (s->reply == REPLY_IN_HANDLER) {
        s_reply(&m, sock); /* a send on the socket being read, from its own handler */
        return s->handled == s->expected ? -1 : 0;
    }
    s->pending[s->npending++] = m;
    if (s->reply == REPLY_FROM_FD)
        return write(s->wake[1], "w", 1) == 1 ? 0 : -1;
    if (s->flush_timer < 0)
        s->flush_timer = loop_timer(loop, 0, 1, s_flush_on_timer, s); /* on the next turn */
    return s->flush_timer < 0 ? -1 : 0;
}

static int s_timeout(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    ((server_t *)arg)->timed_out = 1;
    return -1;
}

TEST(zmq_sends_on_the_read_socket_while_requests_stream_in)
{
    /* Each case sends from one place only, so that one mechanism alone can find a request
     * whose hint a send swallowed: no other code sends on the socket or touches it, and the
     * sweep is off. (A timer that sent and touched every millisecond, in every case, used to
     * find it whichever of them was broken.) */
    static const struct {
        int reply;
        int clients, window, per_client;
    } cases[] = {
        /* From the reader's handler: only the loop's look at ZMQ_EVENTS after each handler
         * (rule 2) finds it. Four clients, eight requests in flight each (with that look
         * gone, it hung within the first ten). */
        {REPLY_IN_HANDLER, CLIENTS, WINDOW, 500},
        /* From an fd handler, then from a timer: only their loop_reader_touch finds it. One
         * client with two requests in flight, so that no other client's request brings a
         * hint of its own (with the touch gone, each hung within the first ten). */
        {REPLY_FROM_FD, 1, 2, 50},
        {REPLY_FROM_TIMER, 1, 2, 50},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        loop_t *loop = s_new_loop();
        blaster_t b = {.clients = cases[c].clients,
                       .window = cases[c].window,
                       .per_client = cases[c].per_client};
        server_t s = {0};
        s.router = s_router(1, b.ep, sizeof b.ep);
        zsock_set_router_mandatory(s.router, 0);
        s.expected = b.clients * b.per_client;
        s.reply = cases[c].reply;
        s.wake[0] = s.wake[1] = -1;
        s.flush_timer = -1;
        if (s.reply == REPLY_FROM_FD) {
            CHECK_EQ_INT(pipe2(s.wake, O_CLOEXEC | O_NONBLOCK), 0);
            CHECK_EQ_INT(loop_fd(loop, s.wake[0], LOOP_IN, s_flush_on_fd, &s), 0);
        }
        CHECK_EQ_INT(loop_reader(loop, s.router, s_serve, &s), 0);
        int guard = loop_timer(loop, 60000, 1, s_timeout, &s);
        CHECK(guard >= 0);
        char ready_ep[64];
        snprintf(ready_ep, sizeof ready_ep, "inproc://loop-test-ready-%zu", c);
        zsock_t *ready = zsock_new(ZMQ_PAIR);
        zsock_bind(ready, "%s", ready_ep);
        b.ready = zsock_new(ZMQ_PAIR);
        zsock_connect(b.ready, "%s", ready_ep);
        pthread_t th;
        CHECK_EQ_INT(pthread_create(&th, NULL, s_blaster, &b), 0);
        zsock_wait(ready);
        CHECK_EQ_INT(loop_run(loop), 0);
        loop_timer_end(loop, guard);
        /* the last replies are out; let the client collect them */
        pthread_join(th, NULL);
        CHECK_EQ_INT(s.timed_out, 0);
        CHECK_EQ_INT(s.handled, s.expected);
        CHECK_EQ_INT(b.replies, s.expected);
        zsock_destroy(&ready);
        zsock_destroy(&b.ready);
        loop_reader_end(loop, s.router);
        if (s.reply == REPLY_FROM_FD) {
            loop_fd_end(loop, s.wake[0]);
            close(s.wake[0]);
            close(s.wake[1]);
        }
        for (int i = 0; i < s.npending; i++)
            zmsg_destroy(&s.pending[i]);
        zsock_destroy(&s.router);
        loop_destroy(&loop);
    }
}

/* ---- ending readers inside callbacks -------------------------------------------------------- */

typedef struct {
    zsock_t *victim;     /* ended and destroyed by the first handler that runs */
    zsock_t *self_sock;
    int calls_a, calls_b;
    int end_self;
} killer_t;

static int s_kill_b(loop_t *loop, zsock_t *sock, void *arg)
{
    killer_t *k = arg;
    k->calls_a++;
    zmsg_t *m = zmsg_recv(sock);
    zmsg_destroy(&m);
    if (k->victim) {
        loop_reader_end(loop, k->victim);
        zsock_destroy(&k->victim);
    }
    if (k->end_self)
        loop_reader_end(loop, sock); /* its socket is destroyed by the test, later */
    return 0;
}

static int s_on_b_sock(loop_t *loop, zsock_t *sock, void *arg)
{
    (void)loop;
    killer_t *k = arg;
    k->calls_b++;
    zmsg_t *m = zmsg_recv(sock);
    zmsg_destroy(&m);
    return 0;
}

static int s_end_reader(loop_t *loop, int timer_id, void *arg)
{
    (void)timer_id;
    loop_reader_end(loop, arg);
    return 0;
}

TEST(zmq_readers_ended_inside_callbacks_are_never_called_again)
{
    loop_t *loop = s_new_loop();
    char epa[64], epb[64];
    zsock_t *ra = s_router(0, epa, sizeof epa), *rb = s_router(0, epb, sizeof epb);
    zsock_t *da = s_dealer(epa), *db = s_dealer(epb);
    killer_t k = {rb, ra, 0, 0, 1};
    /* both have input in the same turn; a is registered first, so it runs first */
    for (int i = 0; i < 5; i++) {
        zstr_send(da, "a");
        zstr_send(db, "b");
    }
    CHECK(s_wait_hint(ra) && s_wait_hint(rb));
    CHECK_EQ_INT(loop_reader(loop, ra, s_kill_b, &k), 0);
    CHECK_EQ_INT(loop_reader(loop, rb, s_on_b_sock, &k), 0);
    CHECK(loop_timer(loop, 100, 1, s_stop, NULL) >= 0);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(k.calls_a, 1); /* ended itself with 4 more queued */
    CHECK_EQ_INT(k.calls_b, 0); /* ended and destroyed before its turn */
    CHECK(k.victim == NULL);
    /* A timer ends a reader that has input in the same turn. */
    char epc[64];
    zsock_t *rc = s_router(0, epc, sizeof epc), *dc = s_dealer(epc);
    killer_t kc = {NULL, rc, 0, 0, 0};
    CHECK_EQ_INT(loop_reader(loop, rc, s_on_b_sock, &kc), 0);
    zstr_send(dc, "c");
    CHECK(loop_timer(loop, 0, 1, s_end_reader, rc) >= 0);
    CHECK(loop_timer(loop, 100, 1, s_stop, NULL) >= 0);
    CHECK_EQ_INT(loop_run(loop), 0);
    CHECK_EQ_INT(kc.calls_b, 0);
    zsock_destroy(&dc);
    zsock_destroy(&rc);
    zsock_destroy(&da);
    zsock_destroy(&db);
    zsock_destroy(&ra);
    loop_destroy(&loop);
}

#define SWAP_N 16

typedef struct {
    zsock_t *r[SWAP_N + 1], *d[SWAP_N + 1];
    rdr_t rd[SWAP_N + 1];
    int swapped;
    int total;
} churn_t;

static churn_t s_churn;

/*  Reader 2's first call ends reader 1 (already served and queued again for the next turn)
 *  and registers a new reader: the ready list then holds every live reader plus a dead one. */
static int s_on_churn(loop_t *loop, zsock_t *sock, void *arg)
{
    rdr_t *r = arg;
    churn_t *c = &s_churn;
    zmsg_t *m = zmsg_recv(sock);
    zmsg_destroy(&m);
    r->n++;
    c->total++;
    if (r == &c->rd[2] && !c->swapped) {
        c->swapped = 1;
        loop_reader_end(loop, c->r[1]);
        if (loop_reader(loop, c->r[SWAP_N], s_on_churn, &c->rd[SWAP_N]) < 0)
            return -1;
    }
    /* two messages each for all but reader 1, which got one before it was ended */
    return c->total == 2 * SWAP_N + 1 ? -1 : 0;
}

TEST(zmq_readers_replaced_while_every_reader_is_queued)
{
    loop_t *loop = s_new_loop();
    churn_t *c = &s_churn;
    for (int i = 0; i <= SWAP_N; i++) {
        char ep[64];
        c->r[i] = s_router(0, ep, sizeof ep);
        c->d[i] = s_dealer(ep);
        c->rd[i] = (rdr_t){0, 0, 0, NULL, NULL, i};
        zstr_send(c->d[i], "1");
        zstr_send(c->d[i], "2");
    }
    for (int i = 0; i < SWAP_N; i++)
        CHECK_EQ_INT(loop_reader(loop, c->r[i], s_on_churn, &c->rd[i]), 0);
    int timeouts = 0;
    int guard = loop_timer(loop, 5000, 1, s_stop, &timeouts);
    CHECK_EQ_INT(loop_run(loop), 0);
    loop_timer_end(loop, guard);
    CHECK_EQ_INT(timeouts, 0);
    CHECK_EQ_INT(c->rd[1].n, 1);
    CHECK_EQ_INT(c->rd[SWAP_N].n, 2);
    for (int i = 0; i <= SWAP_N; i++) {
        loop_reader_end(loop, c->r[i]);
        zsock_destroy(&c->d[i]);
        zsock_destroy(&c->r[i]);
    }
    loop_destroy(&loop);
}

/* ---- many idle sockets ---------------------------------------------------------------------- */

#define IDLE_N 1000

typedef struct {
    zsock_t *client;
    int trips;
    int want;
} pinger_t;

static int s_on_pong(loop_t *loop, zsock_t *sock, void *arg)
{
    (void)loop;
    pinger_t *p = arg;
    char *s = zstr_recv(sock);
    zstr_free(&s);
    if (++p->trips == p->want)
        return -1;
    zstr_send(sock, "ping");
    return 0;
}

static rdr_t *s_idle_r;
static int s_idle_made;

static int s_all_woken(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    (void)arg;
    for (int i = 0; i < s_idle_made; i++)
        if (s_idle_r[i].n < 1)
            return 0;
    return -1;
}

TEST(zmq_a_thousand_idle_sockets_and_one_busy_one)
{
    loop_t *loop = s_new_loop();
    static zsock_t *idle[IDLE_N], *idle_d[IDLE_N];
    static rdr_t idle_r[IDLE_N];
    int made = 0;
    for (int i = 0; i < IDLE_N; i++) {
        char ep[64];
        idle[i] = s_router(0, ep, sizeof ep);
        idle_d[i] = idle[i] ? s_dealer(ep) : NULL;
        idle_r[i] = (rdr_t){0, 0, 0, NULL, NULL, 0};
        if (!idle[i] || !idle_d[i] || loop_reader(loop, idle[i], s_on_msg, &idle_r[i]) < 0)
            break;
        made++;
    }
    CHECK_EQ_INT(made, IDLE_N);
    /* The busy pair: an echoing ROUTER and a DEALER client, both served by the loop. */
    char ep[64];
    zsock_t *server = s_router(0, ep, sizeof ep), *client = s_dealer(ep);
    rdr_t echo = {0, 0, 1, NULL, NULL, 0};
    pinger_t p = {client, 0, 2000};
    CHECK_EQ_INT(loop_reader(loop, server, s_on_msg, &echo), 0);
    CHECK_EQ_INT(loop_reader(loop, client, s_on_pong, &p), 0);
    zstr_send(client, "ping");
    int timeouts = 0;
    int guard = loop_timer(loop, 30000, 1, s_stop, &timeouts);
    CHECK_EQ_INT(loop_run(loop), 0);
    loop_timer_end(loop, guard);
    CHECK_EQ_INT(timeouts, 0);
    CHECK_EQ_INT(p.trips, 2000);
    /* Then every idle socket gets one message at once: each delivered exactly once. */
    for (int i = 0; i < made; i++)
        zstr_send(idle_d[i], "wake");
    int got = 0;
    s_idle_r = idle_r;
    s_idle_made = made;
    guard = loop_timer(loop, 10000, 1, s_stop, NULL);
    int poll_id = loop_timer(loop, 5, 0, s_all_woken, NULL);
    CHECK_EQ_INT(loop_run(loop), 0);
    loop_timer_end(loop, guard);
    loop_timer_end(loop, poll_id);
    for (int i = 0; i < made; i++)
        got += idle_r[i].n == 1;
    CHECK_EQ_INT(got, made);
    for (int i = 0; i < made; i++) {
        loop_reader_end(loop, idle[i]);
        zsock_destroy(&idle_d[i]);
        zsock_destroy(&idle[i]);
    }
    loop_reader_end(loop, server);
    loop_reader_end(loop, client);
    zsock_destroy(&client);
    zsock_destroy(&server);
    loop_destroy(&loop);
}

int main(void)
{
    log_init("test_loop", LOG_LEVEL_ERROR);
    /* 1000+ sockets: past czmq's default cap and maybe the soft limit on open files. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    zsys_set_max_sockets(4 * IDLE_N);
    RUN(timers_fire_in_deadline_order_ties_in_arming_order);
    RUN(timers_cancel_before_and_during_a_turn);
    RUN(timers_reset_moves_the_deadline_and_revives_a_firing_one_shot);
    RUN(timers_repeat_a_set_number_of_times_or_until_ended);
    RUN(timers_heap_of_thousands_with_cancels_and_resets);
    RUN(timers_outlive_nothing_when_the_loop_is_destroyed);
    RUN(fds_are_level_triggered_and_change_events);
    RUN(fds_ended_inside_a_callback_get_no_stale_event);
    RUN(zmq_every_queued_message_is_delivered_one_per_turn_fairly);
    RUN(zmq_a_reader_asking_again_is_called_each_turn_between_the_others);
    RUN(zmq_a_handler_returning_minus_one_stops_and_the_loop_resumes);
    RUN(zmq_a_swallowed_wakeup_is_lost_without_touch_and_found_with_it);
    RUN(zmq_sends_on_the_read_socket_while_requests_stream_in);
    RUN(zmq_readers_ended_inside_callbacks_are_never_called_again);
    RUN(zmq_readers_replaced_while_every_reader_is_queued);
    RUN(zmq_a_thousand_idle_sockets_and_one_busy_one);
    zsys_shutdown();
    return harness_done();
}
