/*  jtext: JSON text written straight into a growing buffer, for what kenneld writes on every
 *  cell (message headers, run records). jansson builds a tree of allocations and then
 *  dumps it: for a run record that was ~130 k instructions a cell, a sixth of kenneld's
 *  whole round trip (docs/design.md, "JSON on the hot path"). Everything else keeps using
 *  jansson; this writes only compact JSON, ASCII-only (what jansson's JSON_COMPACT |
 *  JSON_ENSURE_ASCII writes), and parses nothing. */
#ifndef KENNEL_JTEXT_H
#define KENNEL_JTEXT_H

#include <stddef.h>

#include <jansson.h>

typedef struct {
    char *buf;  /* NUL-terminated while not failed; the caller's after jtext_take */
    size_t len;
    size_t cap;
    int failed; /* out of memory (or an unwritable value): the text is incomplete */
} jtext_t;

/*  The buffer's bytes (NUL-terminated; len in t->len), or NULL if a write failed, when it is
 *  freed. Ownership passes to the caller; t is empty again. */
char *jtext_take(jtext_t *t);
void jtext_free(jtext_t *t);

/*  Append bytes as they are (already JSON). */
void jtext_raw(jtext_t *t, const void *data, size_t len);
void jtext_lit(jtext_t *t, const char *s); /* a C string, as it is */
/*  Append a JSON string of len bytes of UTF-8 (quoted, escaped, non-ASCII as \uXXXX; a byte
 *  that is not UTF-8 becomes U+FFFD). */
void jtext_str(jtext_t *t, const char *s, size_t len);
void jtext_cstr(jtext_t *t, const char *s); /* NULL: null */
void jtext_int(jtext_t *t, long long v);
/*  Append any jansson value (NULL: null), as json_dumps with JSON_COMPACT |
 *  JSON_ENSURE_ASCII | JSON_REAL_PRECISION(15) writes it. */
void jtext_json(jtext_t *t, const json_t *v);

#endif
