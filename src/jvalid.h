/*  jvalid: checks that bytes are one JSON object (RFC 8259: UTF-8, escapes, at most
 *  JVALID_MAX_DEPTH levels of nesting) without building it, and counts its values, so that
 *  kenneld can pass a peer's JSON on as bytes, or refuse to parse what would cost it many
 *  times its size. Accepts what jansson accepts with JSON_ALLOW_NUL (\u0000 in strings, not
 *  in keys), and also numbers too large for jansson's types, which JSON allows. */
#ifndef KENNEL_JVALID_H
#define KENNEL_JVALID_H

#include <stddef.h>

#define JVALID_MAX_DEPTH 2048 /* levels of values, as jansson counts them: its own limit */

/*  0 if data is one JSON object (whitespace around it allowed), with *values set to the
 *  number of values and keys in it, itself included; -1 otherwise. */
int jvalid_object(const void *data, size_t len, size_t *values);

/*  Told of each member of the outer object once its value has been read: the key's bytes
 *  (its quotes included) and the value's, as offsets into the data. Non-zero stops the check,
 *  which then fails. */
typedef int(jvalid_member_fn)(void *arg, size_t key_at, size_t key_len, size_t value_at,
                              size_t value_len);
/*  The caller has checked that all of the bytes are UTF-8 (jvalid_utf8_run): strings are then
 *  read without decoding their characters, several times faster for text that is not ASCII. */
#define JVALID_UTF8_CHECKED 1u
/*  jvalid_object, telling fn of the outer object's members as it goes (also when the check
 *  fails later on: the caller drops what it made of them then). flags: 0 or
 *  JVALID_UTF8_CHECKED. */
int jvalid_members(const void *data, size_t len, size_t *values, jvalid_member_fn *fn, void *arg,
                   unsigned flags);
/*  Check that data[*at..len) is UTF-8 as jvalid_utf8 reads it (any byte under 0x80 taken as it
 *  is), about `budget` bytes of it per call (a character may take it up to 3 past), moving
 *  *at past what was checked: 1 while some remains, 0 once all of it is UTF-8, -1 when it is
 *  not. So a large part is checked a slice at a time, and JSON-checked with
 *  JVALID_UTF8_CHECKED once whole. */
int jvalid_utf8_run(const void *data, size_t len, size_t *at, size_t budget);

/*  The length of the one UTF-8 sequence at p, of at most left bytes: 1 to 4 (ASCII, NUL
 *  included, is 1), or 0 when p starts none (a stray or cut-short byte, an overlong form, a
 *  surrogate, past U+10FFFF). */
size_t jvalid_utf8(const void *p, size_t left);

/*  Whether the n bytes at v, a JSON number jvalid checked, are an integer of at most 18
 *  digits (no fraction, no exponent: what jansson reads as an integer that surely fits);
 *  then its value in *out. 0 for any other number: a real, or a longer integer, which
 *  jansson may refuse. */
int jvalid_small_int(const char *v, size_t n, long long *out);

#endif
