/*  wire: Jupyter wire format (protocol 5.3) <-> jmsg_t.
 *  `[ids…] <IDS|MSG> signature header parent_header metadata content [buffers…]`
 *  Decoding checks limits, then verifies the HMAC over the raw frames, then rejects replays,
 *  and only then parses JSON. One wire_t per key: it holds the signer and the replay memory. */
#ifndef KENNEL_WIRE_H
#define KENNEL_WIRE_H

#include <stddef.h>

#include <czmq.h>

#include "frames.h"
#include "hmac.h"
#include "jmsg.h"

#define WIRE_DELIMITER "<IDS|MSG>"

/*  Error codes of wire_decode (0 is success). */
#define WIRE_ENOMEM -1     /* allocation failed */
#define WIRE_ENODELIM -2   /* no <IDS|MSG> delimiter within the identity limit */
#define WIRE_ETOOFEW -3    /* fewer than 5 frames after the delimiter */
#define WIRE_ETOOBIG -4    /* over the frame count or byte limits */
#define WIRE_ESIG -5       /* signature does not match */
#define WIRE_EREPLAY -6    /* signature seen recently: a replayed message */
#define WIRE_EJSON -7      /* a JSON part is not a UTF-8 JSON object */
#define WIRE_EHEADER -8    /* header lacks a non-empty string msg_id or msg_type, or is
                            * over WIRE_MAX_HEADER bytes */
#define WIRE_AGAIN 1       /* wire_decode_step: not done; step again */

/*  The largest header a message may have (so it is also parsed whole: JMSG_PARSE_MAX). */
#define WIRE_MAX_HEADER (64u << 10)
_Static_assert(WIRE_MAX_HEADER <= JMSG_PARSE_MAX, "a header is parsed whole");

typedef struct {
    size_t max_ids;          /* routing identity frames before the delimiter */
    size_t max_buffers;      /* binary buffers after content */
    size_t max_msg_bytes;    /* all frames together */
    size_t replay_window;    /* signatures remembered; 0 turns the guard off */
    size_t max_values;       /* JSON values and keys in one part (JMSG_MAX_VALUES) */
    size_t parse_max;        /* a larger part is parsed shallowly (JMSG_PARSE_MAX; SIZE_MAX:
                              * none is) */
    unsigned raw_parts;      /* parts (1u << JMSG_PARENT, _METADATA, _CONTENT) kept as checked
                              * bytes only, not parsed (jmsg_json is NULL): for a relay that
                              * passes them on unread. 0: all parsed. Never the header. */
} wire_limits_t;

/*  The defaults: 16 identities, 64 buffers, 64 MiB, 8192 signatures, every part parsed. */
void wire_limits_default(wire_limits_t *limits);

typedef struct wire wire_t;

/*  A codec for `key` (copied). limits NULL means the defaults. NULL on allocation failure. */
wire_t *wire_new(const void *key, size_t key_len, const wire_limits_t *limits);
/*  Wipe the key, free *self_p, set it to NULL. No-op on NULL. */
void wire_destroy(wire_t **self_p);
/*  Decode and verify. Takes *msg_p (always; sets it to NULL). On success stores an owned
 *  message in *out and returns 0; otherwise returns a WIRE_E* code and *out is NULL. */
int wire_decode(wire_t *self, zmsg_t **msg_p, jmsg_t **out);
/*  The same in steps, so that a large message's signature (HMAC-SHA256 over its JSON parts,
 *  ~3 ms a MiB here) is checked over several turns of a loop rather than holding up one.
 *  wire_decode_begin checks the frames (counts, sizes, the signature's length) and takes
 *  *msg_p (always): 0 and an owned *out to step, or a WIRE_E* code. wire_decode_step hashes
 *  up to `budget` more bytes of it: WIRE_AGAIN while some remain; then, as wire_decode, 0
 *  and an owned message in *out or a WIRE_E* code, *p_p freed and set to NULL.
 *  wire_pending_destroy drops one unfinished (no-op on NULL). */
typedef struct wire_pending wire_pending_t;
int wire_decode_begin(wire_t *self, zmsg_t **msg_p, wire_pending_t **out);
int wire_decode_step(wire_t *self, wire_pending_t **p_p, size_t budget, jmsg_t **out);
void wire_pending_destroy(wire_pending_t **p_p);
/*  Encode and sign msg (not taken). Caller owns the result. NULL on allocation failure. */
zmsg_t *wire_encode(wire_t *self, const jmsg_t *msg);
/*  The same, taking *msg_p (destroyed, also on failure): the frames of its raw parts and
 *  buffers move into the result rather than being copied. A kernel's output of tens of MiB
 *  cost the loop a copy into fresh pages, ~200 ms for 60 MiB on this VM. */
zmsg_t *wire_encode_take(wire_t *self, jmsg_t **msg_p);
/*  The same as frames (kenneld's send path: frames.h), with the signature part left blank
 *  (as many bytes as a signature), at index *sig_frame of the result, for wire_sign to
 *  fill, on another thread if need be. *signed_len: the bytes the signature covers. NULL
 *  on allocation failure. */
frames_t *wire_encode_unsigned(wire_t *self, jmsg_t **msg_p, size_t *sig_frame,
                               size_t *signed_len);
/*  The key self signs with (for hmac_dup). */
const hmac_t *wire_hmac(const wire_t *self);
/*  Sign f, from wire_encode_unsigned, in place. Touches nothing but f and hmac, so it may
 *  run on another thread while nothing else touches them. 0, or -1 if f is not such a
 *  message. */
int wire_sign(const hmac_t *hmac, frames_t *f, size_t sig_frame);
/*  Receive one multipart message from sock, keeping at most max_frames frames: a message of
 *  more is read to its end and dropped frame by frame (its frames are never all held at
 *  once), and WIRE_ETOOBIG returned. 0 with an owned *out, or a WIRE_E* code. */
int wire_recv(zsock_t *sock, size_t max_frames, zmsg_t **out);
/*  The most frames a message wire_decode accepts may have. */
size_t wire_max_frames(const wire_t *self);
/*  A short English description of a WIRE_E* code. */
const char *wire_strerror(int code);

#endif
