/*  gwqueue: a FIFO of messages with a byte count, for kennel-gateway: what waits to be
 *  written to one WebSocket (encoded frames), and what a dropped WebSocket's client missed
 *  (Jupyter messages, kept for its return). No I/O. */
#ifndef KENNEL_GWQUEUE_H
#define KENNEL_GWQUEUE_H

#include <stddef.h>

#include "jmsg.h"

typedef struct gwqueue_item {
    struct gwqueue_item *next;
    unsigned char *buf; /* an encoded frame (with headroom before it), or NULL */
    size_t len;         /* the frame's bytes, or the message's */
    int is_binary;
    jmsg_t *msg; /* a message kept for replay, or NULL */
    int channel; /* the message's gwproto channel */
} gwqueue_item_t;

typedef struct {
    gwqueue_item_t *head, *tail;
    size_t bytes, count;
    size_t dropped;     /* items dropped from the front to stay under a cap */
    long long since_ms; /* monotonic: when the queue was started (replay buffers' age) */
} gwqueue_t;

/*  Append a frame (buf taken, also on failure). 0, or -1 when memory is short. */
int gwqueue_push_frame(gwqueue_t *q, unsigned char *buf, size_t len, int is_binary);
/*  Append a message (*msg_p taken, also on failure) counted as len bytes. 0 or -1. */
int gwqueue_push_msg(gwqueue_t *q, jmsg_t **msg_p, int channel, size_t len);
/*  Drop items from the front while the queue holds more than max_bytes (counting them in
 *  dropped). */
void gwqueue_trim(gwqueue_t *q, size_t max_bytes);
/*  Take the first item out (caller frees it with gwqueue_item_free), or NULL. */
gwqueue_item_t *gwqueue_pop(gwqueue_t *q);
void gwqueue_item_free(gwqueue_item_t **item_p);
/*  Free every item. The queue is then empty (since_ms and dropped are kept). */
void gwqueue_clear(gwqueue_t *q);

#endif
