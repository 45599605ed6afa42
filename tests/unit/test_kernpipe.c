/*  Unit tests of kernpipe over a socketpair and a real loop: the kernel's frames reach the
 *  owner in order, at most KERNPIPE_FRAMES_PER_TURN a turn; a frame the owner refuses, or a
 *  malformed stream, is a violation that closes the pipe; a paused pipe is not read until
 *  resumed; a gone kernel's frames are drained all the same; frames sent reach the kernel,
 *  one too large is refused, and nothing is sent on a closed pipe. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../harness.h"
#include "kernpipe.h"
#include "kpipe.h"
#include "loop.h"

static void *s_alloc(void *arg, size_t len, void **handle)
{
    (void)arg;
    *handle = malloc(len ? len : 1);
    return *handle;
}

static void s_release(void *arg, void *handle)
{
    (void)arg;
    free(handle);
}

static const kpipe_alloc_t ALLOC = {s_alloc, s_release, NULL};

typedef struct {
    char seen[512][16];      /* each frame's first part, in order */
    int n;
    int refuse_at;           /* refuse the frame with this index (-1: none) */
    int violations;
    char why[128];
    int capped;
} owner_t;

static int s_frame(void *ctx, kpipe_frame_t *f, const char **why)
{
    owner_t *o = ctx;
    kpipe_iov_t p = kpipe_frame_part(f, 0);
    if (o->n == o->refuse_at) {
        *why = "refused by the test";
        return -1;
    }
    if (o->n < 512)
        snprintf(o->seen[o->n], sizeof o->seen[0], "%.*s", (int)p.len, (const char *)p.data);
    o->n++;
    return 0;
}

static int s_capped(void *ctx)
{
    return ((owner_t *)ctx)->capped;
}

static void s_violation(void *ctx, const char *why)
{
    owner_t *o = ctx;
    o->violations++;
    snprintf(o->why, sizeof o->why, "%s", why);
}

static const kernpipe_ops_t OPS = {s_frame, s_capped, s_violation};

/*  Write frames "f<i>" for i in [from, to) to fd, as a kernel would, in one write (many small
 *  writes would fill the socket's buffer with their overhead before the loop reads). */
static void s_write_frames(int fd, int from, int to)
{
    uint8_t *all = NULL;
    size_t total = 0;
    for (int i = from; i < to; i++) {
        char text[16];
        int len = snprintf(text, sizeof text, "f%d", i);
        kpipe_iov_t part = {text, (size_t)len};
        uint8_t *buf;
        size_t n;
        CHECK_EQ_INT(kpipe_encode(&part, 1, 1 << 20, &buf, &n), 0);
        all = realloc(all, total + n);
        memcpy(all + total, buf, n);
        total += n;
        free(buf);
    }
    CHECK(write(fd, all, total) == (ssize_t)total);
    free(all);
}

static int s_stop(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    (void)arg;
    return -1;
}

/*  Turn the loop for about ms. */
static void s_turn(loop_t *loop, long long ms)
{
    loop_timer(loop, ms, 1, s_stop, NULL);
    loop_run(loop);
}

typedef struct {
    loop_t *loop;
    int fds[2];              /* [0]: kenneld's end, [1]: the kernel's */
    owner_t owner;
    kernpipe_t *pipe;
} rig_t;

static void s_rig(rig_t *r)
{
    memset(r, 0, sizeof *r);
    r->owner.refuse_at = -1;
    r->loop = loop_new();
    CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, r->fds), 0);
    fcntl(r->fds[0], F_SETFL, O_NONBLOCK);
    r->pipe = kernpipe_new(r->loop, "test", 1 << 20, &ALLOC, &OPS, &r->owner);
    CHECK(r->pipe != NULL);
    CHECK(!kernpipe_is_open(r->pipe));
    CHECK_EQ_INT(kernpipe_open(r->pipe, r->fds[0]), 0);
    CHECK(kernpipe_is_open(r->pipe));
}

static void s_unrig(rig_t *r)
{
    kernpipe_destroy(&r->pipe);
    CHECK(r->pipe == NULL);
    kernpipe_destroy(&r->pipe);
    close(r->fds[0]);
    if (r->fds[1] >= 0)
        close(r->fds[1]);
    loop_destroy(&r->loop);
}

TEST(frames_arrive_in_order)
{
    rig_t r;
    s_rig(&r);
    s_write_frames(r.fds[1], 0, 3);
    s_turn(r.loop, 50);
    CHECK_EQ_INT(r.owner.n, 3);
    CHECK_STR(r.owner.seen[0], "f0");
    CHECK_STR(r.owner.seen[2], "f2");
    CHECK_EQ_INT(r.owner.violations, 0);
    s_unrig(&r);
}

static int s_count_at_turn(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    rig_t *r = arg;
    /* The first turn's count, taken on the turn after the pipe was first read. */
    static int first = -1;
    if (first < 0 && r->owner.n > 0)
        first = r->owner.n;
    if (first >= 0) {
        CHECK(first <= KERNPIPE_FRAMES_PER_TURN);
        first = -1;
        return -1;
    }
    return 0;
}

TEST(at_most_a_turns_worth_of_frames_a_turn)
{
    rig_t r;
    s_rig(&r);
    s_write_frames(r.fds[1], 0, 300);
    int t = loop_timer(r.loop, 0, 0, s_count_at_turn, &r);
    loop_run(r.loop);
    loop_timer_end(r.loop, t);
    s_turn(r.loop, 100); /* the rest, on later turns */
    CHECK_EQ_INT(r.owner.n, 300);
    CHECK_STR(r.owner.seen[299], "f299");
    s_unrig(&r);
}

TEST(a_refused_frame_is_a_violation_that_closes_the_pipe)
{
    rig_t r;
    s_rig(&r);
    r.owner.refuse_at = 1;
    s_write_frames(r.fds[1], 0, 3);
    s_turn(r.loop, 50);
    CHECK_EQ_INT(r.owner.n, 1);
    CHECK_EQ_INT(r.owner.violations, 1);
    CHECK_STR(r.owner.why, "refused by the test");
    CHECK(!kernpipe_is_open(r.pipe));
    s_unrig(&r);
}

TEST(a_malformed_stream_is_a_violation)
{
    rig_t r;
    s_rig(&r);
    const uint8_t bad[8] = {0, 0, 0, 4, 0, 0, 0, 0}; /* a frame of 0 parts */
    CHECK(write(r.fds[1], bad, sizeof bad) == (ssize_t)sizeof bad);
    s_turn(r.loop, 50);
    CHECK_EQ_INT(r.owner.violations, 1);
    CHECK_STR(r.owner.why, kpipe_strerror(KPIPE_EPARTS));
    CHECK(!kernpipe_is_open(r.pipe));
    s_unrig(&r);
}

TEST(a_paused_pipe_waits_for_resume)
{
    rig_t r;
    s_rig(&r);
    kernpipe_pause(r.pipe);
    s_write_frames(r.fds[1], 0, 2);
    s_turn(r.loop, 50);
    CHECK_EQ_INT(r.owner.n, 0);
    kernpipe_resume(r.pipe);
    s_turn(r.loop, 50);
    CHECK_EQ_INT(r.owner.n, 2);
    s_unrig(&r);
}

TEST(a_gone_kernels_frames_are_drained_even_paused)
{
    rig_t r;
    s_rig(&r);
    kernpipe_pause(r.pipe);
    s_write_frames(r.fds[1], 0, 5);
    close(r.fds[1]);
    r.fds[1] = -1;
    kernpipe_drain(r.pipe);
    CHECK_EQ_INT(r.owner.n, 5);
    CHECK(!kernpipe_is_open(r.pipe)); /* it read the end of the stream */
    s_unrig(&r);
}

TEST(frames_sent_reach_the_kernel)
{
    rig_t r;
    s_rig(&r);
    kpipe_iov_t parts[2] = {{"op", 2}, {"body", 4}};
    CHECK_EQ_INT(kernpipe_send(r.pipe, parts, 2), 0);
    uint8_t buf[256];
    ssize_t n = read(r.fds[1], buf, sizeof buf);
    kpipe_t *dec = kpipe_new(1 << 20);
    CHECK(n > 0 && kpipe_feed(dec, buf, (size_t)n) == 0);
    kpipe_frame_t *f = NULL;
    CHECK_EQ_INT(kpipe_next(dec, &f), 1);
    CHECK(f && kpipe_frame_count(f) == 2);
    kpipe_iov_t p = kpipe_frame_part(f, 1);
    CHECK(p.len == 4 && memcmp(p.data, "body", 4) == 0);
    kpipe_frame_destroy(&f);
    kpipe_destroy(&dec);
    s_unrig(&r);
}

TEST(too_large_and_closed_sends_are_refused)
{
    rig_t r;
    s_rig(&r);
    char *big = calloc(1, 2 << 20);
    kpipe_iov_t part = {big, 2 << 20};
    CHECK_EQ_INT(kernpipe_send(r.pipe, &part, 1), KERNPIPE_TOO_LARGE);
    CHECK(kernpipe_is_open(r.pipe));
    kernpipe_close(r.pipe);
    kpipe_iov_t small = {"x", 1};
    CHECK_EQ_INT(kernpipe_send(r.pipe, &small, 1), -1);
    free(big);
    s_unrig(&r);
}

int main(void)
{
    RUN(frames_arrive_in_order);
    RUN(at_most_a_turns_worth_of_frames_a_turn);
    RUN(a_refused_frame_is_a_violation_that_closes_the_pipe);
    RUN(a_malformed_stream_is_a_violation);
    RUN(a_paused_pipe_waits_for_resume);
    RUN(a_gone_kernels_frames_are_drained_even_paused);
    RUN(frames_sent_reach_the_kernel);
    RUN(too_large_and_closed_sends_are_refused);
    return harness_done();
}
