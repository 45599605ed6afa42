/*  hmac: HMAC-SHA256 on OpenSSL's libcrypto SHA-256 (EVP), for its speed: on a CPU with the
 *  SHA extensions it hashes ~4× faster than libsodium's portable SHA-256, and kenneld and
 *  kennel-gateway sign or check every message they relay (docs/design.md). The HMAC itself
 *  (RFC 2104) is built here from the digest rather than with EVP_MAC, so that the states
 *  after the key's two pads are made once per key: each signature starts from copies of
 *  them. Jupyter's reference client compares the hex strings, so we do too: an uppercase
 *  digest is a different signature. */
#include "hmac.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "util.h"

#define BLOCK 64 /* SHA-256's block */
#define DIGEST 32

struct hmac {
    size_t key_len;
    EVP_MD_CTX *inner; /* SHA-256 after (key ^ ipad): each signature hashes on from a copy */
    EVP_MD_CTX *outer; /* after (key ^ opad) */
    EVP_MD_CTX *scratch; /* where a signature is hashed: made once, not for each (a signer is
                          * one thread's: hmac.h) */
    unsigned char key[]; /* wiped in hmac_destroy */
};

/*  A digest state after one block: the key (hashed first when longer than a block) padded
 *  with zeros and XORed with pad. */
static EVP_MD_CTX *s_keyed(const unsigned char *key, size_t key_len, unsigned char pad)
{
    unsigned char block[BLOCK];
    memset(block, 0, sizeof block);
    if (key_len > BLOCK) {
        unsigned int n = 0;
        if (!EVP_Digest(key, key_len, block, &n, EVP_sha256(), NULL))
            return NULL;
    } else if (key_len) {
        memcpy(block, key, key_len);
    }
    for (size_t i = 0; i < sizeof block; i++)
        block[i] ^= pad;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx && (!EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) ||
                !EVP_DigestUpdate(ctx, block, sizeof block)))
        EVP_MD_CTX_free(ctx), ctx = NULL;
    OPENSSL_cleanse(block, sizeof block);
    return ctx;
}

hmac_t *hmac_new(const void *key, size_t key_len)
{
    hmac_t *self = calloc(1, sizeof *self + key_len + 1);
    if (!self)
        return NULL;
    self->key_len = key_len;
    if (key_len) {
        memcpy(self->key, key, key_len);
        self->inner = s_keyed(self->key, key_len, 0x36);
        self->outer = s_keyed(self->key, key_len, 0x5c);
        self->scratch = EVP_MD_CTX_new();
        if (!self->inner || !self->outer || !self->scratch)
            hmac_destroy(&self);
    }
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
    EVP_MD_CTX_free(self->inner); /* (which wipes the digest's state) */
    EVP_MD_CTX_free(self->outer);
    EVP_MD_CTX_free(self->scratch);
    OPENSSL_cleanse(self->key, self->key_len);
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

/*  The MAC of what ctx (a copy of a key's inner state, fed the message) hashed, with outer
 *  that key's outer state; ctx is spent. */
static int s_final(const EVP_MD_CTX *outer, EVP_MD_CTX *ctx, unsigned char mac[DIGEST])
{
    unsigned char inner[DIGEST];
    int ok = EVP_DigestFinal_ex(ctx, inner, NULL) && EVP_MD_CTX_copy_ex(ctx, outer) &&
             EVP_DigestUpdate(ctx, inner, sizeof inner) && EVP_DigestFinal_ex(ctx, mac, NULL);
    OPENSSL_cleanse(inner, sizeof inner);
    return ok ? 0 : -1;
}

int hmac_sign(const hmac_t *self, const void *const *parts, const size_t *lens, size_t n,
              char *hex_out)
{
    hex_out[0] = '\0';
    if (self->key_len == 0)
        return 0;
    /* (copy_ex into a context of the same digest reuses its state's memory) */
    EVP_MD_CTX *ctx = self->scratch;
    int ok = EVP_MD_CTX_copy_ex(ctx, self->inner);
    for (size_t i = 0; ok && i < n; i++)
        ok = EVP_DigestUpdate(ctx, parts[i], lens[i]);
    unsigned char mac[DIGEST];
    if (ok && s_final(self->outer, ctx, mac) == 0)
        util_hex(hex_out, mac, sizeof mac);
    else
        ok = 0;
    return ok ? 0 : -1;
}

struct hmac_check {
    int is_null;       /* no key: sig must be empty */
    int ok;            /* sig has the length of a digest (or is empty, with no key), and
                          hashing has not failed */
    char sig[HMAC_HEX_LEN];
    EVP_MD_CTX *ctx;   /* the key's inner state, fed what was fed */
    EVP_MD_CTX *outer; /* a copy of the key's outer state: a check may outlive its signer
                          (a session rekeyed while a large message is being checked) */
};

hmac_check_t *hmac_check_new(const hmac_t *self, const void *sig, size_t sig_len)
{
    hmac_check_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->is_null = self->key_len == 0;
    c->ok = sig_len == hmac_sig_len(self);
    if (!c->is_null && c->ok) {
        memcpy(c->sig, sig, HMAC_HEX_LEN);
        c->ctx = EVP_MD_CTX_new();
        c->outer = EVP_MD_CTX_new();
        if (!c->ctx || !c->outer || !EVP_MD_CTX_copy_ex(c->ctx, self->inner) ||
            !EVP_MD_CTX_copy_ex(c->outer, self->outer)) {
            hmac_check_destroy(&c);
            return NULL;
        }
    }
    return c;
}

void hmac_check_feed(hmac_check_t *check, const void *data, size_t len)
{
    if (!check->is_null && check->ok && !EVP_DigestUpdate(check->ctx, data, len))
        check->ok = 0;
}

int hmac_check_end(hmac_check_t **check_p)
{
    hmac_check_t *c = *check_p;
    int ok = c->ok;
    if (ok && !c->is_null) {
        unsigned char mac[DIGEST];
        char expect[HMAC_HEX_LEN + 1];
        ok = s_final(c->outer, c->ctx, mac) == 0;
        if (ok) {
            util_hex(expect, mac, sizeof mac);
            ok = CRYPTO_memcmp(expect, c->sig, HMAC_HEX_LEN) == 0;
        }
        OPENSSL_cleanse(expect, sizeof expect);
    }
    hmac_check_destroy(check_p);
    return ok;
}

void hmac_check_destroy(hmac_check_t **check_p)
{
    if (!check_p || !*check_p)
        return;
    hmac_check_t *c = *check_p;
    EVP_MD_CTX_free(c->ctx);
    EVP_MD_CTX_free(c->outer);
    OPENSSL_cleanse(c, sizeof *c);
    free(c);
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
