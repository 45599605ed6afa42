/*  Unit tests of kpipe: round trips fed byte by byte and in bulk, and every malformed case:
 *  oversize frame, zero and too many parts, part lengths that overrun or underfill the body,
 *  a truncated stream. */
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "kpipe.h"

static void s_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

TEST(round_trip_bytewise)
{
    kpipe_iov_t parts[] = {{"{\"op\":\"hello\"}", 14}, {"", 0}, {"\x00\x01\x02", 3}};
    uint8_t *buf;
    size_t len;
    CHECK_EQ_INT(kpipe_encode(parts, 3, 1024, &buf, &len), 0);
    CHECK_EQ_INT(len, 4 + 4 + (4 + 14) + 4 + (4 + 3));
    kpipe_t *d = kpipe_new(1024);
    kpipe_frame_t *f = NULL;
    for (size_t i = 0; i < len; i++) {
        CHECK_EQ_INT(kpipe_feed(d, buf + i, 1), 0);
        int rc = kpipe_next(d, &f);
        CHECK_EQ_INT(rc, i + 1 == len ? 1 : 0);
    }
    CHECK(f != NULL);
    if (f) {
        CHECK_EQ_INT(kpipe_frame_count(f), 3);
        kpipe_iov_t p0 = kpipe_frame_part(f, 0), p1 = kpipe_frame_part(f, 1), p2 = kpipe_frame_part(f, 2);
        CHECK(p0.len == 14 && memcmp(p0.data, "{\"op\":\"hello\"}", 14) == 0);
        CHECK_EQ_INT(p1.len, 0);
        CHECK(p2.len == 3 && memcmp(p2.data, "\x00\x01\x02", 3) == 0);
    }
    CHECK_EQ_INT(kpipe_finish(d), 0);
    kpipe_frame_destroy(&f);
    CHECK(f == NULL);
    kpipe_destroy(&d);
    free(buf);
}

TEST(many_frames_in_one_feed)
{
    kpipe_iov_t part = {"abc", 3};
    uint8_t *one;
    size_t len;
    kpipe_encode(&part, 1, 64, &one, &len);
    uint8_t *many = malloc(len * 100);
    for (int i = 0; i < 100; i++)
        memcpy(many + i * len, one, len);
    kpipe_t *d = kpipe_new(64);
    CHECK_EQ_INT(kpipe_feed(d, many, len * 100), 0);
    int frames = 0;
    kpipe_frame_t *f;
    while (kpipe_next(d, &f) == 1) {
        frames++;
        kpipe_frame_destroy(&f);
    }
    CHECK_EQ_INT(frames, 100);
    kpipe_destroy(&d);
    free(one);
    free(many);
}

TEST(encode_limits)
{
    kpipe_iov_t parts[KPIPE_MAX_PARTS + 1];
    for (int i = 0; i <= KPIPE_MAX_PARTS; i++)
        parts[i] = (kpipe_iov_t){"x", 1};
    uint8_t *buf = NULL;
    size_t len;
    CHECK_EQ_INT(kpipe_encode(parts, 0, 1024, &buf, &len), KPIPE_EPARTS);
    CHECK_EQ_INT(kpipe_encode(parts, KPIPE_MAX_PARTS + 1, 1024, &buf, &len), KPIPE_EPARTS);
    kpipe_iov_t big = {"0123456789", 10};
    CHECK_EQ_INT(kpipe_encode(&big, 1, 17, &buf, &len), KPIPE_ETOOBIG);
    CHECK_EQ_INT(kpipe_encode(&big, 1, 18, &buf, &len), 0);
    free(buf);
}

/*  Feed raw bytes and return the decoder's verdict. */
static int s_decode(const uint8_t *bytes, size_t len, size_t max)
{
    kpipe_t *d = kpipe_new(max);
    kpipe_feed(d, bytes, len);
    kpipe_frame_t *f = NULL;
    int rc = kpipe_next(d, &f);
    kpipe_frame_destroy(&f);
    /* A failed decoder stays failed. */
    if (rc < 0)
        CHECK_EQ_INT(kpipe_next(d, &f), rc);
    kpipe_destroy(&d);
    return rc;
}

TEST(oversize_frame_refused_before_allocating)
{
    uint8_t hdr[4];
    s_put32(hdr, 0xFFFFFFFFu); /* 4 GiB: must be refused from the prefix alone */
    CHECK_EQ_INT(s_decode(hdr, 4, 1 << 20), KPIPE_ETOOBIG);
}

TEST(bad_part_counts)
{
    uint8_t b[8];
    s_put32(b, 4);
    s_put32(b + 4, 0);
    CHECK_EQ_INT(s_decode(b, 8, 1024), KPIPE_EPARTS);
    s_put32(b + 4, KPIPE_MAX_PARTS + 1);
    CHECK_EQ_INT(s_decode(b, 8, 1024), KPIPE_EPARTS);
}

TEST(part_overruns_body)
{
    uint8_t b[16];
    s_put32(b, 12);      /* body: nparts, plen, 4 bytes */
    s_put32(b + 4, 1);
    s_put32(b + 8, 100); /* claims 100 bytes, body has 4 */
    memcpy(b + 12, "abcd", 4);
    CHECK_EQ_INT(s_decode(b, 16, 1024), KPIPE_ELAYOUT);
}

TEST(parts_underfill_body)
{
    uint8_t b[16];
    s_put32(b, 12);
    s_put32(b + 4, 1);
    s_put32(b + 8, 2); /* 2 bytes of part, 2 bytes left over */
    memcpy(b + 12, "abcd", 4);
    CHECK_EQ_INT(s_decode(b, 16, 1024), KPIPE_ELAYOUT);
}

TEST(body_too_short_for_count)
{
    uint8_t b[6];
    s_put32(b, 2);
    b[4] = b[5] = 0;
    CHECK_EQ_INT(s_decode(b, 6, 1024), KPIPE_ELAYOUT);
}

TEST(truncated_stream)
{
    kpipe_iov_t part = {"hello", 5};
    uint8_t *buf;
    size_t len;
    kpipe_encode(&part, 1, 64, &buf, &len);
    kpipe_t *d = kpipe_new(64);
    kpipe_feed(d, buf, len - 2);
    kpipe_frame_t *f = NULL;
    CHECK_EQ_INT(kpipe_next(d, &f), 0);
    CHECK_EQ_INT(kpipe_finish(d), KPIPE_ETRUNC);
    kpipe_destroy(&d);
    /* Only a partial length prefix is truncated too. */
    d = kpipe_new(64);
    kpipe_feed(d, buf, 2);
    CHECK_EQ_INT(kpipe_next(d, &f), 0);
    CHECK_EQ_INT(kpipe_finish(d), KPIPE_ETRUNC);
    kpipe_destroy(&d);
    free(buf);
}

/*  An allocator that counts, its handles being the buffers. */
static int s_allocs, s_releases;

static void *s_count_alloc(void *arg, size_t len, void **handle)
{
    (void)arg;
    s_allocs++;
    return *handle = malloc(len ? len : 1);
}

static void s_count_release(void *arg, void *handle)
{
    (void)arg;
    s_releases++;
    free(handle);
}

/*  Each part is read into a buffer of its own from the decoder's allocator, as it comes; a
 *  part taken is the caller's to release, the others go with the frame, or with the decoder
 *  when it is destroyed (or fails) half-way through a frame. */
TEST(parts_come_in_buffers_of_their_own)
{
    kpipe_alloc_t alloc = {s_count_alloc, s_count_release, NULL};
    kpipe_iov_t parts[] = {{"{\"op\":\"iopub\"}", 14}, {"{}", 2}, {"0123456789", 10}};
    uint8_t *buf;
    size_t len;
    kpipe_encode(parts, 3, 1024, &buf, &len);
    s_allocs = s_releases = 0;
    kpipe_t *d = kpipe_new_with(1024, &alloc);
    kpipe_frame_t *f = NULL;
    /* A part's buffer is there once its length is: before the frame is whole. */
    kpipe_feed(d, buf, len - 5);
    CHECK_EQ_INT(kpipe_next(d, &f), 0);
    CHECK_EQ_INT(s_allocs, 3);
    kpipe_feed(d, buf + len - 5, 5);
    CHECK_EQ_INT(kpipe_next(d, &f), 1);
    void *taken = kpipe_frame_take(f, 2);
    CHECK(taken == kpipe_frame_part(f, 2).data);
    CHECK(memcmp(taken, "0123456789", 10) == 0);
    CHECK(kpipe_frame_take(f, 2) == NULL);
    kpipe_frame_destroy(&f);
    CHECK_EQ_INT(s_releases, 2);
    s_count_release(NULL, taken);
    /* Destroyed inside a frame. */
    kpipe_feed(d, buf, len - 5);
    CHECK_EQ_INT(kpipe_next(d, &f), 0);
    kpipe_destroy(&d);
    CHECK_EQ_INT(s_allocs, 6);
    CHECK_EQ_INT(s_releases, 6);
    /* Failed inside a frame: the first part read, the second's length past the body. */
    d = kpipe_new_with(1024, &alloc);
    uint8_t bad[40];
    memcpy(bad, buf, 4 + 4 + 4 + 14);
    bad[26] = bad[27] = bad[28] = 0x7f; /* the second part's length */
    bad[29] = 0;
    kpipe_feed(d, bad, 30);
    CHECK_EQ_INT(kpipe_next(d, &f), KPIPE_ELAYOUT);
    CHECK_EQ_INT(s_allocs, 7);
    CHECK_EQ_INT(s_releases, 7);
    kpipe_destroy(&d);
    free(buf);
}

/*  Each part's UTF-8 is checked as its bytes come, a character cut between two reads
 *  included: what kenneld's JSON check of a kernel's output then need not decode. */
TEST(parts_are_checked_as_utf8_as_they_come)
{
    kpipe_iov_t parts[] = {{"{\"op\":\"iopub\"}", 14},
                           {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 done", 19},
                           {"x\xed\xa0\x80y", 5}, /* a surrogate */
                           {"ok \xc3", 4},          /* a character cut by the part's end */
                           {"", 0},
                           {"\x80", 1}};
    int expect[] = {1, 1, 0, 0, 1, 0};
    uint8_t *buf;
    size_t len;
    kpipe_encode(parts, 6, 1024, &buf, &len);
    for (size_t piece = 1; piece <= len; piece *= 3) {
        kpipe_t *d = kpipe_new(1024);
        kpipe_frame_t *f = NULL;
        int rc = 0;
        for (size_t off = 0; off < len && rc == 0; off += piece) {
            kpipe_feed(d, buf + off, off + piece <= len ? piece : len - off);
            rc = kpipe_next(d, &f);
        }
        CHECK_EQ_INT(rc, 1);
        for (size_t i = 0; f && i < 6; i++)
            CHECK_EQ_INT(kpipe_frame_part_utf8(f, i), expect[i]);
        kpipe_frame_destroy(&f);
        kpipe_destroy(&d);
    }
    free(buf);
}

int main(void)
{
    RUN(round_trip_bytewise);
    RUN(parts_come_in_buffers_of_their_own);
    RUN(parts_are_checked_as_utf8_as_they_come);
    RUN(many_frames_in_one_feed);
    RUN(encode_limits);
    RUN(oversize_frame_refused_before_allocating);
    RUN(bad_part_counts);
    RUN(part_overruns_body);
    RUN(parts_underfill_body);
    RUN(body_too_short_for_count);
    RUN(truncated_stream);
    return harness_done();
}
