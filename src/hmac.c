/*  hmac: libsodium's incremental HMAC-SHA256 (any key length). Jupyter's reference client
 *  compares the hex strings, so we do too: an uppercase digest is a different signature. */
#include "hmac.h"

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "util.h"

struct hmac {
    size_t key_len;
    unsigned char key[]; /* wiped in hmac_destroy */
};

hmac_t *hmac_new(const void *key, size_t key_len)
{
    hmac_t *self = malloc(sizeof *self + key_len + 1);
    if (!self)
        return NULL;
    self->key_len = key_len;
    if (key_len)
        memcpy(self->key, key, key_len);
    return self;
}

void hmac_destroy(hmac_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    hmac_t *self = *self_p;
    sodium_memzero(self->key, self->key_len);
    free(self);
    *self_p = NULL;
}

int hmac_is_null(const hmac_t *self)
{
    return self->key_len == 0;
}

void hmac_sign(const hmac_t *self, const void *const *parts, const size_t *lens, size_t n,
               char *hex_out)
{
    if (self->key_len == 0) {
        hex_out[0] = '\0';
        return;
    }
    crypto_auth_hmacsha256_state st;
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_init(&st, self->key, self->key_len);
    for (size_t i = 0; i < n; i++)
        crypto_auth_hmacsha256_update(&st, parts[i], lens[i]);
    crypto_auth_hmacsha256_final(&st, mac);
    util_hex(hex_out, mac, sizeof mac);
    sodium_memzero(&st, sizeof st);
}

int hmac_verify(const hmac_t *self, const void *const *parts, const size_t *lens, size_t n,
                const void *sig, size_t sig_len)
{
    if (self->key_len == 0)
        return sig_len == 0;
    if (sig_len != HMAC_HEX_LEN)
        return 0;
    char expect[HMAC_HEX_LEN + 1];
    hmac_sign(self, parts, lens, n, expect);
    return sodium_memcmp(expect, sig, HMAC_HEX_LEN) == 0;
}
