/*  replay: the replay guard's memory. The last `window` signatures a peer's messages carried,
 *  each kept as the first REPLAY_KEY_BYTES of its digest; a signature seen again within the
 *  window is a replay. Memory grows with use (a session that received 40 messages holds 64
 *  entries) up to 16 bytes an entry plus 8 to 16 in the index: 192 KiB for the default window
 *  of 8192, where a hash table of hex strings held ~1.8 MiB per busy session in kenneld.
 *  Knows nothing of HMAC: wire hands it a verified digest. */
#ifndef KENNEL_REPLAY_H
#define KENNEL_REPLAY_H

#include <stddef.h>
#include <stdint.h>

/*  Bytes of a digest that are kept and compared: 128 bits of an HMAC-SHA256 a peer had to
 *  sign, so two different messages collide with probability ~2^-128 per pair. */
#define REPLAY_KEY_BYTES 16
/*  The largest window replay_new accepts. */
#define REPLAY_MAX_WINDOW (1u << 24)

typedef struct replay replay_t;

/*  A guard remembering the last window keys (1 .. REPLAY_MAX_WINDOW), its hash seeded from
 *  libsodium (call sodium_init() first). NULL with errno EINVAL for another window, ENOMEM
 *  when out of memory. Nothing is allocated for entries yet. */
replay_t *replay_new(size_t window);
/*  The same with a given seed: for tests, which need to know where keys land. */
replay_t *replay_new_seeded(size_t window, uint64_t seed);
/*  Free *self_p and set it to NULL. No-op on NULL. */
void replay_destroy(replay_t **self_p);
/*  1 when key (REPLAY_KEY_BYTES bytes) is among the last window keys remembered; otherwise
 *  remembers it (forgetting the oldest once the window is full) and returns 0. -1 with errno
 *  ENOMEM when it could not grow to remember it: the caller must refuse the message, which
 *  then counts as not seen. */
int replay_check(replay_t *self, const unsigned char *key);
/*  Keys remembered now (at most the window). */
size_t replay_size(const replay_t *self);
/*  Entries allocated now: grows by doubling, from 64 up to the window. */
size_t replay_capacity(const replay_t *self);

#endif
