/*  Unit tests of replay, the replay guard's memory: it agrees with a plain list of the last
 *  `window` keys on long random streams (fresh keys, repeats, keys just inside and just
 *  outside the window), also when the keys' homes crowd the end of the index so that its
 *  chains wrap around and mix (where backward-shift deletion goes wrong), and it allocates
 *  only as keys come. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "../harness.h"
#include "replay.h"

typedef unsigned char rkey_t[REPLAY_KEY_BYTES];

/*  Key number n, spread over the index by the hash. */
static void s_key(rkey_t key, uint32_t n)
{
    memset(key, 0, REPLAY_KEY_BYTES);
    uint64_t x = (uint64_t)n * 0x9e3779b97f4a7c15u + 1;
    memcpy(key, &x, sizeof x);
}

/*  The inverse of an odd a modulo 2^64 (Newton's iteration). */
static uint64_t s_inverse(uint64_t a)
{
    uint64_t x = a;
    for (int i = 0; i < 6; i++)
        x *= 2 - a * x;
    return x;
}

/*  Key number n for a guard seeded with seed whose index has 1 << bits slots: its home slot
 *  is one of the last two or the first three, by n, so chains wrap round the end and mix. */
static void s_crowded_key(rkey_t key, uint32_t n, uint64_t seed, unsigned bits)
{
    static const uint64_t homes[] = {126, 127, 0, 1, 2};
    uint64_t home = homes[n % 5] & (((uint64_t)1 << bits) - 1);
    uint64_t product = (home << (64 - bits)) + n; /* n < 2^(64 - bits): the same home */
    uint64_t x = product * s_inverse(seed | 1);
    memset(key, 0, REPLAY_KEY_BYTES);
    memcpy(key, &x, sizeof x); /* bytes 8-15 stay zero: the home is x * (seed | 1) >> ... */
}

/*  The model: 1 if n is among the last `window` distinct keys remembered. */
static int s_model_check(uint32_t *ring, size_t window, size_t *used, size_t *next, uint32_t n)
{
    for (size_t i = 0; i < *used; i++)
        if (ring[i] == n)
            return 1;
    if (*used < window)
        ring[(*used)++] = n;
    else {
        ring[*next] = n;
        *next = (*next + 1) % window;
    }
    return 0;
}

/*  crowd_bits: 0 for keys spread by a random seed; else keys crowding the wrap of an index of
 *  1 << crowd_bits slots (the size it has once the window is full). */
static void s_agrees_with_model(size_t window, unsigned crowd_bits, unsigned steps, uint32_t span)
{
    const uint64_t seed = 0x5eed5eed12345677u;
    replay_t *r = crowd_bits ? replay_new_seeded(window, seed) : replay_new(window);
    uint32_t *ring = calloc(window, sizeof *ring);
    CHECK(r != NULL && ring != NULL);
    if (!r || !ring) {
        free(ring);
        replay_destroy(&r);
        return;
    }
    size_t used = 0, next = 0;
    unsigned disagreements = 0, replays = 0;
    srand((unsigned)(window * 7919 + crowd_bits));
    for (unsigned i = 0; i < steps; i++) {
        /* Mostly new keys, often one of the last few (in and out of the window). */
        uint32_t n = rand() % 3 ? (uint32_t)i + span
                                : (uint32_t)i + span - 1 - (uint32_t)(rand() % (2 * window + 2));
        rkey_t key;
        if (crowd_bits)
            s_crowded_key(key, n, seed, crowd_bits);
        else
            s_key(key, n);
        int want = s_model_check(ring, window, &used, &next, n);
        int got = replay_check(r, key);
        disagreements += got != want;
        replays += want;
    }
    CHECK_EQ_INT(disagreements, 0);
    CHECK(replays > 0 && replays < steps); /* the stream held both */
    CHECK_EQ_INT(replay_size(r), used);
    CHECK(replay_capacity(r) <= window);
    free(ring);
    replay_destroy(&r);
    CHECK(r == NULL);
}

TEST(agrees_with_a_list_of_the_last_keys)
{
    size_t windows[] = {1, 2, 3, 4, 63, 64, 65, 100, 1000};
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++)
        s_agrees_with_model(windows[i], 0, 6000, 1000000);
}

TEST(agrees_when_chains_wrap_round_the_index)
{
    /* Windows whose full index has 128 slots (capacity 33..64): homes 126, 127, 0, 1, 2. */
    size_t windows[] = {33, 40, 64};
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++)
        s_agrees_with_model(windows[i], 7, 4000, 1000000);
}

TEST(memory_grows_with_use)
{
    replay_t *r = replay_new(8192);
    CHECK(r != NULL);
    if (!r)
        return;
    CHECK_EQ_INT(replay_capacity(r), 0);
    rkey_t key;
    for (uint32_t n = 0; n < 40; n++) {
        s_key(key, n);
        CHECK_EQ_INT(replay_check(r, key), 0);
    }
    CHECK_EQ_INT(replay_capacity(r), 64);
    for (uint32_t n = 40; n < 20000; n++) {
        s_key(key, n);
        CHECK_EQ_INT(replay_check(r, key), 0);
    }
    CHECK_EQ_INT(replay_capacity(r), 8192);
    CHECK_EQ_INT(replay_size(r), 8192);
    s_key(key, 20000 - 8192); /* the oldest still remembered */
    CHECK_EQ_INT(replay_check(r, key), 1);
    s_key(key, 20000 - 8193); /* one older: forgotten */
    CHECK_EQ_INT(replay_check(r, key), 0);
    replay_destroy(&r);
}

TEST(bad_windows)
{
    CHECK(replay_new(0) == NULL);
    CHECK(replay_new((size_t)REPLAY_MAX_WINDOW + 1) == NULL);
    replay_t *r = replay_new(REPLAY_MAX_WINDOW);
    CHECK(r != NULL);
    replay_destroy(&r);
    replay_destroy(&r); /* no-op on NULL */
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    RUN(agrees_with_a_list_of_the_last_keys);
    RUN(agrees_when_chains_wrap_round_the_index);
    RUN(memory_grows_with_use);
    RUN(bad_windows);
    return harness_done();
}
