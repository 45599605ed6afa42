/*  loop: epoll for sockets and fds, a binary min-heap for timers. We replace czmq's zloop
 *  rather than wrap it: zloop rebuilds a zmq_poll set of every reader and poller on each
 *  turn, asks every ZeroMQ socket for its ZMQ_FD and ZMQ_EVENTS, and walks every timer, so
 *  with 500 idle sessions (~3000 items) a round trip cost 15 times what it cost with one.
 *  Here a turn touches only what epoll reported, the readers known to have input, and the
 *  timers that are due. Nothing registered is freed during a turn (see s_kill). */
#include "loop.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

/*  How ZeroMQ sockets are read, and why no message is ever left waiting unseen.
 *
 *  A ZeroMQ socket's ZMQ_FD is not readable when a message is: it is readable when libzmq's
 *  I/O thread has posted commands to the socket (such as "a pipe has messages again"). The
 *  commands are processed, and the fd drained, by any call on the socket: a receive, a send,
 *  ZMQ_EVENTS. So the fd is only a hint that ZMQ_EVENTS may have changed, and a send on the
 *  socket from anywhere (the broker answers on the ROUTER it reads) can consume the hint of a
 *  request that is arriving: epoll then never reports it, and ZMQ_EVENTS says POLLIN to no
 *  one. The rule that keeps this from hanging a session:
 *
 *  1. Each reader's ZMQ_FD sits in the epoll set (level-triggered). When epoll reports it, the
 *     reader goes on the ready list; it is not called yet.
 *  2. Each turn, every reader on the ready list is checked with ZMQ_EVENTS. With POLLIN its
 *     handler runs once (one message: a flood on one socket cannot starve the others), then
 *     ZMQ_EVENTS is checked again and a reader that still has input stays on the ready list.
 *  3. Code that uses a served socket outside that socket's own handler calls
 *     loop_reader_touch, which puts the reader on the ready list. (In kenneld that is one
 *     place, the broker's send path.) A new reader starts on the ready list, as its socket
 *     may have been used already.
 *  4. The loop never sleeps while the ready list is not empty.
 *
 *  So the invariant before every sleep: each reader whose ZMQ_EVENTS may have changed since
 *  its last check without a new command (and so a new hint) is on the ready list. Should a
 *  send path forget rule 3, the sweep (loop_set_sweep) finds the reader within a few seconds
 *  and says so, rather than the session hanging for ever. */

#define MAX_EVENTS 256        /* epoll events taken per turn; the rest wait for the next */
#define SWEEP_SLICE 64        /* readers the sweep checks per interval */
#define SWEEP_DEFAULT_MS 100
#define TIMER_SLOT_BITS 20    /* a timer id: generation (11 bits) | slot (20 bits) */
#define TIMER_SLOT_MASK ((1u << TIMER_SLOT_BITS) - 1)
#define TIMER_GEN_MASK 0x7ffu
#define NO_SLOT UINT32_MAX

typedef struct item item_t;
struct item {
    int fd;                  /* in the epoll set: a plain fd, or the socket's ZMQ_FD */
    zsock_t *sock;           /* a reader's socket; NULL for a plain fd */
    loop_reader_fn *on_read;
    loop_fd_fn *on_fd;
    void *arg;
    int is_queued;           /* on the ready list (readers) */
    int again;               /* a reader called on its next turn, input or not */
    int is_dead;             /* ended: never called again, freed at the end of the turn */
    size_t reader_pos;       /* index in readers[] (readers) */
    item_t *next_dead;
};

typedef struct {
    long long when_ms;       /* monotonic deadline */
    unsigned long long seq;  /* arming order: ties on when_ms fire in it */
    long long interval_ms;
    size_t times;            /* how many firings in all; 0: until ended */
    size_t remaining;        /* firings left when times > 0 */
    loop_timer_fn *handler;
    void *arg;
    long heap_pos;           /* index in heap[], or -1 when not armed */
    unsigned gen;            /* bumped on each free, so stale ids miss */
    int in_use;
    int is_firing;           /* its handler runs: freeing waits for it to return */
    int is_cancelled;        /* ended from inside its own handler */
    uint32_t next_free;
} timer_slot_t;

struct loop {
    int epfd;
    struct epoll_event events[MAX_EVENTS];
    item_t **by_fd;          /* registered items by fd (ZMQ_FD for readers) */
    size_t by_fd_len;
    item_t **readers;        /* every live reader, for the sweep */
    size_t nreaders, readers_cap;
    size_t nreaders_dead;    /* readers ended this turn: they may still sit in ready[] */
    item_t **ready;          /* readers to check on the next pass (rule 2) */
    size_t nready;
    item_t **work;           /* the pass being run (ready and work swap) */
    size_t nwork;
    size_t ready_cap;        /* of ready and work both, >= nreaders + nreaders_dead: each
                              * reader is queued at most once, so a push never fails */
    item_t *dead;            /* items ended this turn */
    timer_slot_t *timers;
    size_t ntimers, timers_cap, timers_used;
    uint32_t free_timer;
    uint32_t *heap;          /* timer slots, soonest first */
    size_t heap_len, heap_cap;
    unsigned long long seq;
    int in_turn;
    int stopped;
    int sweep_timer;         /* -1 when the sweep is off */
    size_t sweep_pos;
    size_t missed;
    log_limit_t warn_limit;
};

/* ---- readers and fds ------------------------------------------------------------------- */

static int s_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * elem);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    *arr = p;
    *cap = n;
    return 0;
}

static int s_slot_for(loop_t *self, int fd)
{
    if (fd < 0) {
        errno = EBADF;
        return -1;
    }
    size_t need = (size_t)fd + 1;
    if (need <= self->by_fd_len)
        return 0;
    size_t n = self->by_fd_len ? self->by_fd_len : 64;
    while (n < need)
        n *= 2;
    item_t **p = realloc(self->by_fd, n * sizeof *p);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    memset(p + self->by_fd_len, 0, (n - self->by_fd_len) * sizeof *p);
    self->by_fd = p;
    self->by_fd_len = n;
    return 0;
}

static item_t *s_lookup(const loop_t *self, int fd)
{
    return fd >= 0 && (size_t)fd < self->by_fd_len ? self->by_fd[fd] : NULL;
}

static void s_push_ready(loop_t *self, item_t *it)
{
    assert(!it->is_queued && self->nready < self->ready_cap);
    it->is_queued = 1;
    self->ready[self->nready++] = it;
}

/*  ZMQ_EVENTS of a reader's socket. This is also what drains its ZMQ_FD. */
static int s_has_input(const item_t *it)
{
    return (zsock_events(it->sock) & ZMQ_POLLIN) != 0;
}

/*  Take an item out of the epoll set and the tables now; free it once the turn is over, since
 *  this turn's epoll events or ready pass may still point at it. */
static void s_kill(loop_t *self, item_t *it)
{
    if (epoll_ctl(self->epfd, EPOLL_CTL_DEL, it->fd, NULL) < 0 && errno != EBADF &&
        errno != ENOENT)
        PLOG_W("epoll_ctl(DEL, %d)", it->fd);
    self->by_fd[it->fd] = NULL;
    if (it->sock) {
        item_t *last = self->readers[--self->nreaders];
        self->readers[it->reader_pos] = last;
        last->reader_pos = it->reader_pos;
        self->nreaders_dead++;
    }
    it->is_dead = 1;
    it->next_dead = self->dead;
    self->dead = it;
}

/*  Free what was ended during the turn (or outside any turn). */
static void s_bury(loop_t *self)
{
    if (!self->dead)
        return;
    size_t n = 0;
    for (size_t i = 0; i < self->nready; i++)
        if (!self->ready[i]->is_dead)
            self->ready[n++] = self->ready[i];
    self->nready = n;
    self->nreaders_dead = 0;
    while (self->dead) {
        item_t *it = self->dead;
        self->dead = it->next_dead;
        free(it);
    }
}

static item_t *s_add(loop_t *self, int fd, int epoll_events, void *arg)
{
    if (s_slot_for(self, fd) < 0)
        return NULL;
    if (self->by_fd[fd]) {
        errno = EEXIST;
        return NULL;
    }
    item_t *it = calloc(1, sizeof *it);
    if (!it) {
        errno = ENOMEM;
        return NULL;
    }
    it->fd = fd;
    it->arg = arg;
    struct epoll_event ev = {.events = (uint32_t)epoll_events, .data.ptr = it};
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        int saved = errno;
        free(it);
        errno = saved;
        return NULL;
    }
    self->by_fd[fd] = it;
    return it;
}

int loop_reader(loop_t *self, zsock_t *sock, loop_reader_fn *handler, void *arg)
{
    assert(self && sock && handler);
    if (s_grow((void **)&self->readers, &self->readers_cap, self->nreaders + 1,
               sizeof *self->readers) < 0)
        return -1;
    /* ready and work grow together, before the reader exists, so pushing never fails */
    size_t need = self->nreaders + self->nreaders_dead + 1;
    size_t cap = self->ready_cap;
    if (s_grow((void **)&self->ready, &cap, need, sizeof *self->ready) < 0)
        return -1;
    cap = self->ready_cap;
    if (s_grow((void **)&self->work, &cap, need, sizeof *self->work) < 0)
        return -1;
    self->ready_cap = cap;
    item_t *it = s_add(self, zsock_fd(sock), EPOLLIN, arg);
    if (!it)
        return -1;
    it->sock = sock;
    it->on_read = handler;
    it->reader_pos = self->nreaders;
    self->readers[self->nreaders++] = it;
    s_push_ready(self, it); /* rule 3: the socket may have swallowed its hint already */
    return 0;
}

void loop_reader_end(loop_t *self, zsock_t *sock)
{
    assert(self);
    item_t *it = sock ? s_lookup(self, zsock_fd(sock)) : NULL;
    if (!it || it->sock != sock)
        return;
    s_kill(self, it);
    if (!self->in_turn)
        s_bury(self);
}

void loop_reader_touch(loop_t *self, zsock_t *sock)
{
    assert(self);
    item_t *it = sock ? s_lookup(self, zsock_fd(sock)) : NULL;
    if (it && it->sock == sock && !it->is_queued)
        s_push_ready(self, it);
}

void loop_reader_again(loop_t *self, zsock_t *sock)
{
    assert(self);
    item_t *it = sock ? s_lookup(self, zsock_fd(sock)) : NULL;
    if (!it || it->sock != sock)
        return;
    it->again = 1;
    if (!it->is_queued)
        s_push_ready(self, it);
}

static uint32_t s_epoll_events(int events)
{
    return (events & LOOP_IN ? EPOLLIN : 0u) | (events & LOOP_OUT ? EPOLLOUT : 0u);
}

int loop_fd(loop_t *self, int fd, int events, loop_fd_fn *handler, void *arg)
{
    assert(self && handler);
    item_t *it = s_add(self, fd, (int)s_epoll_events(events), arg);
    if (!it)
        return -1;
    it->on_fd = handler;
    return 0;
}

int loop_fd_events(loop_t *self, int fd, int events)
{
    assert(self);
    item_t *it = s_lookup(self, fd);
    if (!it || it->sock) {
        errno = ENOENT;
        return -1;
    }
    struct epoll_event ev = {.events = s_epoll_events(events), .data.ptr = it};
    return epoll_ctl(self->epfd, EPOLL_CTL_MOD, fd, &ev);
}

void loop_fd_end(loop_t *self, int fd)
{
    assert(self);
    item_t *it = s_lookup(self, fd);
    if (!it || it->sock)
        return;
    s_kill(self, it);
    if (!self->in_turn)
        s_bury(self);
}

/* ---- timers: a binary min-heap of slot indices, ordered by (when_ms, seq) --------------- */

static int s_before(const loop_t *self, uint32_t a, uint32_t b)
{
    const timer_slot_t *x = &self->timers[a], *y = &self->timers[b];
    return x->when_ms < y->when_ms || (x->when_ms == y->when_ms && x->seq < y->seq);
}

static void s_heap_put(loop_t *self, size_t pos, uint32_t slot)
{
    self->heap[pos] = slot;
    self->timers[slot].heap_pos = (long)pos;
}

static void s_heap_up(loop_t *self, size_t pos)
{
    uint32_t slot = self->heap[pos];
    while (pos > 0) {
        size_t parent = (pos - 1) / 2;
        if (!s_before(self, slot, self->heap[parent]))
            break;
        s_heap_put(self, pos, self->heap[parent]);
        pos = parent;
    }
    s_heap_put(self, pos, slot);
}

static void s_heap_down(loop_t *self, size_t pos)
{
    uint32_t slot = self->heap[pos];
    for (;;) {
        size_t child = 2 * pos + 1;
        if (child >= self->heap_len)
            break;
        if (child + 1 < self->heap_len && s_before(self, self->heap[child + 1], self->heap[child]))
            child++;
        if (!s_before(self, self->heap[child], slot))
            break;
        s_heap_put(self, pos, self->heap[child]);
        pos = child;
    }
    s_heap_put(self, pos, slot);
}

/*  Arm slot at now + delay. heap_cap >= timers in use, so this cannot fail. */
static void s_arm(loop_t *self, uint32_t slot, long long delay_ms)
{
    timer_slot_t *t = &self->timers[slot];
    assert(t->heap_pos < 0 && self->heap_len < self->heap_cap);
    t->when_ms = util_now_ms() + (delay_ms > 0 ? delay_ms : 0);
    t->seq = ++self->seq;
    self->heap[self->heap_len] = slot;
    t->heap_pos = (long)self->heap_len++;
    s_heap_up(self, (size_t)t->heap_pos);
}

static void s_disarm(loop_t *self, uint32_t slot)
{
    timer_slot_t *t = &self->timers[slot];
    if (t->heap_pos < 0)
        return;
    size_t pos = (size_t)t->heap_pos;
    t->heap_pos = -1;
    uint32_t last = self->heap[--self->heap_len];
    if (pos == self->heap_len)
        return;
    s_heap_put(self, pos, last);
    s_heap_down(self, pos);
    s_heap_up(self, (size_t)self->timers[last].heap_pos);
}

static int s_timer_id(const loop_t *self, uint32_t slot)
{
    return (int)(((self->timers[slot].gen & TIMER_GEN_MASK) << TIMER_SLOT_BITS) | slot);
}

/*  The slot of a live timer id, or NO_SLOT. */
static uint32_t s_timer_slot(const loop_t *self, int id)
{
    if (id < 0)
        return NO_SLOT;
    uint32_t slot = (uint32_t)id & TIMER_SLOT_MASK;
    if (slot >= self->ntimers || !self->timers[slot].in_use ||
        self->timers[slot].is_cancelled || s_timer_id(self, slot) != id)
        return NO_SLOT;
    return slot;
}

static void s_timer_free(loop_t *self, uint32_t slot)
{
    timer_slot_t *t = &self->timers[slot];
    s_disarm(self, slot);
    t->in_use = 0;
    t->is_cancelled = 0;
    t->gen++;
    t->next_free = self->free_timer;
    self->free_timer = slot;
    self->timers_used--;
}

int loop_timer(loop_t *self, long long delay_ms, size_t times, loop_timer_fn *handler, void *arg)
{
    assert(self && handler);
    if (s_grow((void **)&self->heap, &self->heap_cap, self->timers_used + 1, sizeof *self->heap) <
        0)
        return -1;
    uint32_t slot = self->free_timer;
    if (slot == NO_SLOT) {
        if (self->ntimers > TIMER_SLOT_MASK) {
            errno = ENOSPC;
            return -1;
        }
        if (s_grow((void **)&self->timers, &self->timers_cap, self->ntimers + 1,
                   sizeof *self->timers) < 0)
            return -1;
        slot = (uint32_t)self->ntimers++;
        self->timers[slot] = (timer_slot_t){.gen = 1};
    } else {
        self->free_timer = self->timers[slot].next_free;
    }
    timer_slot_t *t = &self->timers[slot];
    unsigned gen = t->gen;
    *t = (timer_slot_t){.interval_ms = delay_ms > 0 ? delay_ms : 0, .times = times,
                        .remaining = times, .handler = handler, .arg = arg, .heap_pos = -1,
                        .gen = gen, .in_use = 1, .next_free = NO_SLOT};
    self->timers_used++;
    s_arm(self, slot, delay_ms);
    return s_timer_id(self, slot);
}

int loop_timer_reset(loop_t *self, int timer_id, long long delay_ms)
{
    assert(self);
    uint32_t slot = s_timer_slot(self, timer_id);
    if (slot == NO_SLOT) {
        errno = ENOENT;
        return -1;
    }
    timer_slot_t *t = &self->timers[slot];
    s_disarm(self, slot);
    t->interval_ms = delay_ms > 0 ? delay_ms : 0;
    if (t->times && t->remaining == 0)
        t->remaining = 1;
    s_arm(self, slot, delay_ms);
    return 0;
}

void loop_timer_end(loop_t *self, int timer_id)
{
    assert(self);
    uint32_t slot = s_timer_slot(self, timer_id);
    if (slot == NO_SLOT)
        return;
    if (self->timers[slot].is_firing) {
        s_disarm(self, slot);
        self->timers[slot].is_cancelled = 1; /* freed when its handler returns */
    } else {
        s_timer_free(self, slot);
    }
}

/*  Fire the timers due now that were armed before this turn began (a timer armed by a
 *  handler, even with delay 0, waits for the next turn: no turn can spin for ever). */
static void s_run_timers(loop_t *self)
{
    long long now = util_now_ms();
    unsigned long long armed_before = self->seq;
    while (self->heap_len > 0 && !self->stopped) {
        uint32_t slot = self->heap[0];
        timer_slot_t *t = &self->timers[slot];
        if (t->when_ms > now || t->seq > armed_before)
            break;
        s_disarm(self, slot);
        if (t->times)
            t->remaining--;
        t->is_firing = 1;
        int rc = t->handler(self, s_timer_id(self, slot), t->arg);
        t = &self->timers[slot]; /* the handler may have grown the table */
        t->is_firing = 0;
        if (rc == -1)
            self->stopped = 1;
        if (t->is_cancelled || (t->heap_pos < 0 && t->times && t->remaining == 0))
            s_timer_free(self, slot);
        else if (t->heap_pos < 0)
            s_arm(self, slot, t->interval_ms);
    }
}

/* ---- the sweep --------------------------------------------------------------------------- */

/*  Check the next slice of readers that are not on the ready list. One that has input
 *  although its ZMQ_FD gives no hint has lost its wake-up (rule 3 was broken somewhere): it
 *  is served now, and counted. (A message arriving between the two checks looks the same;
 *  the window is a microsecond, so the warning is worth having.) */
static int s_sweep(loop_t *self, int timer_id, void *arg)
{
    (void)timer_id;
    (void)arg;
    for (size_t k = 0; k < SWEEP_SLICE && k < self->nreaders; k++) {
        if (self->sweep_pos >= self->nreaders)
            self->sweep_pos = 0;
        item_t *it = self->readers[self->sweep_pos++];
        if (it->is_queued)
            continue;
        struct pollfd pfd = {it->fd, POLLIN, 0};
        int hinted = poll(&pfd, 1, 0) > 0;
        if (!s_has_input(it))
            continue;
        s_push_ready(self, it);
        if (!hinted) {
            self->missed++;
            if (log_allow(&self->warn_limit, 1))
                LOG_W("a socket had input but no wake-up (a send path without "
                      "loop_reader_touch?); served it now (%zu so far)",
                      self->missed);
        }
    }
    return 0;
}

void loop_set_sweep(loop_t *self, long long interval_ms)
{
    assert(self);
    if (self->sweep_timer >= 0)
        loop_timer_end(self, self->sweep_timer);
    self->sweep_timer = interval_ms > 0 ? loop_timer(self, interval_ms, 0, s_sweep, NULL) : -1;
}

size_t loop_missed(const loop_t *self)
{
    return self->missed;
}

/* ---- the turn ----------------------------------------------------------------------------- */

static void s_dispatch_fd(loop_t *self, const struct epoll_event *ev)
{
    item_t *it = ev->data.ptr;
    if (it->is_dead)
        return;
    if (it->sock) {
        if (!it->is_queued)
            s_push_ready(self, it); /* rule 1 */
        return;
    }
    int revents = (ev->events & EPOLLIN ? LOOP_IN : 0) | (ev->events & EPOLLOUT ? LOOP_OUT : 0) |
                  (ev->events & (EPOLLERR | EPOLLHUP) ? LOOP_ERR : 0);
    if (it->on_fd(self, it->fd, revents, it->arg) == -1)
        self->stopped = 1;
}

/*  Rule 2: one message per readable socket, then look again. */
static void s_run_ready(loop_t *self)
{
    item_t **pass = self->ready;
    self->ready = self->work;
    self->work = pass;
    self->nwork = self->nready;
    self->nready = 0;
    /* work[] is read afresh each time: a handler registering a reader may move it. */
    for (size_t i = 0; i < self->nwork; i++) {
        item_t *it = self->work[i];
        it->is_queued = 0;
        if (it->is_dead)
            continue;
        if (self->stopped) {
            s_push_ready(self, it); /* kept for the next loop_run */
            continue;
        }
        if (!it->again && !s_has_input(it))
            continue;
        it->again = 0;
        if (it->on_read(self, it->sock, it->arg) == -1)
            self->stopped = 1;
        if (!it->is_dead && !it->is_queued && s_has_input(it))
            s_push_ready(self, it);
    }
    self->nwork = 0;
}

/*  How long epoll may wait: not at all with readers to check, else until the next timer. */
static int s_timeout(const loop_t *self)
{
    if (self->nready > 0)
        return 0;
    if (self->heap_len == 0)
        return -1;
    long long wait = self->timers[self->heap[0]].when_ms - util_now_ms();
    return wait <= 0 ? 0 : wait > INT_MAX ? INT_MAX : (int)wait;
}

int loop_run(loop_t *self)
{
    assert(self && !self->in_turn);
    self->stopped = 0;
    while (!self->stopped) {
        int n = epoll_wait(self->epfd, self->events, MAX_EVENTS, s_timeout(self));
        if (n < 0 && errno != EINTR)
            return -1;
        self->in_turn = 1;
        s_run_timers(self);
        for (int i = 0; i < n && !self->stopped; i++)
            s_dispatch_fd(self, &self->events[i]);
        s_run_ready(self);
        self->in_turn = 0;
        s_bury(self);
    }
    return 0;
}

loop_t *loop_new(void)
{
    loop_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->free_timer = NO_SLOT;
    self->sweep_timer = -1;
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0) {
        int saved = errno;
        free(self);
        errno = saved;
        return NULL;
    }
    loop_set_sweep(self, SWEEP_DEFAULT_MS);
    if (self->sweep_timer < 0) {
        loop_destroy(&self);
        errno = ENOMEM;
        return NULL;
    }
    return self;
}

void loop_destroy(loop_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    loop_t *self = *self_p;
    assert(!self->in_turn);
    for (size_t i = 0; i < self->by_fd_len; i++)
        free(self->by_fd[i]);
    self->nready = 0;
    s_bury(self);
    if (self->epfd >= 0)
        close(self->epfd);
    free(self->by_fd);
    free(self->readers);
    free(self->ready);
    free(self->work);
    free(self->timers);
    free(self->heap);
    free(self);
    *self_p = NULL;
}
