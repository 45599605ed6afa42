/*  outbox: a session's iopub output while its clients lag behind. A cell that prints in a
 *  loop can make messages far faster than a Python client reads them; sent one by one, they
 *  pile up for that client until something must be dropped. While the clients lag, the
 *  outbox holds the messages whose later ones replace or extend the earlier ones, and sends
 *  them merged: a stream's texts of one name become one message (at most one per name per
 *  flush, as ipykernel's flush interval gives), a clear_output takes away the streams it
 *  would clear, and an update_display_data replaces the held update of the same display.
 *  Any other message is sent after all that is held, so the order the client sees is the
 *  kernel's (but between stdout and stderr, which ipykernel does not order either).
 *  It does no I/O and keeps no clock: its owner says whether the clients lag, flushes it
 *  when its timer fires, and gives it the function that sends. */
#ifndef KENNEL_OUTBOX_H
#define KENNEL_OUTBOX_H

#include <stddef.h>

#include "jmsg.h"

/*  Send one iopub message; takes *msg_p. */
typedef void(outbox_send_fn)(void *arg, jmsg_t **msg_p);

typedef struct outbox outbox_t;

/*  Held at most: entries (a stream of one name and parent, a clear_output, a display's
 *  update), and bytes of one stream's text; past either, what is held is sent. */
#define OUTBOX_MAX_ENTRIES 64
#define OUTBOX_MAX_TEXT (256u << 10)

/*  NULL on allocation failure. */
outbox_t *outbox_new(outbox_send_fn *send, void *arg);
/*  Free; what is held is dropped, not sent. No-op on NULL. */
void outbox_destroy(outbox_t **self_p);
/*  An iopub message to send. While behind (the clients lag), a stream, clear_output or
 *  update_display_data is held, merged with what is held already; anything else, and
 *  anything while not behind, goes after what is held. Takes *msg_p. */
void outbox_put(outbox_t *self, jmsg_t **msg_p, int behind);
/*  Send what is held, in order. */
void outbox_flush(outbox_t *self);
/*  Messages held now (entries; 0 when empty). */
size_t outbox_held(const outbox_t *self);
/*  Messages merged away so far (not sent as such: their content went into another). */
size_t outbox_merged(const outbox_t *self);

#endif
