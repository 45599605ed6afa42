/*  hmac: libsodium's incremental HMAC-SHA256 (any key length). Jupyter's reference client
 *  compares the hex strings, so we do too: an uppercase digest is a different signature. */
#include "hmac.h"

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "util.h"

struct hmac {
    size_t key_len;
    /* The HMAC state after the key's inner and outer pads (two SHA-256 blocks): each
     * signature starts from a copy of it instead of hashing the key again. Wiped too. */
    crypto_auth_hmacsha256_state keyed;
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
    crypto_auth_hmacsha256_init(&self->keyed, self->key, key_len);
    return self;
}

hmac_t *hmac_dup(const hmac_t *self)
{
    return hmac_new(self->key, self->key_len);
}

void hmac_destroy(hmac_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    hmac_t *self = *self_p;
    sodium_memzero(self->key, self->key_len);
    sodium_memzero(&self->keyed, sizeof self->keyed);
    free(self);
    *self_p = NULL;
}

int hmac_is_null(const hmac_t *self)
{
    return self->key_len == 0;
}

size_t hmac_sig_len(const hmac_t *self)
{
    return self->key_len ? HMAC_HEX_LEN : 0;
}

void hmac_sign(const hmac_t *self, const void *const *parts, const size_t *lens, size_t n,
               char *hex_out)
{
    if (self->key_len == 0) {
        hex_out[0] = '\0';
        return;
    }
    crypto_auth_hmacsha256_state st = self->keyed;
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    for (size_t i = 0; i < n; i++)
        crypto_auth_hmacsha256_update(&st, parts[i], lens[i]);
    crypto_auth_hmacsha256_final(&st, mac);
    util_hex(hex_out, mac, sizeof mac);
    sodium_memzero(&st, sizeof st);
}

struct hmac_check {
    int is_null;  /* no key: sig must be empty */
    int sig_ok;   /* sig has the length of a digest (or is empty, with no key) */
    char sig[HMAC_HEX_LEN];
    crypto_auth_hmacsha256_state st;
};

hmac_check_t *hmac_check_new(const hmac_t *self, const void *sig, size_t sig_len)
{
    hmac_check_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->is_null = self->key_len == 0;
    c->sig_ok = sig_len == hmac_sig_len(self);
    if (!c->is_null) {
        if (c->sig_ok)
            memcpy(c->sig, sig, HMAC_HEX_LEN);
        c->st = self->keyed;
    }
    return c;
}

void hmac_check_feed(hmac_check_t *check, const void *data, size_t len)
{
    if (!check->is_null && check->sig_ok)
        crypto_auth_hmacsha256_update(&check->st, data, len);
}

int hmac_check_end(hmac_check_t **check_p)
{
    hmac_check_t *c = *check_p;
    int ok = c->sig_ok;
    if (ok && !c->is_null) {
        unsigned char mac[crypto_auth_hmacsha256_BYTES];
        char expect[HMAC_HEX_LEN + 1];
        crypto_auth_hmacsha256_final(&c->st, mac);
        util_hex(expect, mac, sizeof mac);
        ok = sodium_memcmp(expect, c->sig, HMAC_HEX_LEN) == 0;
    }
    hmac_check_destroy(check_p);
    return ok;
}

void hmac_check_destroy(hmac_check_t **check_p)
{
    if (!check_p || !*check_p)
        return;
    sodium_memzero(*check_p, sizeof **check_p);
    free(*check_p);
    *check_p = NULL;
}

int hmac_verify(const hmac_t *self, const void *const *parts, const size_t *lens, size_t n,
                const void *sig, size_t sig_len)
{
    hmac_check_t *c = hmac_check_new(self, sig, sig_len);
    if (!c)
        return 0;
    for (size_t i = 0; i < n; i++)
        hmac_check_feed(c, parts[i], lens[i]);
    return hmac_check_end(&c);
}
