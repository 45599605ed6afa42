/*  jtext: JSON text written straight into a growing buffer, for what kenneld writes on every
 *  cell (run records, the parts of messages it builds). jansson builds a tree of
 *  allocations and then dumps it through a callback a few bytes at a time: a run record cost
 *  ~130 k instructions a cell, a sixth of kenneld's whole round trip (docs/design.md, "JSON
 *  on the hot path"). This writes only compact JSON, byte for byte what jansson's
 *  JSON_COMPACT writes (with JSON_ENSURE_ASCII unless utf8 is set), and parses nothing. */
#ifndef KENNEL_JTEXT_H
#define KENNEL_JTEXT_H

#include <stddef.h>

#include <jansson.h>

typedef struct {
    char *buf;  /* NUL-terminated while not failed; the caller's after jtext_take */
    size_t len;
    size_t cap;
    int failed; /* out of memory (or an unwritable value): the text is incomplete */
    int utf8;   /* set: UTF-8 goes out as it is (JSON_COMPACT); 0: as \uXXXX escapes, as
                 * JSON_ENSURE_ASCII writes it */
    int digits; /* a real's significant digits (JSON_REAL_PRECISION); 0: 17, jansson's own */
} jtext_t;

/*  The buffer's bytes (NUL-terminated; len in t->len), or NULL if a write failed, when it is
 *  freed. Ownership passes to the caller; t is empty again. */
char *jtext_take(jtext_t *t);
void jtext_free(jtext_t *t);

/*  Append bytes as they are (already JSON). */
void jtext_raw(jtext_t *t, const void *data, size_t len);
void jtext_lit(jtext_t *t, const char *s); /* a C string, as it is */
/*  Append a JSON string of len bytes of UTF-8 (quoted, escaped; non-ASCII as \uXXXX unless
 *  utf8 is set; a byte that is not UTF-8 becomes U+FFFD). */
void jtext_str(jtext_t *t, const char *s, size_t len);
void jtext_cstr(jtext_t *t, const char *s); /* NULL: null */
void jtext_int(jtext_t *t, long long v);
/*  Append any jansson value (NULL: null), as json_dumps with JSON_COMPACT (and
 *  JSON_ENSURE_ASCII, JSON_REAL_PRECISION as t says) writes it. */
void jtext_json(jtext_t *t, const json_t *v);

#endif
