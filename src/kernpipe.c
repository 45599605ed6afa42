/*  kernpipe: the fd is watched for reading unless paused or resting, for writing while bytes
 *  wait; a one-shot timer (`more`) brings the next slice: on the next turn when frames were
 *  left over, after PIPE_REST_MS when the kernel is past its cap. */
#include "kernpipe.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/socket.h>

#include "log.h"
#include "util.h"

#define READ_SLICE (256u << 10) /* bytes read from one kernel per wakeup */
/* KERNPIPE_FRAMES_PER_TURN: each frame is a parse, a signature and a send, so a kernel that
 * sends tiny messages (a READ_SLICE held ~2,600 clear_outputs) held every other session's
 * traffic for that long. */
/* A kernel whose cell passed its output cap is read at most every PIPE_REST_MS: what it
 * sends is dropped unread, and a kernel that printed a line at a time woke kenneld as often
 * (17 s of kenneld's CPU for the 900,000 lines past the cap of one cell). Resting, it fills
 * its pipe and waits, and each read takes a pipe's worth. */
#define PIPE_REST_MS 20
#define FRAMES_PER_REST 4096 /* frames taken per read of a resting kernel (dropped unread) */

struct kernpipe {
    loop_t *loop;
    char id[40];             /* the session's, for the log */
    size_t max_frame;
    const kpipe_alloc_t *alloc;
    kernpipe_ops_t ops;
    void *ctx;
    int fd;                  /* the kernel's pipe, served while open; -1: closed */
    int more;                /* armed timer: the decoder holds frames past this turn's
                              * KERNPIPE_FRAMES_PER_TURN, dispatched on the next turn; or the
                              * pipe rests (resting); or -1 */
    int resting;             /* not read until `more` fires (PIPE_REST_MS) */
    int paused;              /* not read until kernpipe_resume */
    kpipe_t *decoder;
    uint8_t *out;            /* bytes waiting to be written to the kernel */
    size_t out_len, out_off;
    int want_pollout;
};

kernpipe_t *kernpipe_new(loop_t *loop, const char *id, size_t max_frame,
                         const kpipe_alloc_t *alloc, const kernpipe_ops_t *ops, void *ctx)
{
    kernpipe_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    snprintf(self->id, sizeof self->id, "%s", id);
    self->max_frame = max_frame;
    self->alloc = alloc;
    self->ops = *ops;
    self->ctx = ctx;
    self->fd = -1;
    self->more = -1;
    return self;
}

void kernpipe_destroy(kernpipe_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kernpipe_t *self = *self_p;
    kernpipe_close(self);
    kpipe_destroy(&self->decoder);
    free(self);
    *self_p = NULL;
}

int kernpipe_is_open(const kernpipe_t *self)
{
    return self->fd >= 0;
}

static int s_on_pipe(loop_t *loop, int fd, int revents, void *arg);

/*  Watch the kernel pipe: for reading unless paused, for writing while bytes wait
 *  (want_pollout). Neither: not watched (its hang-up would be reported at every turn). */
static void s_pipe_poll(kernpipe_t *self)
{
    if (self->fd < 0)
        return;
    int events = (self->paused || self->resting ? 0 : LOOP_IN) | (self->want_pollout ? LOOP_OUT : 0);
    if (!events) {
        loop_fd_end(self->loop, self->fd);
        return;
    }
    if (loop_fd_events(self->loop, self->fd, events) < 0 &&
        loop_fd(self->loop, self->fd, events, s_on_pipe, self) < 0)
        PLOG_W("session=%s: cannot watch the kernel pipe", self->id);
}

void kernpipe_close(kernpipe_t *self)
{
    if (self->more >= 0)
        loop_timer_end(self->loop, self->more);
    self->more = -1;
    self->resting = 0;
    if (self->fd < 0)
        return;
    self->want_pollout = 0;
    loop_fd_end(self->loop, self->fd);
    self->fd = -1;
    free(self->out);
    self->out = NULL;
    self->out_len = self->out_off = 0;
}

int kernpipe_open(kernpipe_t *self, int fd)
{
    kpipe_destroy(&self->decoder);
    self->decoder = kpipe_new_with(self->max_frame, self->alloc);
    if (!self->decoder) {
        errno = ENOMEM;
        return -1;
    }
    self->fd = fd;
    s_pipe_poll(self);
    return 0;
}

/*  The kernel broke the protocol: close the pipe; the owner kills the kernel, whose pidfd
 *  will report the exit. */
static void s_violation(kernpipe_t *self, const char *why)
{
    LOG_W("session=%s: kernel protocol violation: %s; killing it", self->id, why);
    kernpipe_close(self);
    self->ops.violation(self->ctx, why);
}

static void s_pipe_read(kernpipe_t *self, size_t max, int drain);

static int s_on_pipe_more(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    kernpipe_t *self = arg;
    self->more = -1;
    if (self->resting) {
        self->resting = 0;
        s_pipe_poll(self);
    }
    s_pipe_read(self, READ_SLICE, 0);
    return 0;
}

/*  Read the pipe again in ms (0: on the next turn, whatever it holds), not before. */
static void s_pipe_later(kernpipe_t *self, long long ms)
{
    if (self->more >= 0 && !ms)
        return;
    if (self->more >= 0)
        loop_timer_end(self->loop, self->more);
    if ((self->more = loop_timer(self->loop, ms, 1, s_on_pipe_more, self)) < 0) {
        PLOG_W("session=%s: cannot arm a timer", self->id);
        return;
    }
    if (ms && !self->resting) {
        self->resting = 1;
        s_pipe_poll(self);
    }
}

/*  Dispatch the whole frames the decoder holds, up to *budget of them (unless drain: a
 *  kernel that is gone, whose every frame is taken): 0, or -1 if the pipe was closed, the
 *  read paused or the budget spent (the rest then waits for the next turn). */
static int s_pipe_dispatch(kernpipe_t *self, int drain, size_t *budget)
{
    kpipe_frame_t *f;
    int rc;
    while (self->fd >= 0 && (drain || (!self->paused && *budget > 0)) &&
           (rc = kpipe_next(self->decoder, &f)) != 0) {
        if (rc < 0) {
            s_violation(self, kpipe_strerror(rc));
            return -1;
        }
        if (*budget > 0)
            (*budget)--;
        const char *why = NULL;
        int bad = self->ops.frame(self->ctx, f, &why);
        kpipe_frame_destroy(&f);
        if (bad < 0) {
            s_violation(self, why);
            return -1;
        }
    }
    if (self->fd >= 0 && !drain && !self->paused && *budget == 0) {
        s_pipe_later(self, 0);
        return -1;
    }
    return self->fd >= 0 && (drain || !self->paused) ? 0 : -1;
}

static size_t s_pipe_read_some(kernpipe_t *self, size_t max, int drain);

/*  Read what the kernel wrote, up to max bytes, and dispatch whole frames (those read before
 *  first), KERNPIPE_FRAMES_PER_TURN at most; while paused, nothing (drain: all the same). A
 *  kernel past its cell's output cap that sent frames then rests (PIPE_REST_MS); one that sent
 *  none is read as any other (an idle session whose last cell was cut off once woke kenneld
 *  every 20 ms). */
static void s_pipe_read(kernpipe_t *self, size_t max, int drain)
{
    size_t taken = s_pipe_read_some(self, max, drain);
    if (taken && self->fd >= 0 && !drain && !self->paused && !self->resting &&
        self->ops.capped(self->ctx))
        s_pipe_later(self, PIPE_REST_MS);
}

/*  s_pipe_read's reading: how many frames it dispatched. */
static size_t s_pipe_read_some(kernpipe_t *self, size_t max, int drain)
{
    static char buf[65536];
    size_t total = 0,
           first = self->ops.capped(self->ctx) ? FRAMES_PER_REST : KERNPIPE_FRAMES_PER_TURN;
    size_t budget = first;
    if (s_pipe_dispatch(self, drain, &budget) < 0)
        return first - budget;
    while (self->fd >= 0 && total < max) {
        ssize_t n = recv(self->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            if (n < 0)
                PLOG_W("session=%s: read from kernel", self->id);
            else if (kpipe_finish(self->decoder) != 0)
                LOG_W("session=%s: kernel pipe: %s", self->id, kpipe_strerror(KPIPE_ETRUNC));
            kernpipe_close(self);
            break;
        }
        total += (size_t)n;
        if (kpipe_feed(self->decoder, buf, (size_t)n) < 0) {
            LOG_E("session=%s: out of memory reading the kernel pipe", self->id);
            s_violation(self, "out of memory");
            break;
        }
        if (s_pipe_dispatch(self, drain, &budget) < 0)
            break;
    }
    return first - budget;
}

static void s_pipe_flush(kernpipe_t *self)
{
    while (self->out_off < self->out_len) {
        ssize_t n = send(self->fd, self->out + self->out_off, self->out_len - self->out_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n < 0) {
            PLOG_W("session=%s: write to kernel", self->id);
            kernpipe_close(self);
            return;
        }
        self->out_off += (size_t)n;
    }
    int want = self->out_off < self->out_len;
    if (!want) {
        free(self->out);
        self->out = NULL;
        self->out_len = self->out_off = 0;
    }
    if (want != self->want_pollout) {
        self->want_pollout = want;
        s_pipe_poll(self);
    }
}

static int s_on_pipe(loop_t *loop, int fd, int revents, void *arg)
{
    (void)loop;
    (void)fd;
    kernpipe_t *self = arg;
    if (revents & LOOP_OUT)
        s_pipe_flush(self);
    /* A hang-up or error is read through even while paused (at most a slice a turn): the
     * loop would be woken for it at every turn otherwise. */
    if (revents & (LOOP_IN | LOOP_ERR))
        s_pipe_read(self, READ_SLICE, (revents & LOOP_ERR) != 0);
    return 0;
}

int kernpipe_send(kernpipe_t *self, const kpipe_iov_t *parts, size_t n)
{
    if (self->fd < 0)
        return -1;
    uint8_t *frame;
    size_t len;
    int rc = kpipe_encode(parts, n, self->max_frame, &frame, &len);
    if (rc < 0) {
        LOG_W("session=%s: cannot frame a request for the kernel: %s", self->id,
              kpipe_strerror(rc));
        return KERNPIPE_TOO_LARGE;
    }
    /* At most one shell request and one input reply are ever in flight, so the buffer stays
     * within a few frames; anything more means the kernel stopped reading. */
    if (self->out_len - self->out_off + len > 4 * self->max_frame) {
        free(frame);
        s_violation(self, "kernel stopped reading its pipe");
        return -1;
    }
    if (!self->out) {
        self->out = frame;
        self->out_len = len;
        self->out_off = 0;
    } else {
        uint8_t *grown = realloc(self->out, self->out_len + len);
        if (!grown) {
            free(frame);
            return -1;
        }
        memcpy(grown + self->out_len, frame, len);
        self->out = grown;
        self->out_len += len;
        free(frame);
    }
    s_pipe_flush(self);
    return self->fd >= 0 ? 0 : -1;
}

int kernpipe_send_fd(kernpipe_t *self, int fd)
{
    if (self->fd < 0) {
        errno = EPIPE;
        return -1;
    }
    if (self->out_off < self->out_len) {
        errno = EBUSY;
        return -1;
    }
    if (fd < 0) /* a refusal: the byte alone */
        return util_send_fds(self->fd, "N", 1, NULL, 0, MSG_DONTWAIT);
    return util_send_fds(self->fd, "F", 1, &fd, 1, MSG_DONTWAIT);
}

void kernpipe_drain(kernpipe_t *self)
{
    s_pipe_read(self, SIZE_MAX, 1);
}

void kernpipe_pause(kernpipe_t *self)
{
    if (self->paused)
        return;
    self->paused = 1; /* the kernel's next frames wait */
    s_pipe_poll(self);
}

void kernpipe_resume(kernpipe_t *self)
{
    if (!self->paused)
        return;
    self->paused = 0;
    s_pipe_poll(self);
    s_pipe_read(self, READ_SLICE, 0); /* frames it read before the pause come first */
}
