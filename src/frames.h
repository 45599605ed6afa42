/*  frames: one multipart message to send, as an array of libzmq messages.
 *
 *  kenneld sends five or six messages a cell, each of seven or eight parts. Built as czmq's
 *  zmsg_t, every part cost a zframe_t and a list node, each calloc'd (glibc's calloc does
 *  not use its per-thread cache), then popped, sent and freed one by one: ~30 k
 *  instructions of a warm `1+1`'s ~380 k in kenneld went to that bookkeeping alone. Here a
 *  message is one allocation holding its parts' zmq_msg_t, made at the size the encoder
 *  knows it needs; a part of up to 33 bytes lives inside its zmq_msg_t (libzmq's small
 *  messages), a larger one costs libzmq one allocation, as before. Receiving still goes
 *  through czmq (wire_recv): see docs/design.md, "JSON on the hot path". */
#ifndef KENNEL_FRAMES_H
#define KENNEL_FRAMES_H

#include <stddef.h>

#include <czmq.h>
#include <zmq.h>

typedef struct frames frames_t;

/*  An empty message with room for cap parts (it never grows). NULL on allocation failure. */
frames_t *frames_new(size_t cap);
/*  Close every part and free *self_p; set it to NULL. No-op on NULL. */
void frames_destroy(frames_t **self_p);
/*  Append a copy of len bytes. 0, or -1 (out of memory, or no room: a caller's error). */
int frames_addmem(frames_t *self, const void *data, size_t len);
/*  Append *frame_p's bytes, taking *frame_p (also on failure): a large part is handed to
 *  libzmq without a copy (freed where libzmq frees it, on any thread), a small one copied.
 *  0 or -1. */
int frames_add_frame(frames_t *self, zframe_t **frame_p);
/*  Parts, and their bytes together. */
size_t frames_count(const frames_t *self);
size_t frames_bytes(const frames_t *self);
/*  Part i, i < frames_count (borrowed: the caller may read, write or move it; a part moved
 *  out must be left an initialised empty message, as zmq_msg_move leaves it). */
zmq_msg_t *frames_part(frames_t *self, size_t i);
/*  A copy sharing the parts' bytes (libzmq's reference counts; they must not be written
 *  after). NULL on allocation failure. */
frames_t *frames_dup(frames_t *self);
/*  Send every part to `sock` (a libzmq socket, or a czmq one: zsock_resolve), with
 *  ZMQ_DONTWAIT when dontwait; take *self_p (also on failure). 0, or -1 with errno the
 *  first failed part's (the parts after it are only freed). */
int frames_send(frames_t **self_p, void *sock, int dontwait);
/*  The same parts as a czmq message, copied (for tests and callers that keep a zmsg_t).
 *  NULL on allocation failure. */
zmsg_t *frames_zmsg(frames_t *self);

#endif
