/*  jtext: compact JSON text into a growing buffer, ASCII-only or UTF-8 (see jtext.h). */
#include "jtext.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JTEXT_MAX_DEPTH 2048 /* as deep as jansson parses */

static int s_grow(jtext_t *t, size_t more)
{
    if (t->failed)
        return -1;
    if (t->len + more + 1 <= t->cap)
        return 0;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + more + 1)
        cap *= 2;
    char *buf = realloc(t->buf, cap);
    if (!buf) {
        t->failed = 1;
        return -1;
    }
    t->buf = buf;
    t->cap = cap;
    return 0;
}

char *jtext_take(jtext_t *t)
{
    char *out = t->failed ? NULL : t->buf;
    if (t->failed)
        free(t->buf);
    else if (!out && (out = malloc(1)))
        out[0] = '\0';
    *t = (jtext_t){0};
    return out;
}

void jtext_free(jtext_t *t)
{
    free(t->buf);
    *t = (jtext_t){0};
}

void jtext_raw(jtext_t *t, const void *data, size_t len)
{
    if (s_grow(t, len) < 0)
        return;
    memcpy(t->buf + t->len, data, len);
    t->len += len;
    t->buf[t->len] = '\0';
}

void jtext_lit(jtext_t *t, const char *s)
{
    jtext_raw(t, s, strlen(s));
}

static const char s_hex[] = "0123456789ABCDEF";

/*  "\uXXXX" for one UTF-16 unit, at out (6 bytes). */
static void s_u16(char *out, unsigned u)
{
    out[0] = '\\';
    out[1] = 'u';
    out[2] = s_hex[u >> 12 & 0xF];
    out[3] = s_hex[u >> 8 & 0xF];
    out[4] = s_hex[u >> 4 & 0xF];
    out[5] = s_hex[u & 0xF];
}

/*  The code point of the UTF-8 sequence at s (n bytes left) and its length in *used; an
 *  invalid sequence is U+FFFD, one byte long. */
static unsigned s_utf8(const unsigned char *s, size_t n, size_t *used)
{
    unsigned c = s[0];
    size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
    *used = 1;
    if (c >= 0xF5 || len == 0 || len > n)
        return 0xFFFD;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0xFFFD;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    /* overlong forms, surrogates and past U+10FFFF are not UTF-8 */
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0xFFFD;
    *used = len;
    return cp;
}

void jtext_str(jtext_t *t, const char *s, size_t len)
{
    /* At most 12 bytes out per byte in (a 4-byte sequence is two \uXXXX): grown in runs. */
    if (s_grow(t, len + 2) < 0)
        return;
    t->buf[t->len++] = '"';
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        /* A run of bytes that go out as they are. */
        const unsigned char *run = p;
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            p++;
        if (p > run) {
            if (s_grow(t, (size_t)(p - run) + 1) < 0)
                return;
            memcpy(t->buf + t->len, run, (size_t)(p - run));
            t->len += (size_t)(p - run);
        }
        if (p == end)
            break;
        if (s_grow(t, 12 + 1) < 0)
            return;
        char *o = t->buf + t->len;
        unsigned char c = *p;
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                                      : NULL;
        if (esc) {
            memcpy(o, esc, 2);
            t->len += 2;
            p++;
        } else if (c < 0x20) { /* another control character */
            s_u16(o, c);
            t->len += 6;
            p++;
        } else {
            size_t used;
            unsigned cp = s_utf8(p, (size_t)(end - p), &used);
            if (t->utf8) { /* the sequence as it is, or U+FFFD's */
                if (cp == 0xFFFD && used == 1)
                    memcpy(o, "\xEF\xBF\xBD", 3);
                else
                    memcpy(o, p, used);
                t->len += cp == 0xFFFD && used == 1 ? 3 : used;
                p += used;
                continue;
            }
            p += used;
            if (cp < 0x10000) {
                s_u16(o, cp);
                t->len += 6;
            } else {
                cp -= 0x10000;
                s_u16(o, 0xD800 | (cp >> 10));
                s_u16(o + 6, 0xDC00 | (cp & 0x3FF));
                t->len += 12;
            }
        }
    }
    if (s_grow(t, 1) < 0)
        return;
    t->buf[t->len++] = '"';
    t->buf[t->len] = '\0';
}

void jtext_cstr(jtext_t *t, const char *s)
{
    if (s)
        jtext_str(t, s, strlen(s));
    else
        jtext_lit(t, "null");
}

void jtext_int(jtext_t *t, long long v)
{
    char digits[24];
    size_t n = sizeof digits;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        digits[--n] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        digits[--n] = '-';
    jtext_raw(t, digits + n, sizeof digits - n);
}

/*  A real as jansson writes it: %.*g (t->digits, 17 by default), a '.' whatever the locale,
 *  ".0" when it would read as an integer, no '+' or leading zeros in the exponent. */
static void s_real(jtext_t *t, double v)
{
    if (!isfinite(v)) { /* (no json_real holds one) */
        jtext_lit(t, "null");
        return;
    }
    char b[48];
    int n = snprintf(b, sizeof b - 3, "%.*g", t->digits > 0 ? t->digits : 17, v);
    if (n <= 0 || (size_t)n >= sizeof b - 3) {
        t->failed = 1;
        return;
    }
    char *comma = strchr(b, ',');
    if (comma)
        *comma = '.';
    char *e = strchr(b, 'e');
    if (!e && !strchr(b, '.')) {
        memcpy(b + n, ".0", 3);
        n += 2;
    } else if (e) {
        char *from = e + 1, *to = e + 1;
        if (*from == '+')
            from++;
        else if (*from == '-')
            *to++ = *from++;
        while (*from == '0' && from[1])
            from++;
        memmove(to, from, strlen(from) + 1);
        n = (int)strlen(b);
    }
    jtext_raw(t, b, (size_t)n);
}

static void s_value(jtext_t *t, const json_t *v, int depth)
{
    if (depth > JTEXT_MAX_DEPTH) {
        t->failed = 1;
        return;
    }
    switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_OBJECT: {
        const char *key;
        json_t *member;
        int first = 1;
        jtext_raw(t, "{", 1);
        json_object_foreach((json_t *)v, key, member) {
            if (!first)
                jtext_raw(t, ",", 1);
            first = 0;
            jtext_cstr(t, key);
            jtext_raw(t, ":", 1);
            s_value(t, member, depth + 1);
        }
        jtext_raw(t, "}", 1);
        break;
    }
    case JSON_ARRAY: {
        jtext_raw(t, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                jtext_raw(t, ",", 1);
            s_value(t, json_array_get(v, i), depth + 1);
        }
        jtext_raw(t, "]", 1);
        break;
    }
    case JSON_STRING:
        jtext_str(t, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        jtext_int(t, (long long)json_integer_value(v));
        break;
    case JSON_REAL:
        s_real(t, json_real_value(v));
        break;
    case JSON_TRUE:
        jtext_lit(t, "true");
        break;
    case JSON_FALSE:
        jtext_lit(t, "false");
        break;
    default:
        jtext_lit(t, "null");
        break;
    }
}

void jtext_json(jtext_t *t, const json_t *v)
{
    s_value(t, v, 0);
}
