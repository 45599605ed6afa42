/*  replay: a FIFO ring of keys and an open-addressing index over it (linear probing, deletion
 *  by backward shift, so no tombstones pile up as the window slides). The index hashes both
 *  halves of a key by multiply-add-shift with random odd multipliers per guard: a peer who
 *  holds the HMAC key, and so can choose its digests, still cannot aim them at one chain of
 *  kenneld's table. */
#include "replay.h"

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#define FIRST_CAPACITY 64

struct replay {
    size_t window;
    unsigned char (*keys)[REPLAY_KEY_BYTES]; /* ring: [next] is the oldest once full */
    size_t capacity;                         /* entries in keys (grows up to window) */
    size_t used;                             /* keys remembered */
    size_t next;                             /* where the next key goes once used == window */
    uint32_t *index;                         /* slot -> ring position + 1; 0: empty */
    unsigned bits;                           /* the index has 1 << bits slots */
    uint64_t mul[2];                         /* odd: for the key's two 8-byte halves */
};

replay_t *replay_new_seeded(size_t window, uint64_t seed)
{
    if (window < 1 || window > REPLAY_MAX_WINDOW) {
        errno = EINVAL;
        return NULL;
    }
    replay_t *self = calloc(1, sizeof *self);
    if (!self) {
        errno = ENOMEM;
        return NULL;
    }
    self->window = window;
    self->mul[0] = seed | 1;
    self->mul[1] = (seed * 0x9e3779b97f4a7c15u + 0xd1b54a32d192ed03u) | 1; /* another odd */
    return self;
}

replay_t *replay_new(size_t window)
{
    uint64_t seed;
    randombytes_buf(&seed, sizeof seed);
    return replay_new_seeded(window, seed);
}

void replay_destroy(replay_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    replay_t *self = *self_p;
    free(self->keys);
    free(self->index);
    free(self);
    *self_p = NULL;
}

size_t replay_size(const replay_t *self)
{
    return self->used;
}

size_t replay_capacity(const replay_t *self)
{
    return self->capacity;
}

static size_t s_home(const replay_t *self, const unsigned char *key)
{
    uint64_t lo, hi;
    memcpy(&lo, key, sizeof lo);
    memcpy(&hi, key + 8, sizeof hi);
    return (size_t)((lo * self->mul[0] + hi * self->mul[1]) >> (64 - self->bits));
}

/*  The slot holding key, or the empty slot where the probe for it ends. */
static size_t s_probe(const replay_t *self, const unsigned char *key, int *found)
{
    size_t mask = ((size_t)1 << self->bits) - 1;
    size_t i = s_home(self, key);
    for (;;) {
        uint32_t at = self->index[i];
        if (at == 0) {
            *found = 0;
            return i;
        }
        if (memcmp(self->keys[at - 1], key, REPLAY_KEY_BYTES) == 0) {
            *found = 1;
            return i;
        }
        i = (i + 1) & mask;
    }
}

/*  Empty slot i, moving later entries of its cluster back so every probe still finds them. */
static void s_unlink(replay_t *self, size_t i)
{
    size_t mask = ((size_t)1 << self->bits) - 1;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        uint32_t at = self->index[j];
        if (at == 0)
            break;
        size_t home = s_home(self, self->keys[at - 1]);
        /* The entry at j may fill the hole at i unless its home lies cyclically in (i, j]. */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            self->index[i] = at;
            i = j;
        }
    }
    self->index[i] = 0;
}

/*  Room for one more key while the window is not full: twice the entries (up to the window)
 *  and an index at most half full, rebuilt. */
static int s_grow(replay_t *self)
{
    size_t capacity = self->capacity ? self->capacity * 2 : FIRST_CAPACITY;
    if (capacity > self->window)
        capacity = self->window;
    unsigned bits = 1;
    while (((size_t)1 << bits) < capacity * 2)
        bits++;
    unsigned char(*keys)[REPLAY_KEY_BYTES] = realloc(self->keys, capacity * sizeof *keys);
    if (!keys)
        return -1;
    self->keys = keys;
    uint32_t *index = calloc((size_t)1 << bits, sizeof *index);
    if (!index)
        return -1;
    free(self->index);
    self->index = index;
    self->bits = bits;
    self->capacity = capacity;
    for (size_t pos = 0; pos < self->used; pos++) {
        int found;
        self->index[s_probe(self, self->keys[pos], &found)] = (uint32_t)(pos + 1);
    }
    return 0;
}

int replay_check(replay_t *self, const unsigned char *key)
{
    int found = 0;
    if (self->used) { /* else no index yet */
        s_probe(self, key, &found);
        if (found)
            return 1;
    }
    size_t pos;
    if (self->used < self->window) {
        if (self->used == self->capacity && s_grow(self) < 0) {
            errno = ENOMEM;
            return -1;
        }
        pos = self->used++;
    } else {
        pos = self->next;
        self->next = (self->next + 1) % self->window;
        size_t slot = s_probe(self, self->keys[pos], &found);
        assert(found); /* every key in the ring is in the index */
        s_unlink(self, slot);
    }
    memcpy(self->keys[pos], key, REPLAY_KEY_BYTES);
    self->index[s_probe(self, key, &found)] = (uint32_t)(pos + 1);
    return 0;
}
