/*  Unit tests of jtext: what it writes is what jansson's json_dumps writes, byte for byte,
 *  in both of its modes (JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(15), as run
 *  records are written; JSON_COMPACT alone, as message parts are), over strings that need
 *  every kind of escape, reals of every shape and nested values; bytes that are not UTF-8
 *  become U+FFFD and the text still parses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "jtext.h"

#define DUMP_FLAGS (JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(15) | JSON_ENCODE_ANY)

/*  jtext's text of v against jansson's, in both modes. */
static void s_same(const json_t *v)
{
    for (int utf8 = 0; utf8 < 2; utf8++) {
        jtext_t t = {.utf8 = utf8, .digits = utf8 ? 0 : 15};
        jtext_json(&t, v);
        char *ours = jtext_take(&t);
        char *theirs = json_dumps(v, utf8 ? JSON_COMPACT | JSON_ENCODE_ANY : DUMP_FLAGS);
        CHECK(ours && theirs);
        if (ours && theirs)
            CHECK_STR(ours, theirs);
        free(ours);
        free(theirs);
    }
}

TEST(strings_are_escaped_as_jansson_escapes_them)
{
    const char *cases[] = {
        "",
        "plain ascii 123",
        "quote \" backslash \\ slash / del \x7f",
        "\b\f\n\r\t and \x01\x02\x1f",
        "caf\xc3\xa9 \xe2\x82\xac \xe4\xb8\xad",       /* 2- and 3-byte sequences */
        "emoji \xf0\x9f\x90\x8d and \xf4\x8f\xbf\xbf", /* 4-byte: surrogate pairs */
        "\xef\xbf\xbd replacement char itself",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *s = json_string(cases[i]);
        CHECK(s != NULL);
        s_same(s);
        json_decref(s);
    }
    /* with a NUL inside (jansson keeps the length) */
    json_t *nul = json_stringn("a\0b", 3);
    s_same(nul);
    json_decref(nul);
}

TEST(numbers_and_constants)
{
    double reals[] = {0.0, -0.0, 1.0, 0.711, 0.71099999999999985, 1e20, 1.5e-7, -2.25,
                      123456789012345.0, 1e300, 3.0e-300, 100.0};
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) {
        json_t *r = json_real(reals[i]);
        s_same(r);
        json_decref(r);
    }
    long long ints[] = {0, 1, -1, 42, 9223372036854775807LL, -9223372036854775807LL - 1};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        json_t *n = json_integer(ints[i]);
        s_same(n);
        json_decref(n);
    }
    s_same(json_true());
    s_same(json_false());
    s_same(json_null());
}

TEST(nested_values_keep_their_order)
{
    json_t *v = json_loads("{\"z\":1,\"a\":[1,2.5,\"x\\u00e9\",{\"k\":null,\"t\":true}],"
                           "\"m\":{},\"e\":[],\"q\\\"\":{\"deep\":[[[]]]}}",
                           0, NULL);
    CHECK(v != NULL);
    s_same(v);
    json_decref(v);
}

TEST(bytes_that_are_not_utf8_become_replacement_characters)
{
    /* A lone continuation byte, a truncated sequence, an overlong '/', a surrogate's
     * encoding, a byte never in UTF-8: each U+FFFD, and the text parses. */
    const char bad[] = "a\x80" "b\xe2\x82" "c\xc0\xaf" "d\xed\xa0\x80" "e\xff";
    jtext_t t = {0};
    jtext_str(&t, bad, sizeof bad - 1);
    char *text = jtext_take(&t);
    CHECK(text != NULL);
    json_t *back = json_loads(text, JSON_DECODE_ANY, NULL);
    CHECK(json_is_string(back));
    const char *s = json_string_value(back);
    CHECK(s && s[0] == 'a' && strncmp(s + 1, "\xef\xbf\xbd", 3) == 0 && s[4] == 'b');
    CHECK(strstr(text, "\\uFFFD") != NULL);
    for (const char *p = text; *p; p++)
        CHECK((unsigned char)*p < 0x80);
    char *want = strdup(s ? s : "");
    json_decref(back);
    free(text);
    /* the same as UTF-8: each U+FFFD's bytes, and it still parses to the same string */
    jtext_t u = {.utf8 = 1};
    jtext_str(&u, bad, sizeof bad - 1);
    text = jtext_take(&u);
    json_t *same = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    CHECK(json_is_string(same) && strcmp(json_string_value(same), want) == 0);
    CHECK(text && strstr(text, "\xef\xbf\xbd") != NULL && !strstr(text, "\\u"));
    json_decref(same);
    free(text);
    free(want);
}

TEST(ints_raw_and_null_strings)
{
    jtext_t t = {0};
    jtext_lit(&t, "{\"n\":");
    jtext_int(&t, -120);
    jtext_lit(&t, ",\"s\":");
    jtext_cstr(&t, NULL);
    jtext_raw(&t, "}", 1);
    CHECK_EQ_INT((int)t.len, (int)strlen("{\"n\":-120,\"s\":null}"));
    char *text = jtext_take(&t);
    CHECK_STR(text, "{\"n\":-120,\"s\":null}");
    CHECK(t.buf == NULL && t.len == 0);
    free(text);
    /* nothing written: an empty string, not NULL */
    char *empty = jtext_take(&t);
    CHECK(empty && empty[0] == '\0');
    free(empty);
}

int main(void)
{
    RUN(strings_are_escaped_as_jansson_escapes_them);
    RUN(numbers_and_constants);
    RUN(nested_values_keep_their_order);
    RUN(bytes_that_are_not_utf8_become_replacement_characters);
    RUN(ints_raw_and_null_strings);
    return harness_done();
}
