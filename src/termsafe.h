/*  termsafe: makes untrusted text (what a kernel prints) safe to show on a terminal.
 *  Printable text, UTF-8, \n, \t, \r and SGR colour sequences (ESC [ digits ; : m) pass as
 *  they are; every other control character and escape sequence is written out as Python's
 *  repr writes it (\x1b, \x07, \x9b), so that it is seen rather than run. Does no I/O: the
 *  caller writes the result, and filters only what goes to a terminal. */
#ifndef KENNEL_TERMSAFE_H
#define KENNEL_TERMSAFE_H

#include <stddef.h>

#define TERMSAFE_HELD_MAX 64 /* the longest SGR sequence passed whole, ESC and 'm' included */

/*  The most bytes termsafe_feed writes for len bytes in (a byte becomes at most 4, "\xNN",
 *  and bytes held from earlier calls come out with them); termsafe_finish writes at most
 *  TERMSAFE_OUT_MAX(0). */
#define TERMSAFE_OUT_MAX(len) (4 * ((len) + TERMSAFE_HELD_MAX))

/*  The state of one output stream: the start of a sequence (an SGR one, or a UTF-8
 *  character) that the text so far ended in. A sequence split over two calls is judged
 *  whole, so a split neither lets an escape through nor breaks a colour. A plain struct, not
 *  an opaque one: it holds no resource, and callers keep one per stream as a static. Zeroed
 *  is the initial state. */
typedef struct {
    unsigned char held[TERMSAFE_HELD_MAX];
    size_t held_len;
} termsafe_t;

/*  Filter len bytes of text into out, which must hold TERMSAFE_OUT_MAX(len) bytes. Returns
 *  the number of bytes written; the unfinished sequence the text ends in, if any, is held
 *  for the next call. */
size_t termsafe_feed(termsafe_t *self, const void *in, size_t len, char *out);

/*  The end of the text: what is held is written out escaped (an unfinished sequence is not
 *  one), into out of TERMSAFE_OUT_MAX(0) bytes. Returns the number of bytes written; the
 *  state is initial again. */
size_t termsafe_finish(termsafe_t *self, char *out);

#endif
