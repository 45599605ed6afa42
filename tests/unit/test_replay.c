/*  Unit tests of replay, the replay guard's memory: it agrees with a plain list of the last
 *  `window` keys on long random streams (fresh keys, repeats, keys just inside and just
 *  outside the window), also when every key lands in one chain of its index, and it
 *  allocates only as keys come. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "../harness.h"
#include "replay.h"

typedef unsigned char rkey_t[REPLAY_KEY_BYTES];

/*  Key number n. same_home: the first 8 bytes (what the index hashes) are the same for all. */
static void s_key(rkey_t key, uint32_t n, int same_home)
{
    memset(key, 0, REPLAY_KEY_BYTES);
    if (same_home)
        memcpy(key + 8, &n, sizeof n);
    else {
        uint64_t x = (uint64_t)n * 0x9e3779b97f4a7c15u + 1; /* spread over the 8 bytes */
        memcpy(key, &x, sizeof x);
        memcpy(key + 8, &n, sizeof n);
    }
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

static void s_agrees_with_model(size_t window, int same_home, unsigned steps, uint32_t span)
{
    replay_t *r = replay_new(window);
    CHECK(r != NULL);
    if (!r)
        return;
    uint32_t *ring = calloc(window, sizeof *ring);
    size_t used = 0, next = 0;
    unsigned disagreements = 0, replays = 0;
    srand((unsigned)(window * 7919 + (size_t)same_home));
    for (unsigned i = 0; i < steps; i++) {
        /* Mostly new keys, often one of the last few (in and out of the window). */
        uint32_t n = rand() % 3 ? (uint32_t)i + span
                                : (uint32_t)i + span - 1 - (uint32_t)(rand() % (2 * window + 2));
        rkey_t key;
        s_key(key, n, same_home);
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

TEST(agrees_when_every_key_shares_one_chain)
{
    /* Deleting from a single long cluster is where backward-shift deletion goes wrong. */
    size_t windows[] = {1, 2, 5, 64, 130};
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++)
        s_agrees_with_model(windows[i], 1, 3000, 1000000);
}

TEST(memory_grows_with_use)
{
    replay_t *r = replay_new(8192);
    CHECK_EQ_INT(replay_capacity(r), 0);
    rkey_t key;
    for (uint32_t n = 0; n < 40; n++) {
        s_key(key, n, 0);
        CHECK_EQ_INT(replay_check(r, key), 0);
    }
    CHECK_EQ_INT(replay_capacity(r), 64);
    for (uint32_t n = 40; n < 20000; n++) {
        s_key(key, n, 0);
        CHECK_EQ_INT(replay_check(r, key), 0);
    }
    CHECK_EQ_INT(replay_capacity(r), 8192);
    CHECK_EQ_INT(replay_size(r), 8192);
    s_key(key, 20000 - 8192, 0); /* the oldest still remembered */
    CHECK_EQ_INT(replay_check(r, key), 1);
    s_key(key, 20000 - 8193, 0); /* one older: forgotten */
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
    RUN(agrees_when_every_key_shares_one_chain);
    RUN(memory_grows_with_use);
    RUN(bad_windows);
    return harness_done();
}
