/*  jvalid: a JSON object checked in one pass, nothing allocated. See jvalid.h. */
#include "jvalid.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const unsigned char *p, *end;
    int utf8_checked; /* the caller has checked all the bytes are UTF-8 (JVALID_UTF8_CHECKED) */
} cur_t;

static int s_digit(const cur_t *c)
{
    return c->p < c->end && *c->p >= '0' && *c->p <= '9';
}

static void s_digits(cur_t *c)
{
    while (s_digit(c))
        c->p++;
}

static void s_space(cur_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/*  Four hex digits of a \u escape, into *out. */
static int s_hex4(cur_t *c, unsigned *out)
{
    if (c->end - c->p < 4)
        return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char h = *c->p++;
        v <<= 4;
        if (h >= '0' && h <= '9')
            v |= (unsigned)(h - '0');
        else if (h >= 'a' && h <= 'f')
            v |= (unsigned)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F')
            v |= (unsigned)(h - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

size_t jvalid_utf8(const void *at, size_t left)
{
    const unsigned char *p = at;
    size_t n;
    uint32_t cp;
    if (left == 0)
        return 0;
    if (*p < 0x80)
        return 1;
    if (*p >= 0xC2 && *p <= 0xDF)
        n = 2, cp = *p & 0x1F;
    else if (*p >= 0xE0 && *p <= 0xEF)
        n = 3, cp = *p & 0x0F;
    else if (*p >= 0xF0 && *p <= 0xF4)
        n = 4, cp = *p & 0x07;
    else
        return 0;
    if (left < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

/*  One UTF-8 sequence of two to four bytes. */
static int s_utf8(cur_t *c)
{
    size_t n = jvalid_utf8(c->p, (size_t)(c->end - c->p));
    if (n < 2)
        return -1;
    c->p += n;
    return 0;
}

/*  Past the bytes from p on that a string may hold as they are (printable ASCII other than
 *  the quote and the backslash), eight at a time: the text of a cell, say, is mostly such
 *  runs, and a byte at a time the check of a 60 MiB part held kenneld's loop ~50 ms. */
static const unsigned char *s_plain_run(const unsigned char *p, const unsigned char *end,
                                        int utf8_checked)
{
    /* Bytes of 0x80 or more are plain too once they are known to be UTF-8. */
    const uint64_t high_stops = utf8_checked ? 0 : 0x8080808080808080ull;
    const unsigned char high_stop = utf8_checked ? 0xFF : 0x7F;
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    while (end - p >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        /* Whether the word holds a byte under 0x20, the quote or the backslash: the lowest
         * such byte sets its own high bit in one of the three terms (no borrow comes from the
         * plain bytes below it), and a word of plain bytes sets none. Bits above the lowest
         * hit may be set by its borrow: only whether any is set is used. A byte of 0x80 or
         * more never sets one (masked by ~x, and it lends no borrow): it shows in x's own
         * high bits. */
        uint64_t q = x ^ (ones * '"'), bs = x ^ (ones * '\\');
        uint64_t special = ((x - ones * 0x20) | (q - ones) | (bs - ones)) & ~x & highs;
        if (special | (x & high_stops))
            break;
        p += 8;
    }
    while (p < end && *p >= 0x20 && *p <= high_stop && *p != '"' && *p != '\\')
        p++;
    return p;
}

int jvalid_utf8_run(const void *data, size_t len, size_t *at, size_t budget)
{
    const unsigned char *base = data, *p = base + *at, *end = base + len;
    const unsigned char *stop = budget < (size_t)(end - p) ? p + budget : end;
    const uint64_t highs = 0x8080808080808080ull;
    while (p < stop) {
        if (stop - p >= 8) {
            uint64_t x;
            memcpy(&x, p, 8);
            if (!(x & highs)) {
                p += 8;
                continue;
            }
        }
        size_t n = *p < 0x80 ? 1 : jvalid_utf8(p, (size_t)(end - p)); /* may end past stop */
        if (n == 0)
            return -1;
        p += n;
    }
    *at = (size_t)(p - base);
    return p < end;
}

/*  A string, from its opening quote. \u0000 is allowed (JSON_ALLOW_NUL) and noted in *nul; a
 *  surrogate escape must be a high one followed by a low one. */
static int s_string(cur_t *c, int *nul)
{
    c->p++;
    while (c->p < c->end) {
        c->p = s_plain_run(c->p, c->end, c->utf8_checked);
        if (c->p >= c->end)
            break;
        unsigned char b = *c->p;
        if (b == '"') {
            c->p++;
            return 0;
        }
        if (b < 0x20)
            return -1;
        if (b >= 0x80) {
            if (s_utf8(c) < 0)
                return -1;
            continue;
        }
        c->p++;
        if (b != '\\')
            continue;
        if (c->p >= c->end)
            return -1;
        unsigned u;
        switch (*c->p++) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            break;
        case 'u':
            if (s_hex4(c, &u) < 0 || (u >= 0xDC00 && u <= 0xDFFF))
                return -1;
            if (u == 0)
                *nul = 1;
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != 'u')
                    return -1;
                c->p += 2;
                if (s_hex4(c, &u) < 0 || u < 0xDC00 || u > 0xDFFF)
                    return -1;
            }
            break;
        default:
            return -1;
        }
    }
    return -1;
}

/*  -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int s_number(cur_t *c)
{
    if (c->p < c->end && *c->p == '-')
        c->p++;
    if (!s_digit(c))
        return -1;
    if (*c->p++ != '0')
        s_digits(c);
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (!s_digit(c))
            return -1;
        s_digits(c);
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
            c->p++;
        if (!s_digit(c))
            return -1;
        s_digits(c);
    }
    return 0;
}

static int s_literal(cur_t *c, const char *word, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (c->p + i >= c->end || c->p[i] != (unsigned char)word[i])
            return -1;
    c->p += len;
    return 0;
}

/*  A scalar value (not an object or array), from its first byte. */
static int s_scalar(cur_t *c)
{
    switch (*c->p) {
    case '"': {
        int nul = 0;
        return s_string(c, &nul);
    }
    case 't':
        return s_literal(c, "true", 4);
    case 'f':
        return s_literal(c, "false", 5);
    case 'n':
        return s_literal(c, "null", 4);
    default:
        return s_number(c);
    }
}

/*  A key and its colon, from wherever the key may start. A key may hold no NUL (jansson
 *  keeps keys as C strings). */
static int s_key(cur_t *c, const unsigned char **key, const unsigned char **key_end)
{
    int nul = 0;
    s_space(c);
    *key = c->p;
    if (c->p >= c->end || *c->p != '"' || s_string(c, &nul) < 0 || nul)
        return -1;
    *key_end = c->p;
    s_space(c);
    if (c->p >= c->end || *c->p != ':')
        return -1;
    c->p++;
    return 0;
}

/*  The check, telling fn (when not NULL) of each member of the outer object as it ends. */
static int s_object(const void *data, size_t len, size_t *values, jvalid_member_fn *fn,
                    void *arg, unsigned flags)
{
    const unsigned char *base = data;
    cur_t c = {base, base + len, (flags & JVALID_UTF8_CHECKED) != 0};
    unsigned char open[JVALID_MAX_DEPTH]; /* '{' or '[' for each level we are in */
    size_t depth = 0, n = 0;
    /* The outer object's member being read: its key (quotes included) and its value. */
    const unsigned char *key = NULL, *key_end = NULL, *value = NULL, *k, *k_end;
    s_space(&c);
    if (c.p >= c.end || *c.p != '{')
        return -1;
    for (;;) {
        /* A value is due, at level depth + 1 (jansson counts levels so, scalars too). */
        s_space(&c);
        if (c.p >= c.end || depth >= JVALID_MAX_DEPTH)
            return -1;
        n++;
        if (depth == 1)
            value = c.p;
        if (*c.p == '{' || *c.p == '[') {
            unsigned char kind = *c.p++;
            open[depth++] = kind;
            s_space(&c);
            if (c.p < c.end && *c.p == (kind == '{' ? '}' : ']')) {
                c.p++;
                depth--;
            } else {
                if (kind == '{') {
                    n++;
                    if (s_key(&c, &k, &k_end) < 0)
                        return -1;
                    if (depth == 1)
                        key = k, key_end = k_end;
                }
                continue;
            }
        } else if (s_scalar(&c) < 0) {
            return -1;
        }
        /* A value has ended: a comma, or the end of its container (and maybe of more). Each
         * time that leaves us in the outer object, one of its members has ended. */
        int ended = depth == 1;
        for (;;) {
            if (ended && fn &&
                fn(arg, (size_t)(key - base), (size_t)(key_end - key), (size_t)(value - base),
                   (size_t)(c.p - value)) < 0)
                return -1;
            ended = 0;
            s_space(&c);
            if (depth == 0) {
                if (c.p != c.end)
                    return -1;
                *values = n;
                return 0;
            }
            if (c.p >= c.end)
                return -1;
            unsigned char kind = open[depth - 1];
            if (*c.p == (kind == '{' ? '}' : ']')) {
                c.p++;
                depth--;
                ended = depth == 1;
                continue;
            }
            if (*c.p != ',')
                return -1;
            c.p++;
            if (kind == '{') {
                n++;
                if (s_key(&c, &k, &k_end) < 0)
                    return -1;
                if (depth == 1)
                    key = k, key_end = k_end;
            }
            break;
        }
    }
}

int jvalid_object(const void *data, size_t len, size_t *values)
{
    return s_object(data, len, values, NULL, NULL, 0);
}

int jvalid_members(const void *data, size_t len, size_t *values, jvalid_member_fn *fn, void *arg,
                   unsigned flags)
{
    return s_object(data, len, values, fn, arg, flags);
}

int jvalid_small_int(const char *v, size_t n, long long *out)
{
    if (n == 0 || n - (v[0] == '-') > 18)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] == '.' || v[i] == 'e' || v[i] == 'E')
            return 0;
    char text[24];
    memcpy(text, v, n); /* (at most 19 bytes, not NUL-terminated where they are) */
    text[n] = '\0';
    *out = strtoll(text, NULL, 10);
    return 1;
}
