/*  jmsg: one Jupyter message in memory: routing identities, the four JSON parts (header,
 *  parent_header, metadata, content), each held both parsed (a large one only in part: see
 *  JMSG_PARSE_MAX) and, when it came from a peer, as the raw bytes that were signed, and
 *  binary buffers. No I/O and no signing (see wire). */
#ifndef KENNEL_JMSG_H
#define KENNEL_JMSG_H

#include <stddef.h>

#include <czmq.h>
#include <jansson.h>

typedef enum { JMSG_HEADER = 0, JMSG_PARENT, JMSG_METADATA, JMSG_CONTENT, JMSG_NPARTS } jmsg_part_t;

/*  jansson flags for parsing peer JSON: NUL inside strings is legal JSON. */
#define JMSG_JSON_LOAD_FLAGS JSON_ALLOW_NUL
/*  The most values and keys a peer's JSON part may hold to be parsed: ~10 MiB in jansson. */
#define JMSG_MAX_VALUES 100000
/*  A part larger than this is parsed shallowly by kenneld: jansson takes ~28 ns a byte of a
 *  long string here, so a whole 60 MiB part held kenneld's loop, every session's traffic,
 *  for 1.7 s. Its outer object gets only the members whose key and value are short (what
 *  kenneld reads of a peer's message: ids, types, flags), up to this many bytes of them in
 *  order; the others stay in the raw bytes only, which is what kenneld passes on. */
#define JMSG_PARSE_MAX (64u << 10)
#define JMSG_SHALLOW_KEY_MAX 256    /* bytes of a key, quotes included */
#define JMSG_SHALLOW_VALUE_MAX 4096 /* bytes of a value */

typedef struct jmsg jmsg_t;

/*  A new message of msg_type from `session` (the sender's session uuid): a fresh header
 *  (uuid msg_id, username "kernel", ISO date, version 5.3), empty parent, metadata, content.
 *  The header has its bytes already (jmsg_raw), so it is encoded from them: to change it, set
 *  a changed copy with jmsg_set_json, as for any part with bytes. NULL on allocation failure. */
jmsg_t *jmsg_new(const char *msg_type, const char *session);
/*  A message with all four parts empty objects and no header fields (for decoders). */
jmsg_t *jmsg_new_empty(void);
/*  A new message whose parent is `parent` (its raw header bytes when it has them) and which is
 *  addressed to the same routing identities. */
jmsg_t *jmsg_new_reply(const jmsg_t *parent, const char *msg_type, const char *session);
/*  Free *self_p and set it to NULL. No-op on NULL. */
void jmsg_destroy(jmsg_t **self_p);

/*  Set part `part` from the bytes of *frame_p, taken (also on failure), not copied, which
 *  must be one JSON object of at most max_values values and keys; parsed whole, or shallowly
 *  past parse_max bytes (see JMSG_PARSE_MAX; SIZE_MAX: always whole, as a client, which
 *  trusts kenneld's outputs and prints them). flags: 0 or JMSG_UTF8_CHECKED. 0, or -1 when
 *  they are not such an object (the part is then unchanged). */
int jmsg_take_raw(jmsg_t *self, jmsg_part_t part, zframe_t **frame_p, size_t max_values,
                  size_t parse_max, unsigned flags);
/*  jmsg_take_raw's flag: the bytes are known to be UTF-8 (wire checks a large part's in
 *  slices, kpipe a kernel's parts as they come), so the check reads strings without decoding
 *  them. */
#define JMSG_UTF8_CHECKED 1u
/*  The same from bytes (copied), with kenneld's bounds: JMSG_MAX_VALUES, JMSG_PARSE_MAX. */
int jmsg_set_raw(jmsg_t *self, jmsg_part_t part, const void *data, size_t len);
/*  The same for bytes kenneld only passes on: checked to be one JSON object (jvalid), any
 *  size, and kept as bytes only: jmsg_json() of the part is NULL. */
int jmsg_set_raw_unparsed(jmsg_t *self, jmsg_part_t part, const void *data, size_t len);
/*  Set part to text, a JSON object kenneld wrote itself (copied; not checked): sent as it is,
 *  and parsed only if someone asks for it (jmsg_json). 0, or -1 (out of memory). */
int jmsg_set_text(jmsg_t *self, jmsg_part_t part, const char *text, size_t len);
/*  The same with the bytes of *frame_p, taken (also on failure), not copied. flags: 0 or
 *  JMSG_UTF8_CHECKED. */
int jmsg_take_raw_unparsed(jmsg_t *self, jmsg_part_t part, zframe_t **frame_p, unsigned flags);
/*  Set part `part` to a JSON object; steals the reference. The part is serialised on encode. */
void jmsg_set_json(jmsg_t *self, jmsg_part_t part, json_t *obj);
/*  Set part `part` to obj (a copy of jmsg_json(part), changed; stolen): as jmsg_set_json,
 *  but a shallowly parsed part keeps the members obj lacks, as their raw bytes, except
 *  those whose key obj has. 0, or -1 on allocation failure (obj is freed, the part left). */
int jmsg_amend(jmsg_t *self, jmsg_part_t part, json_t *obj);
/*  Give each part set as JSON its serialised bytes now, keeping the JSON: whatever reads the
 *  message next (the replay journal, then wire's encoder) reuses those bytes instead of
 *  serialising the part again. A later jmsg_set_json drops them as usual. 0, or -1 on
 *  allocation failure (parts not done stay JSON only, which is still a whole message). */
int jmsg_freeze(jmsg_t *self);
/*  Set the parent from another message's header (raw bytes reused when present). */
int jmsg_set_parent_from(jmsg_t *self, const jmsg_t *parent);
/*  The raw bytes of a part, or NULL when it was set as JSON. Borrowed, valid until the part
 *  changes. */
const void *jmsg_raw(const jmsg_t *self, jmsg_part_t part, size_t *len_out);
/*  Take a part's raw bytes out of the message (caller owns them), or NULL when it has none;
 *  the part keeps what was parsed of it (jmsg_json), and no raw bytes: for a message about
 *  to be destroyed only (wire_encode_take), since encoding it again would lose what a
 *  shallow parse left out. */
zframe_t *jmsg_release_raw(jmsg_t *self, jmsg_part_t part);
/*  A JSON string as C reads it, or NULL when v is not a string or holds a NUL (C would read
 *  a shorter one: "a\u0000b" is not "a"). Borrowed. */
const char *jmsg_cstr(const json_t *v);
/*  Borrowed reference to a part's JSON object; NULL only for a part set unparsed. */
json_t *jmsg_json(const jmsg_t *self, jmsg_part_t part);
#define jmsg_header(m) jmsg_json((m), JMSG_HEADER)
#define jmsg_content(m) jmsg_json((m), JMSG_CONTENT)
#define jmsg_metadata(m) jmsg_json((m), JMSG_METADATA)

/*  header.msg_type / header.msg_id, borrowed; "" when absent. */
const char *jmsg_type(const jmsg_t *self);
const char *jmsg_id(const jmsg_t *self);

/*  Routing identities and binary buffers, as frame lists owned by the message. Borrowed. */
zmsg_t *jmsg_ids(const jmsg_t *self);
zmsg_t *jmsg_buffers(const jmsg_t *self);
/*  How many identity frames and buffers it has (without making the lists, as the two above
 *  do the first time). */
size_t jmsg_nids(const jmsg_t *self);
size_t jmsg_nbuffers(const jmsg_t *self);
/*  Replace the identities with copies of other's. 0 or -1. */
int jmsg_copy_ids(jmsg_t *self, const jmsg_t *other);

#endif
