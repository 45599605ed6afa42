/*  hmac: HMAC-SHA256 over the four JSON frames of a Jupyter message, via libsodium.
 *  Verification compares hex digests in constant time. The key copy is wiped on destroy. */
#ifndef KENNEL_HMAC_H
#define KENNEL_HMAC_H

#include <stddef.h>

#define HMAC_HEX_LEN 64

typedef struct hmac hmac_t;

/*  Create a signer for key (any length; an empty key means "unsigned", as in Jupyter).
 *  NULL on allocation failure. */
hmac_t *hmac_new(const void *key, size_t key_len);
/*  Wipe and free *self_p; set it to NULL. No-op on NULL. */
void hmac_destroy(hmac_t **self_p);
/*  1 when the key is empty (messages carry an empty signature). */
int hmac_is_null(const hmac_t *self);
/*  Sign n parts; writes HMAC_HEX_LEN lowercase hex digits plus NUL into hex_out.
 *  With an empty key writes "". */
void hmac_sign(const hmac_t *self, const void *const *parts, const size_t *lens, size_t n,
               char *hex_out);
/*  1 when sig (sig_len bytes, lowercase hex as Jupyter sends it) signs the parts, else 0. */
int hmac_verify(const hmac_t *self, const void *const *parts, const size_t *lens, size_t n,
                const void *sig, size_t sig_len);

#endif
