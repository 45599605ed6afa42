/*  hmac: HMAC-SHA256 over the four JSON frames of a Jupyter message, on libcrypto's SHA-256.
 *  Verification compares hex digests in constant time. The key copy is wiped on destroy. */
#ifndef KENNEL_HMAC_H
#define KENNEL_HMAC_H

#include <stddef.h>

#define HMAC_HEX_LEN 64

typedef struct hmac hmac_t;

/*  Create a signer for key (any length; an empty key means "unsigned", as in Jupyter).
 *  NULL on allocation failure. */
hmac_t *hmac_new(const void *key, size_t key_len);
/*  A signer of its own with self's key (for another thread: a signer hashes in a state of
 *  its own, so one is never used by two threads at once). NULL on allocation failure. */
hmac_t *hmac_dup(const hmac_t *self);
/*  Wipe and free *self_p; set it to NULL. No-op on NULL. */
void hmac_destroy(hmac_t **self_p);
/*  1 when the key is empty (messages carry an empty signature). */
int hmac_is_null(const hmac_t *self);
/*  The length of the signatures this key makes: HMAC_HEX_LEN, or 0 with an empty key. */
size_t hmac_sig_len(const hmac_t *self);
/*  Sign n parts; writes HMAC_HEX_LEN lowercase hex digits plus NUL into hex_out.
 *  With an empty key writes "". 0, or -1 (hex_out "") when libcrypto fails (out of memory).
 *  It hashes in the signer's own scratch state (const as a key is, not as a buffer): one
 *  thread at a time; another thread signs with an hmac_dup. */
int hmac_sign(const hmac_t *self, const void *const *parts, const size_t *lens, size_t n,
               char *hex_out);
/*  1 when sig (sig_len bytes, lowercase hex as Jupyter sends it) signs the parts, else 0. */
int hmac_verify(const hmac_t *self, const void *const *parts, const size_t *lens, size_t n,
                const void *sig, size_t sig_len);

/*  A verification fed a piece at a time (a large message is hashed over several turns of
 *  kenneld's loop). */
typedef struct hmac_check hmac_check_t;
/*  Start checking sig (sig_len bytes, lowercase hex as Jupyter sends it; copied) against
 *  what is fed next. NULL on allocation failure. The check may outlive self. */
hmac_check_t *hmac_check_new(const hmac_t *self, const void *sig, size_t sig_len);
void hmac_check_feed(hmac_check_t *check, const void *data, size_t len);
/*  1 when sig signs all that was fed, else 0. Wipes and frees *check_p, sets it to NULL. */
int hmac_check_end(hmac_check_t **check_p);
/*  Wipe and free an unfinished check; set it to NULL. No-op on NULL. */
void hmac_check_destroy(hmac_check_t **check_p);

#endif
