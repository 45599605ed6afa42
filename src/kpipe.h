/*  kpipe: the length-prefixed frames of the kernel pipe (protocol/kernel-pipe.md):
 *  `len:u32be body`, body = `nparts:u32be (plen:u32be bytes)…`. An encoder, and an incremental
 *  decoder that checks every length against its limits before it allocates, and reads each
 *  part into a buffer of its own as it comes. No I/O. */
#ifndef KENNEL_KPIPE_H
#define KENNEL_KPIPE_H

#include <stddef.h>
#include <stdint.h>

#define KPIPE_MAX_PARTS 64
/*  What a frame adds to its parts: its length, each part's, and room for an op header. */
#define KPIPE_FRAME_SLACK (4 + 4 * KPIPE_MAX_PARTS + 4096)
/*  The largest frame a kernel sends (kennel_pipe.MAX_FRAME_BYTES). */
#define KERNEL_SEND_MAX (64u << 20)

/*  Error codes (negative); 0 and 1 are success values of kpipe_next. */
#define KPIPE_ENOMEM -1    /* allocation failed */
#define KPIPE_ETOOBIG -2   /* frame length over the limit */
#define KPIPE_EPARTS -3    /* part count 0 or over KPIPE_MAX_PARTS */
#define KPIPE_ELAYOUT -4   /* part lengths do not fill the body exactly */
#define KPIPE_ETRUNC -5    /* the stream ended inside a frame */

typedef struct {
    const void *data;
    size_t len;
} kpipe_iov_t;

/*  Encode one frame of n parts into a malloc'd buffer (caller owns *out). 0, or a KPIPE_E*
 *  code (ETOOBIG when over max_frame, EPARTS for a bad part count). */
int kpipe_encode(const kpipe_iov_t *parts, size_t n, size_t max_frame, uint8_t **out,
                 size_t *out_len);

/*  Where a decoder puts each part's bytes as they come, so that a large part (a kernel's
 *  output) can be handed on as it is instead of copied out of the frame: alloc returns a
 *  buffer of len bytes (len may be 0) and sets *handle to what owns it, or returns NULL;
 *  release frees a handle. kpipe_new's: malloc and free, the handle being the buffer. */
typedef struct {
    void *(*alloc)(void *arg, size_t len, void **handle);
    void (*release)(void *arg, void *handle);
    void *arg;
} kpipe_alloc_t;

/*  A decoded frame: each part in its own buffer, from the decoder's allocator. */
typedef struct kpipe_frame kpipe_frame_t;
size_t kpipe_frame_count(const kpipe_frame_t *frame);
/*  Part i (borrowed, valid until the frame is destroyed, or its handle is taken and freed). */
kpipe_iov_t kpipe_frame_part(const kpipe_frame_t *frame, size_t i);
/*  1 when part i's bytes are all UTF-8 (as jvalid_utf8 reads them), checked as they came, so
 *  that the part's JSON check may read its strings without decoding them
 *  (JVALID_UTF8_CHECKED); else 0. */
int kpipe_frame_part_utf8(const kpipe_frame_t *frame, size_t i);
/*  Take part i's handle (the caller releases it); the frame no longer frees it. NULL when
 *  taken before. */
void *kpipe_frame_take(kpipe_frame_t *frame, size_t i);
void kpipe_frame_destroy(kpipe_frame_t **frame_p);

typedef struct kpipe kpipe_t;
/*  An incremental decoder accepting frames of at most max_frame body bytes. */
kpipe_t *kpipe_new(size_t max_frame);
/*  The same, with parts in buffers from alloc (copied). */
kpipe_t *kpipe_new_with(size_t max_frame, const kpipe_alloc_t *alloc);
void kpipe_destroy(kpipe_t **self_p);
/*  Append bytes read from the pipe. 0, or KPIPE_ENOMEM. */
int kpipe_feed(kpipe_t *self, const void *data, size_t len);
/*  Take the next whole frame: 1 and an owned *out, 0 when more bytes are needed, or a KPIPE_E*
 *  code once the stream is malformed (the decoder then stays failed). */
int kpipe_next(kpipe_t *self, kpipe_frame_t **out);
/*  Call at EOF: 0 when no partial frame is pending, else KPIPE_ETRUNC. */
int kpipe_finish(const kpipe_t *self);
/*  A short description of a KPIPE_E* code. */
const char *kpipe_strerror(int code);

#endif
