/*  frames: see frames.h. */
#include "frames.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*  A moved part of more bytes than this goes to libzmq without a copy: below it, a copy costs
 *  less than what a part handed over costs (libzmq's content record, the zframe_t kept until
 *  libzmq is done). */
#define FRAMES_MOVE_MIN 1024

struct frames {
    size_t n, cap;
    size_t bytes;
    zmq_msg_t part[];
};

frames_t *frames_new(size_t cap)
{
    frames_t *self = malloc(sizeof *self + cap * sizeof(zmq_msg_t));
    if (self)
        *self = (frames_t){.cap = cap};
    return self;
}

void frames_destroy(frames_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    frames_t *self = *self_p;
    for (size_t i = 0; i < self->n; i++)
        zmq_msg_close(&self->part[i]);
    free(self);
    *self_p = NULL;
}

int frames_addmem(frames_t *self, const void *data, size_t len)
{
    if (self->n == self->cap || zmq_msg_init_size(&self->part[self->n], len) < 0)
        return -1;
    if (len)
        memcpy(zmq_msg_data(&self->part[self->n]), data, len);
    self->n++;
    self->bytes += len;
    return 0;
}

/*  libzmq's free function of a part handed over: the frame that holds its bytes. */
static void s_frame_free(void *data, void *hint)
{
    (void)data;
    zframe_t *f = hint;
    zframe_destroy(&f);
}

int frames_add_frame(frames_t *self, zframe_t **frame_p)
{
    zframe_t *f = *frame_p;
    *frame_p = NULL;
    if (!f)
        return -1;
    size_t len = zframe_size(f);
    if (len <= FRAMES_MOVE_MIN) {
        int rc = frames_addmem(self, zframe_data(f), len);
        zframe_destroy(&f);
        return rc;
    }
    if (self->n == self->cap ||
        zmq_msg_init_data(&self->part[self->n], zframe_data(f), len, s_frame_free, f) < 0) {
        zframe_destroy(&f);
        return -1;
    }
    self->n++;
    self->bytes += len;
    return 0;
}

size_t frames_count(const frames_t *self)
{
    return self->n;
}

size_t frames_bytes(const frames_t *self)
{
    return self->bytes;
}

zmq_msg_t *frames_part(frames_t *self, size_t i)
{
    return &self->part[i];
}

frames_t *frames_dup(frames_t *self)
{
    frames_t *copy = frames_new(self->n);
    if (!copy)
        return NULL;
    for (size_t i = 0; i < self->n; i++) {
        if (zmq_msg_init(&copy->part[i]) < 0 || zmq_msg_copy(&copy->part[i], &self->part[i]) < 0) {
            frames_destroy(&copy);
            return NULL;
        }
        copy->n++;
    }
    copy->bytes = self->bytes;
    return copy;
}

int frames_send(frames_t **self_p, void *sock, int dontwait)
{
    frames_t *self = *self_p;
    if (!self)
        return -1;
    int rc = 0, err = 0;
    sock = zsock_resolve(sock);
    for (size_t i = 0; i < self->n; i++) {
        int flags = (i + 1 < self->n ? ZMQ_SNDMORE : 0) | (dontwait ? ZMQ_DONTWAIT : 0);
        if (zmq_msg_send(&self->part[i], sock, flags) < 0) {
            err = errno;
            rc = -1;
            break; /* the rest is only freed */
        }
    }
    frames_destroy(self_p);
    if (rc < 0)
        errno = err;
    return rc;
}

zmsg_t *frames_zmsg(frames_t *self)
{
    zmsg_t *z = zmsg_new();
    for (size_t i = 0; z && i < self->n; i++)
        if (zmsg_addmem(z, zmq_msg_data(&self->part[i]), zmq_msg_size(&self->part[i])) < 0)
            zmsg_destroy(&z);
    return z;
}
