/*  kpipe: framing for the kernel pipe. The decoder never trusts a length: the frame length is
 *  checked against the limit before anything is allocated, and each part's length against
 *  what is left of the body before its buffer is. */
#include "kpipe.h"

#include "jvalid.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/*  Made at its part count's size (one small allocation: at KPIPE_MAX_PARTS, zeroed, a frame
 *  cost ~2,500 instructions, three times a cell). */
struct kpipe_frame {
    size_t n;        /* parts begun */
    void **handle;   /* what owns each part's bytes; NULL once taken */
    char *utf8;      /* 0 once a part's bytes are found not to be UTF-8 */
    kpipe_alloc_t alloc;
    kpipe_iov_t part[];
};

struct kpipe {
    size_t max_frame;
    kpipe_alloc_t alloc;
    uint8_t word[4];       /* a length being read: the frame's, its part count, a part's */
    size_t word_have;
    int in_body;           /* the frame's length has been read and allowed */
    size_t body_len;
    size_t body_have;      /* bytes of the body read, lengths included */
    size_t nparts;         /* 0 until the part count is read */
    kpipe_frame_t *frame;  /* the parts read so far; the last one may be partly filled */
    size_t part_have;      /* bytes of frame's last part read */
    size_t utf8_at;        /* bytes of it checked as UTF-8 */
    int error;             /* sticky: a malformed stream is never resynchronised */
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
    util_hugepage_hint(buf, 4 + body); /* a snapshot sent to a kernel: tens of MB */
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

int kpipe_frame_part_utf8(const kpipe_frame_t *frame, size_t i)
{
    return frame->utf8[i];
}

void *kpipe_frame_take(kpipe_frame_t *frame, size_t i)
{
    void *h = frame->handle[i];
    frame->handle[i] = NULL;
    return h;
}

void kpipe_frame_destroy(kpipe_frame_t **frame_p)
{
    if (!frame_p || !*frame_p)
        return;
    kpipe_frame_t *f = *frame_p;
    for (size_t i = 0; i < f->n; i++)
        if (f->handle[i])
            f->alloc.release(f->alloc.arg, f->handle[i]);
    free(f);
    *frame_p = NULL;
}

static void *s_malloc(void *arg, size_t len, void **handle)
{
    (void)arg;
    return *handle = malloc(len ? len : 1);
}

static void s_free(void *arg, void *handle)
{
    (void)arg;
    free(handle);
}

kpipe_t *kpipe_new(size_t max_frame)
{
    kpipe_alloc_t plain = {s_malloc, s_free, NULL};
    return kpipe_new_with(max_frame, &plain);
}

kpipe_t *kpipe_new_with(size_t max_frame, const kpipe_alloc_t *alloc)
{
    kpipe_t *self = calloc(1, sizeof *self);
    if (self) {
        self->max_frame = max_frame;
        self->alloc = *alloc;
    }
    return self;
}

void kpipe_destroy(kpipe_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kpipe_frame_destroy(&(*self_p)->frame);
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

/*  Read a 4-byte length into self->word, of the body when in_body: 1 once whole, 0 when the
 *  fed bytes ran out. */
static int s_word(kpipe_t *self)
{
    while (self->word_have < 4) {
        if (self->in_off == self->in_len)
            return 0;
        self->word[self->word_have++] = self->in[self->in_off++];
        self->body_have += self->in_body;
    }
    self->word_have = 0;
    return 1;
}

/*  One step of a frame's decoding: 1 when a frame is whole, 0 when more bytes are needed, 2
 *  to go on, or a KPIPE_E* code. */
static int s_step(kpipe_t *self)
{
    kpipe_frame_t *f = self->frame;
    if (!self->in_body) { /* the frame's length */
        if (!s_word(self))
            return 0;
        self->body_len = s_get32(self->word);
        if (self->body_len > self->max_frame)
            return KPIPE_ETOOBIG;
        if (self->body_len < 4)
            return KPIPE_ELAYOUT;
        self->in_body = 1;
        self->body_have = self->nparts = 0;
        return 2;
    }
    if (self->nparts == 0) { /* the part count */
        if (!s_word(self))
            return 0;
        uint32_t n = s_get32(self->word);
        if (n == 0 || n > KPIPE_MAX_PARTS)
            return KPIPE_EPARTS;
        kpipe_frame_t *frame = malloc(sizeof *frame + n * (sizeof *frame->part +
                                                           sizeof *frame->handle + 1));
        if (!frame)
            return KPIPE_ENOMEM;
        *frame = (kpipe_frame_t){.handle = (void **)(frame->part + n), .alloc = self->alloc};
        frame->utf8 = (char *)(frame->handle + n);
        self->frame = frame;
        self->nparts = n;
        return 2;
    }
    if (f->n > 0 && self->part_have < f->part[f->n - 1].len) { /* the last part's bytes */
        size_t want = f->part[f->n - 1].len - self->part_have;
        size_t avail = self->in_len - self->in_off;
        size_t take = want < avail ? want : avail;
        if (take == 0)
            return 0;
        kpipe_iov_t *part = &f->part[f->n - 1];
        memcpy((uint8_t *)part->data + self->part_have, self->in + self->in_off, take);
        self->part_have += take;
        self->in_off += take;
        self->body_have += take;
        /* UTF-8 as it comes, but for a character the next bytes may finish (a binary part
         * stops this at its first stray byte). */
        size_t ready = self->part_have == part->len ? part->len
                       : self->part_have > 3        ? self->part_have - 3
                                                    : 0;
        if (f->utf8[f->n - 1] && ready > self->utf8_at &&
            jvalid_utf8_run(part->data, self->part_have, &self->utf8_at, ready - self->utf8_at) < 0)
            f->utf8[f->n - 1] = 0;
        return 2;
    }
    if (f->n == self->nparts) { /* every part read: the body must end here */
        if (self->body_have != self->body_len)
            return KPIPE_ELAYOUT;
        self->in_body = 0;
        return 1;
    }
    if (self->body_len - self->body_have < 4 - self->word_have)
        return KPIPE_ELAYOUT; /* no room left for the next part's length */
    if (!s_word(self))
        return 0;
    uint32_t len = s_get32(self->word);
    if (len > self->body_len - self->body_have)
        return KPIPE_ELAYOUT;
    void *handle = NULL;
    void *buf = self->alloc.alloc(self->alloc.arg, len, &handle);
    if (!buf)
        return KPIPE_ENOMEM;
    f->part[f->n] = (kpipe_iov_t){buf, len};
    f->handle[f->n] = handle;
    f->utf8[f->n] = 1;
    f->n++;
    self->part_have = self->utf8_at = 0;
    return 2;
}

int kpipe_next(kpipe_t *self, kpipe_frame_t **out)
{
    *out = NULL;
    if (self->error)
        return self->error;
    int rc;
    while ((rc = s_step(self)) == 2)
        ;
    if (rc == 1) {
        *out = self->frame;
        self->frame = NULL;
    } else if (rc < 0) {
        self->error = rc;
        kpipe_frame_destroy(&self->frame);
    }
    return rc;
}

int kpipe_finish(const kpipe_t *self)
{
    return (self->in_body || self->word_have > 0 || self->in_off < self->in_len) ? KPIPE_ETRUNC
                                                                                 : 0;
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
