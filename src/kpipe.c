/*  kpipe: framing for the kernel pipe. The decoder never trusts a length: the frame length is
 *  checked against the limit before the body buffer is allocated, and part lengths are checked
 *  against what is left of the body before they are used. */
#include "kpipe.h"

#include <stdlib.h>
#include <string.h>

struct kpipe_frame {
    size_t n;
    kpipe_iov_t part[KPIPE_MAX_PARTS];
    uint8_t *body; /* owns the bytes the parts point into */
};

struct kpipe {
    size_t max_frame;
    uint8_t hdr[4];    /* the length prefix being read */
    size_t hdr_have;
    uint8_t *body;     /* the body being read, once its length is known and allowed */
    size_t body_len;
    size_t body_have;
    int error;         /* sticky: a malformed stream is never resynchronised */
    /* Bytes fed but not yet consumed. */
    uint8_t *in;
    size_t in_len, in_off, in_cap;
};

static void s_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t s_get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int kpipe_encode(const kpipe_iov_t *parts, size_t n, size_t max_frame, uint8_t **out,
                 size_t *out_len)
{
    if (n == 0 || n > KPIPE_MAX_PARTS)
        return KPIPE_EPARTS;
    size_t body = 4;
    for (size_t i = 0; i < n; i++) {
        if (parts[i].len > max_frame)
            return KPIPE_ETOOBIG;
        body += 4 + parts[i].len;
        if (body > max_frame)
            return KPIPE_ETOOBIG;
    }
    uint8_t *buf = malloc(4 + body);
    if (!buf)
        return KPIPE_ENOMEM;
    s_put32(buf, (uint32_t)body);
    s_put32(buf + 4, (uint32_t)n);
    uint8_t *p = buf + 8;
    for (size_t i = 0; i < n; i++) {
        s_put32(p, (uint32_t)parts[i].len);
        if (parts[i].len)
            memcpy(p + 4, parts[i].data, parts[i].len);
        p += 4 + parts[i].len;
    }
    *out = buf;
    *out_len = 4 + body;
    return 0;
}

size_t kpipe_frame_count(const kpipe_frame_t *frame)
{
    return frame->n;
}

kpipe_iov_t kpipe_frame_part(const kpipe_frame_t *frame, size_t i)
{
    return frame->part[i];
}

void kpipe_frame_destroy(kpipe_frame_t **frame_p)
{
    if (!frame_p || !*frame_p)
        return;
    free((*frame_p)->body);
    free(*frame_p);
    *frame_p = NULL;
}

kpipe_t *kpipe_new(size_t max_frame)
{
    kpipe_t *self = calloc(1, sizeof *self);
    if (self)
        self->max_frame = max_frame;
    return self;
}

void kpipe_destroy(kpipe_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->body);
    free((*self_p)->in);
    free(*self_p);
    *self_p = NULL;
}

int kpipe_feed(kpipe_t *self, const void *data, size_t len)
{
    if (self->in_off == self->in_len)
        self->in_off = self->in_len = 0;
    if (self->in_len + len > self->in_cap) {
        /* Compact first; grow only when the unconsumed bytes really need it. */
        size_t live = self->in_len - self->in_off;
        if (live) /* else in may still be NULL: memmove takes no NULL, even for 0 bytes */
            memmove(self->in, self->in + self->in_off, live);
        self->in_off = 0;
        self->in_len = live;
        if (live + len > self->in_cap) {
            size_t cap = self->in_cap ? self->in_cap : 65536;
            while (cap < live + len)
                cap *= 2;
            uint8_t *in = realloc(self->in, cap);
            if (!in)
                return KPIPE_ENOMEM;
            self->in = in;
            self->in_cap = cap;
        }
    }
    memcpy(self->in + self->in_len, data, len);
    self->in_len += len;
    return 0;
}

/*  Parse a complete body into parts; the frame takes the body. */
static int s_parse(kpipe_t *self, kpipe_frame_t **out)
{
    const uint8_t *p = self->body, *end = self->body + self->body_len;
    if (self->body_len < 4)
        return KPIPE_ELAYOUT;
    uint32_t n = s_get32(p);
    p += 4;
    if (n == 0 || n > KPIPE_MAX_PARTS)
        return KPIPE_EPARTS;
    kpipe_frame_t *f = calloc(1, sizeof *f);
    if (!f)
        return KPIPE_ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        if ((size_t)(end - p) < 4)
            goto layout;
        uint32_t len = s_get32(p);
        p += 4;
        if ((size_t)(end - p) < len)
            goto layout;
        f->part[i].data = p;
        f->part[i].len = len;
        p += len;
    }
    if (p != end)
        goto layout;
    f->n = n;
    f->body = self->body;
    self->body = NULL;
    *out = f;
    return 1;
layout:
    free(f);
    return KPIPE_ELAYOUT;
}

int kpipe_next(kpipe_t *self, kpipe_frame_t **out)
{
    *out = NULL;
    if (self->error)
        return self->error;
    while (self->hdr_have < 4) {
        if (self->in_off == self->in_len)
            return 0;
        self->hdr[self->hdr_have++] = self->in[self->in_off++];
        if (self->hdr_have == 4) {
            self->body_len = s_get32(self->hdr);
            if (self->body_len > self->max_frame)
                return self->error = KPIPE_ETOOBIG;
            self->body = malloc(self->body_len ? self->body_len : 1);
            if (!self->body)
                return self->error = KPIPE_ENOMEM;
            self->body_have = 0;
        }
    }
    size_t want = self->body_len - self->body_have;
    size_t avail = self->in_len - self->in_off;
    size_t take = want < avail ? want : avail;
    memcpy(self->body + self->body_have, self->in + self->in_off, take);
    self->body_have += take;
    self->in_off += take;
    if (self->body_have < self->body_len)
        return 0;
    self->hdr_have = 0;
    int rc = s_parse(self, out);
    free(self->body);
    self->body = NULL;
    if (rc < 0)
        self->error = rc;
    return rc;
}

int kpipe_finish(const kpipe_t *self)
{
    return (self->hdr_have > 0 || self->in_off < self->in_len) ? KPIPE_ETRUNC : 0;
}

const char *kpipe_strerror(int code)
{
    switch (code) {
    case 0: return "ok";
    case KPIPE_ENOMEM: return "out of memory";
    case KPIPE_ETOOBIG: return "frame over the size limit";
    case KPIPE_EPARTS: return "bad part count";
    case KPIPE_ELAYOUT: return "part lengths do not fill the frame";
    case KPIPE_ETRUNC: return "stream ended inside a frame";
    default: return "unknown kernel-pipe error";
    }
}
