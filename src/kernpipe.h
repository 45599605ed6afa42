/*  kernpipe: kenneld's end of one kernel's pipe, on the loop. Nothing blocks and no kernel
 *  can starve the others: frames to the kernel go through a bounded outbound buffer, written
 *  as the socket takes them; what the kernel writes is read at most a slice per wake-up and at
 *  most KERNPIPE_FRAMES_PER_TURN frames of it dispatched per turn of the loop (the rest waits
 *  for the next turn); a kernel past its cell's output cap is read only every 20 ms; reading
 *  pauses while the owner cannot pass messages on (kernpipe_pause). The codec is kpipe's;
 *  what a frame means is the owner's (ops->frame). Owns no fd: the pipe is the process's. */
#ifndef KENNEL_KERNPIPE_H
#define KENNEL_KERNPIPE_H

#include <stddef.h>

#include "kpipe.h"
#include "loop.h"

/*  Frames taken from one kernel per turn of the loop, at most (kernpipe.c says why). */
#define KERNPIPE_FRAMES_PER_TURN 128
#define KERNPIPE_TOO_LARGE -2 /* kernpipe_send: the parts do not fit in one frame */

typedef struct {
    /* A whole frame from the kernel (destroyed after the call; parts may be taken from it).
     * 0, or -1 with *why when it breaks the protocol. */
    int (*frame)(void *ctx, kpipe_frame_t *frame, const char **why);
    /* 1 while what the kernel sends is dropped unread (its cell passed its output cap): the
     * pipe then rests between reads. */
    int (*capped)(void *ctx);
    /* The kernel broke the pipe's protocol (why) and the pipe is closed: kill the kernel. */
    void (*violation)(void *ctx, const char *why);
} kernpipe_ops_t;

typedef struct kernpipe kernpipe_t;

/*  A closed pipe of the session id (for the log), taking frames of at most max_frame bytes,
 *  decoded with alloc (borrowed). NULL with errno. */
kernpipe_t *kernpipe_new(loop_t *loop, const char *id, size_t max_frame,
                         const kpipe_alloc_t *alloc, const kernpipe_ops_t *ops, void *ctx);
/*  Close and free. No-op on NULL. */
void kernpipe_destroy(kernpipe_t **self_p);
/*  Serve a new kernel's pipe fd (non-blocking), with a fresh decoder. 0, or -1 with errno
 *  (it stays closed). */
int kernpipe_open(kernpipe_t *self, int fd);
/*  Stop serving it: no more reads or writes, what waited to be written is dropped. */
void kernpipe_close(kernpipe_t *self);
/*  1 while open, else 0. */
int kernpipe_is_open(const kernpipe_t *self);
/*  Queue one frame of parts for the kernel and write what the pipe takes now. 0;
 *  KERNPIPE_TOO_LARGE; or -1 when the pipe is closed, or closes (a write failed, or the kernel
 *  stopped reading: a violation). */
int kernpipe_send(kernpipe_t *self, const kpipe_iov_t *parts, size_t n);
/*  Pass fd to the kernel (SCM_RIGHTS) with one byte, which the kernel reads with recvmsg
 *  outside its framing: only when it asked for it and nothing else is on its way to it (the
 *  out buffer empty; else -1 with EBUSY). The caller keeps its fd; fd -1 sends the byte
 *  alone (a refusal). 0, or -1 with errno. */
int kernpipe_send_fd(kernpipe_t *self, int fd);
/*  The kernel is gone: dispatch every frame it wrote before it went, paused or not. */
void kernpipe_drain(kernpipe_t *self);
/*  Stop reading until kernpipe_resume (the kernel waits, so what kenneld holds for it stays
 *  bounded); resume dispatches what was read before the pause first. No-ops when already so. */
void kernpipe_pause(kernpipe_t *self);
void kernpipe_resume(kernpipe_t *self);

#endif
