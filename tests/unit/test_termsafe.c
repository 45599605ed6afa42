/*  Unit tests of termsafe: what passes, what is shown escaped, sequences split over calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "termsafe.h"

/*  in filtered as one text, fed `slice` bytes at a time (0: all at once), then finished. */
static char *s_filter(const char *in, size_t slice)
{
    size_t len = strlen(in);
    char *out = malloc(TERMSAFE_OUT_MAX(len) + TERMSAFE_OUT_MAX(0) + 1);
    termsafe_t safe = {0};
    size_t n = 0;
    for (size_t at = 0, k; at < len; at += k) {
        k = slice && len - at > slice ? slice : len - at;
        n += termsafe_feed(&safe, in + at, k, out + n);
    }
    n += termsafe_finish(&safe, out + n);
    out[n] = '\0';
    return out;
}

/*  The same, whole and a byte at a time alike. */
static int s_check(const char *in, const char *want)
{
    int ok = 1;
    for (size_t slice = 0; slice < 4; slice++) {
        char *got = s_filter(in, slice);
        if (strcmp(got, want) != 0) {
            fprintf(stderr, "  slice %zu: \"%s\", expected \"%s\"\n", slice, got, want);
            ok = 0;
        }
        free(got);
    }
    return ok;
}

TEST(text_utf8_and_line_controls_pass)
{
    CHECK(s_check("plain text 123 ~!", "plain text 123 ~!"));
    static const char *same[] = {"h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x90\x95\n",
                                 "a\tb\r 50%|\xe2\x96\x88\xe2\x96\x88|\n"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        CHECK(s_check(same[i], same[i]));
    CHECK(s_check("\xc2\xa0nbsp", "\xc2\xa0nbsp")); /* U+00A0: past the C1 controls */
}

TEST(sgr_colours_pass)
{
    CHECK(s_check("\x1b[31mRED\x1b[0m", "\x1b[31mRED\x1b[0m"));
    CHECK(s_check("\x1b[m\x1b[1;38;5;208m", "\x1b[m\x1b[1;38;5;208m"));
    CHECK(s_check("\x1b[38:2::255:0:0mx", "\x1b[38:2::255:0:0mx"));
    CHECK(s_check("\x1b[38;2;255;255;255;48;2;0;0;0mx", "\x1b[38;2;255;255;255;48;2;0;0;0mx"));
}

TEST(other_sequences_are_shown)
{
    CHECK(s_check("A\x1b]0;TITLE\x07" "B", "A\\x1b]0;TITLE\\x07B"));
    CHECK(s_check("\x1b]52;c;ZXZpbA==\x1b\\", "\\x1b]52;c;ZXZpbA==\\x1b\\"));
    CHECK(s_check("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"));
    CHECK(s_check("\x1b[?25l", "\\x1b[?25l"));
    CHECK(s_check("\x1b[1;31H", "\\x1b[1;31H"));
    CHECK(s_check("\x1bPq#0\x1b\\", "\\x1bPq#0\\x1b\\"));   /* DCS */
    CHECK(s_check("\x1b_apc\x1b^pm\x1bXsos", "\\x1b_apc\\x1b^pm\\x1bXsos"));
    CHECK(s_check("\x1b" "c", "\\x1bc")); /* RIS: a full reset */
    CHECK(s_check("\x1b\x1b[31m", "\\x1b\x1b[31m"));
}

TEST(controls_are_shown)
{
    CHECK(s_check("ding\x07", "ding\\x07"));
    CHECK(s_check("ab\bc\x7f\x01\x0b\x0c", "ab\\x08c\\x7f\\x01\\x0b\\x0c"));
    /* C1 controls by code point; U+009B is CSI to some terminals. */
    CHECK(s_check("\xc2\x9b" "2J \xc2\x80 \xc2\x9f", "\\x9b2J \\x80 \\x9f"));
}

TEST(malformed_utf8_is_shown_as_bytes)
{
    CHECK(s_check("\x9b" "2J", "\\x9b2J"));          /* a raw 8-bit CSI */
    CHECK(s_check("\xff\xc0\x80", "\\xff\\xc0\\x80")); /* never in UTF-8; an overlong NUL */
    CHECK(s_check("\xe2\x82x", "\\xe2\\x82x"));      /* cut short */
    CHECK(s_check("\xed\xa0\x80", "\\xed\\xa0\\x80")); /* a surrogate */
    CHECK(s_check("end\xe2\x82", "end\\xe2\\x82"));  /* cut short by the end */
}

TEST(unfinished_and_overlong_sequences_are_shown)
{
    CHECK(s_check("\x1b", "\\x1b"));
    CHECK(s_check("x\x1b[31", "x\\x1b[31"));
    CHECK(s_check("\x1b[31\n", "\\x1b[31\n"));
    char in[200], want[200];
    snprintf(in, sizeof in, "\x1b[%061dm", 1); /* 64 bytes in all: the longest passed */
    CHECK(s_check(in, in));
    snprintf(in, sizeof in, "\x1b[%062dm", 1);
    snprintf(want, sizeof want, "\\x1b[%062dm", 1);
    CHECK(s_check(in, want));
}

TEST(a_split_smuggles_nothing)
{
    /* One sequence over two calls is judged whole, as print(..., flush=True) makes it. */
    termsafe_t safe = {0};
    char out[TERMSAFE_OUT_MAX(16)];
    CHECK_EQ_INT(termsafe_feed(&safe, "\x1b", 1, out), 0);
    size_t n = termsafe_feed(&safe, "]0;T\x07\n", 6, out);
    out[n] = '\0';
    CHECK_STR(out, "\\x1b]0;T\\x07\n");
    CHECK_EQ_INT(termsafe_feed(&safe, "\x1b[3", 3, out), 0);
    n = termsafe_feed(&safe, "1mx", 3, out);
    out[n] = '\0';
    CHECK_STR(out, "\x1b[31mx");
    CHECK_EQ_INT(termsafe_finish(&safe, out), 0);
}

int main(void)
{
    RUN(text_utf8_and_line_controls_pass);
    RUN(sgr_colours_pass);
    RUN(other_sequences_are_shown);
    RUN(controls_are_shown);
    RUN(malformed_utf8_is_shown_as_bytes);
    RUN(unfinished_and_overlong_sequences_are_shown);
    RUN(a_split_smuggles_nothing);
    return harness_done();
}
