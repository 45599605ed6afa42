/*  termsafe: terminal-safe text, one byte at a time with a little state. See termsafe.h. */
#include "termsafe.h"

#include <assert.h>
#include <string.h>

#include "jvalid.h"

#define ESC 0x1b

/*  Which bytes pass as they are. \n and \t are text. \r passes too: progress bars (tqdm,
 *  pip) redraw their line with it. It moves the cursor to the start of the current line
 *  only, and the current line holds what the cell itself printed (kennel ends its own lines),
 *  so it can overwrite nothing but the cell's own text. \b could do no more, but it is shown
 *  all the same: a control passes only when common output needs it, and little Python
 *  output uses \b (a spinner or two), while a visible \x08 is a clue to text that was
 *  written over. Every other C0 control, DEL and the C1 controls (U+0080-U+009F, which some
 *  terminals obey as ESC-led sequences: U+009B is CSI) are shown. */
static int s_passes(unsigned char c)
{
    return (c >= 0x20 && c < 0x7f) || c == '\n' || c == '\t' || c == '\r';
}

/*  The number of bytes of the UTF-8 character that lead byte c starts, or 0 when c starts
 *  none (jvalid_utf8 checks the whole character once it is in). */
static size_t s_utf8_len(unsigned char c)
{
    return c >= 0xc2 && c <= 0xdf   ? 2
           : c >= 0xe0 && c <= 0xef ? 3
           : c >= 0xf0 && c <= 0xf4 ? 4
                                    : 0;
}

/*  SGR parameters: digits, ';' and ':' (colons separate the parts of a 38:2::R:G:B colour). */
static int s_sgr_param(unsigned char c)
{
    return (c >= '0' && c <= '9') || c == ';' || c == ':';
}

static size_t s_escaped(unsigned int c, char *out)
{
    static const char hex[] = "0123456789abcdef";
    out[0] = '\\', out[1] = 'x', out[2] = hex[c >> 4 & 0xf], out[3] = hex[c & 0xf];
    return 4;
}

/*  The held bytes, shown rather than run: an unfinished or overlong escape sequence has its
 *  ESC escaped (the rest, '[' and parameters, is plain text); the bytes of a cut-short or
 *  malformed UTF-8 character are escaped each. */
static size_t s_release(termsafe_t *self, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < self->held_len; i++)
        n += s_passes(self->held[i]) ? (out[n] = (char)self->held[i], 1)
                                     : s_escaped(self->held[i], out + n);
    self->held_len = 0;
    return n;
}

/*  One byte, c, after the held ones. */
static size_t s_byte(termsafe_t *self, unsigned char c, char *out)
{
    size_t n = 0;
    if (self->held_len && self->held[0] == ESC) {
        /* ESC [ params m, at most TERMSAFE_HELD_MAX bytes: anything else is not SGR. */
        int fits = self->held_len < TERMSAFE_HELD_MAX - 1; /* room for c and the 'm' */
        if (self->held_len == 1 ? c == '[' : s_sgr_param(c) && fits) {
            self->held[self->held_len++] = c;
            return 0;
        }
        if (self->held_len > 1 && c == 'm') {
            memcpy(out, self->held, self->held_len);
            n = self->held_len;
            out[n++] = 'm';
            self->held_len = 0;
            return n;
        }
        n = s_release(self, out); /* not SGR: c starts afresh below */
    } else if (self->held_len) {
        size_t want = s_utf8_len(self->held[0]);
        if ((c & 0xc0) == 0x80) {
            self->held[self->held_len++] = c;
            if (self->held_len < want)
                return 0;
            if (jvalid_utf8(self->held, want) != want)
                return s_release(self, out);
            self->held_len = 0;
            /* U+0080-U+009F, C2 80 to C2 9F: shown by code point, as repr shows them. */
            if (want == 2 && self->held[0] == 0xc2 && self->held[1] < 0xa0)
                return s_escaped(self->held[1], out);
            memcpy(out, self->held, want);
            return want;
        }
        n = s_release(self, out);
    }
    assert(self->held_len == 0);
    if (c == ESC || s_utf8_len(c)) {
        self->held[self->held_len++] = c;
        return n;
    }
    if (s_passes(c)) {
        out[n] = (char)c;
        return n + 1;
    }
    return n + s_escaped(c, out + n);
}

size_t termsafe_feed(termsafe_t *self, const void *in, size_t len, char *out)
{
    assert(self);
    const unsigned char *p = in;
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += s_byte(self, p[i], out + n);
    return n;
}

size_t termsafe_finish(termsafe_t *self, char *out)
{
    assert(self);
    return s_release(self, out);
}
