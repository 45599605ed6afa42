/*  replyq: replies a ROUTER socket could not send yet, kept in order for each peer.
 *
 *  A ROUTER drops a message for a peer whose pipe is full (its send high-water mark), and
 *  says nothing: a client that pipelined more requests than the mark, and whose replies came
 *  faster than libzmq's I/O thread moved them on, never got some of its answers. Made
 *  ZMQ_ROUTER_MANDATORY, the socket says "not now" instead (EAGAIN); the replyq keeps such a
 *  reply, and every later one for that peer, and sends them in order when asked to flush.
 *  It is bounded per peer in replies and in bytes: past that, a peer does not read its
 *  replies, and the new one is dropped as before. It does no I/O and keeps no clock: its
 *  owner gives it the function that sends and flushes it from a timer while it holds any. */
#ifndef KENNEL_REPLYQ_H
#define KENNEL_REPLYQ_H

#include <stddef.h>

#include <czmq.h>

/*  Send *msg_p, whose first frame is the peer's routing id, without blocking: 0 sent (the
 *  message taken), 1 not now (*msg_p kept, untouched), -1 failed for good (no such peer:
 *  the message taken). */
typedef int(replyq_send_fn)(void *arg, zmsg_t **msg_p);

typedef struct replyq replyq_t;

/*  At most max_replies and max_bytes held for one peer (at least one reply, whatever its
 *  size, while the total allows), and max_total bytes for all peers together. NULL on
 *  allocation failure. */
replyq_t *replyq_new(size_t max_replies, size_t max_bytes, size_t max_total, replyq_send_fn *send,
                     void *arg);
/*  Free; what is held is dropped. No-op on NULL. */
void replyq_destroy(replyq_t **self_p);
/*  Send *msg_p now, or hold it behind what its peer has held already. Takes *msg_p. 0 sent
 *  or held, -1 dropped: over its peer's bounds, or its send failed for good. */
int replyq_put(replyq_t *self, zmsg_t **msg_p);
/*  Send what is held, each peer's in order, until each peer's would block. Returns how
 *  many replies are still held. */
size_t replyq_flush(replyq_t *self);
/*  Replies held now, all peers. */
size_t replyq_held(const replyq_t *self);
/*  Replies dropped so far over a peer's bounds or the total. */
size_t replyq_dropped(const replyq_t *self);

#endif
