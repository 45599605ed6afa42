/*  loop: kenneld's one event loop: ZeroMQ socket readers, plain fd pollers and timers, on
 *  epoll. A turn costs what is ready, not what is registered (sockets and fds wait in the
 *  kernel's epoll set, timers in a min-heap), so a round trip does not slow down as idle
 *  sessions accumulate. Single-threaded; nothing here blocks but loop_run's wait. It replaces
 *  czmq's zloop, which polls every item on every turn (loop.c says why and how). */
#ifndef KENNEL_LOOP_H
#define KENNEL_LOOP_H

#include <stddef.h>

#include <czmq.h>

/*  Events of a plain fd, asked for (LOOP_IN, LOOP_OUT) and reported (also LOOP_ERR: an error
 *  or hang-up, always reported). */
#define LOOP_IN 1
#define LOOP_OUT 2
#define LOOP_ERR 4

typedef struct loop loop_t;

/*  Handlers return 0 to go on, or -1 to stop the loop (loop_run returns after the handler).
 *  Any handler may register or end any item, its own included, and arm or end any timer:
 *  an item ended during a turn is never called again, and is freed when the turn is over. */
/*  A message may be received on sock. Called at most once per socket per turn, and again on
 *  the next turn for as long as the socket stays readable, so receive one message per call. */
typedef int(loop_reader_fn)(loop_t *loop, zsock_t *sock, void *arg);
/*  fd is ready: revents holds LOOP_IN, LOOP_OUT and LOOP_ERR. Level-triggered: called on each
 *  turn while the condition lasts. */
typedef int(loop_fd_fn)(loop_t *loop, int fd, int revents, void *arg);
/*  The timer timer_id expired. */
typedef int(loop_timer_fn)(loop_t *loop, int timer_id, void *arg);

/*  A new loop. NULL with errno. */
loop_t *loop_new(void);
/*  Free the loop and every item and timer still registered (their handlers are not called;
 *  sockets and fds are not closed: they belong to their callers). No-op on NULL. Not from
 *  inside a handler. */
void loop_destroy(loop_t **self_p);

/*  Call handler when sock has a message to read. The socket stays the caller's; end the
 *  reader (loop_reader_end) before destroying it. 0, or -1 with errno (EEXIST: sock already
 *  has a reader). */
int loop_reader(loop_t *self, zsock_t *sock, loop_reader_fn *handler, void *arg);
/*  Stop reading sock. No-op when it has no reader. */
void loop_reader_end(loop_t *self, zsock_t *sock);
/*  Say that sock was used outside its own handler (a send, typically): the loop checks it
 *  for input before it next sleeps. Any operation on a ZeroMQ socket can swallow the wake-up
 *  of a message that is arriving, so a socket that a reader serves and that is sent on
 *  elsewhere must be touched after each send, or that message waits until another one comes.
 *  Cheap (no system call); no-op for sockets without a reader. */
void loop_reader_touch(loop_t *self, zsock_t *sock);

/*  Call sock's handler on the next turn whether or not a message is there: a handler that
 *  has more to do with what it read (in slices, so as not to hold up the others) asks from
 *  inside. No-op for sockets without a reader. */
void loop_reader_again(loop_t *self, zsock_t *sock);

/*  Call handler when fd has any of events (LOOP_IN, LOOP_OUT; errors always). The loop never
 *  ends an fd by itself, whatever it reports: a handler that ignores LOOP_ERR is called again.
 *  End it (loop_fd_end) before closing fd. 0, or -1 with errno (EEXIST: fd is registered). */
int loop_fd(loop_t *self, int fd, int events, loop_fd_fn *handler, void *arg);
/*  Change the events asked for on a registered fd. 0, or -1 with errno (ENOENT: not
 *  registered). */
int loop_fd_events(loop_t *self, int fd, int events);
/*  Stop watching fd. No-op when it is not registered. */
void loop_fd_end(loop_t *self, int fd);

/*  Call handler in delay_ms (monotonic clock), then every delay_ms after it returned, times
 *  times in all (0: until ended). A timer armed by a handler fires on a later turn, even with
 *  delay 0, so delay 0 means "on the next turn". Timers due at once fire in the order they
 *  were armed. Returns the timer's id (>= 0), valid until it has fired its last time or is
 *  ended, or -1 with errno. */
int loop_timer(loop_t *self, long long delay_ms, size_t times, loop_timer_fn *handler, void *arg);
/*  Re-arm a live timer to fire delay_ms from now, and every delay_ms after that when it
 *  repeats; a one-shot timer re-armed from its own handler fires once more. O(log n), so an
 *  idle clock can be reset on every message. 0, or -1 with errno (ENOENT: no such timer). */
int loop_timer_reset(loop_t *self, int timer_id, long long delay_ms);
/*  End a timer. No-op for ids that have fired their last time or been ended (as long as the
 *  id was not reused since: clear stored ids when a one-shot timer fires). */
void loop_timer_end(loop_t *self, int timer_id);

/*  Serve until a handler returns -1. 0 then, or -1 with errno when epoll fails. */
int loop_run(loop_t *self);

/*  The safety sweep: every interval_ms the loop checks a slice of the idle readers for input
 *  that came without a wake-up, serves it and logs a warning (a missing loop_reader_touch).
 *  On by default (100 ms); 0 turns it off (the unit tests prove the rule without it). */
void loop_set_sweep(loop_t *self, long long interval_ms);
/*  How many wake-ups the sweep has found missing so far. */
size_t loop_missed(const loop_t *self);

#endif
