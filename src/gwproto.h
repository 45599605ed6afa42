/*  gwproto: kennel-gateway's sans-IO core: which API a request path names, the tokens file,
 *  and a WebSocket message <-> a Jupyter message (Jupyter Server's JSON text frames, its
 *  legacy binary frames for messages with buffers, and the v1.kernel.websocket.jupyter.org
 *  binary subprotocol). No sockets, no HTTP: kennel-gateway (src/gateway.c) feeds it bytes
 *  libwebsockets has already framed, so tests and the fuzzer drive it with plain calls. */
#ifndef KENNEL_GWPROTO_H
#define KENNEL_GWPROTO_H

#include <stddef.h>

#include <jansson.h>

#include "jmsg.h"

/*  The channels a WebSocket carries, in the order kennel-gateway keeps a kernel's sockets. */
typedef enum {
    GWPROTO_SHELL = 0,
    GWPROTO_CONTROL,
    GWPROTO_STDIN,
    GWPROTO_IOPUB,
    GWPROTO_NCHANNELS
} gwproto_channel_t;

/*  "shell", "control", "stdin" or "iopub". */
const char *gwproto_channel_name(gwproto_channel_t ch);

/*  What a request path names (its query string already cut off). */
typedef enum {
    GWPROTO_R_NOTFOUND = 0,
    GWPROTO_R_API,         /* /api */
    GWPROTO_R_KERNELSPECS, /* /api/kernelspecs */
    GWPROTO_R_KERNELSPEC,  /* /api/kernelspecs/NAME */
    GWPROTO_R_KERNELS,     /* /api/kernels */
    GWPROTO_R_KERNEL,      /* /api/kernels/ID */
    GWPROTO_R_INTERRUPT,   /* /api/kernels/ID/interrupt */
    GWPROTO_R_RESTART,     /* /api/kernels/ID/restart */
    GWPROTO_R_CHANNELS,    /* /api/kernels/ID/channels */
    GWPROTO_R_SESSIONS,    /* /api/sessions */
    GWPROTO_R_SESSION,     /* /api/sessions/ID */
    GWPROTO_R_METRICS,     /* /metrics */
    GWPROTO_R_SPECFILE,    /* /kernelspecs/NAME/FILE: a kernelspec's resource (a logo) */
} gwproto_route_kind_t;

#define GWPROTO_ID_MAX 64
typedef struct {
    gwproto_route_kind_t kind;
    char id[GWPROTO_ID_MAX + 1];   /* the ID or NAME segment, when the route has one */
    char file[GWPROTO_ID_MAX + 1]; /* GWPROTO_R_SPECFILE's FILE */
} gwproto_route_t;

/*  Route path (NUL-terminated, at most a few KiB: libwebsockets caps it). A trailing slash is
 *  ignored. A kernel ID must look like a UUID (36 lowercase hex digits and dashes), a
 *  kernelspec NAME (and a resource's FILE) like [A-Za-z0-9._-]{1,64}, not starting with a dot;
 *  anything else is GWPROTO_R_NOTFOUND. */
void gwproto_route(const char *path, gwproto_route_t *out);

/*  1 when s is a lowercase UUID string (8-4-4-4-12). */
int gwproto_is_uuid(const char *s);

/*  1 when s is a name kennel-gateway accepts for a tenant: 1 to 32 of [A-Za-z0-9_-]. */
int gwproto_is_tenant(const char *s);
/*  1 when s is a session name a client may give: 1 to 64 of [A-Za-z0-9_.-], starting with
 *  a letter or a digit. */
int gwproto_is_session_name(const char *s);

/*  The kennel session name (without the tenant's prefix) that a Jupyter session's path names:
 *  the path itself when it is a gwproto_is_session_name, else its characters that may be in
 *  a name (others become '_', at most 40 of them) and '-' and 8 hex digits of the path's
 *  BLAKE2b hash, so that two paths are two sessions. out holds GWPROTO_PATH_NAME_MAX + 1. */
#define GWPROTO_PATH_NAME_MAX 64
void gwproto_path_session_name(const char *path, size_t len, char *out);

/*  Parse a tokens file: one `TOKEN TENANT` a line, blanks and `#` lines ignored; a token is
 *  16 to 256 printable non-space ASCII bytes, a tenant gwproto_is_tenant. Returns a new
 *  object mapping gwproto_token_key(TOKEN) to TENANT, or NULL with the reason (and line) in
 *  err. A token given twice is refused. */
json_t *gwproto_tokens_parse(const char *text, size_t len, char *err, size_t err_len);
/*  The key a token is filed under: the hex of its BLAKE2b hash, so that looking a presented
 *  token up compares hashes, not the secret itself. out holds GWPROTO_TOKEN_KEY_LEN bytes. */
#define GWPROTO_TOKEN_KEY_LEN 65
void gwproto_token_key(const char *token, size_t len, char *out);

/*  How a WebSocket frames messages. */
typedef enum {
    GWPROTO_WS_JSON = 0, /* no subprotocol: JSON text, or the legacy binary frame */
    GWPROTO_WS_V1,       /* v1.kernel.websocket.jupyter.org */
} gwproto_ws_mode_t;

/*  Decode errors: the reason goes into the WebSocket's close frame. */
#define GWPROTO_EFRAME -1   /* the framing is broken (offsets, counts) */
#define GWPROTO_EJSON -2    /* a part is not a JSON object, or the text is not */
#define GWPROTO_ECHANNEL -3 /* no channel, or not one a client may send on */
#define GWPROTO_EHEADER -4  /* the header lacks msg_id, msg_type or a string session */
#define GWPROTO_ENOMEM -5

/*  Decode one whole WebSocket message (is_binary: it came as a binary frame) from a client.
 *  On success returns 0, stores an owned message in *out (its four parts and buffers set,
 *  no identities) and its channel in *channel; a client may send on shell, control and stdin
 *  only. Otherwise a GWPROTO_E* code. At most max_buffers binary buffers. */
int gwproto_decode(gwproto_ws_mode_t mode, int is_binary, const void *data, size_t len,
                   size_t max_buffers, gwproto_channel_t *channel, jmsg_t **out);
/*  A short English description of a GWPROTO_E* code (for a close frame's reason). */
const char *gwproto_strerror(int code);

/*  Encode msg (a kernel's message, with raw parts as wire_decode leaves them, or parts set
 *  as JSON) from channel for a WebSocket in mode. The result is malloc'd with `headroom`
 *  spare bytes before the message (libwebsockets writes its frame header there): the
 *  message is at (*out + headroom), *len_out bytes, and *is_binary says which frame to send.
 *  0, or -1 when memory is short. */
int gwproto_encode(gwproto_ws_mode_t mode, gwproto_channel_t channel, const jmsg_t *msg,
                   size_t headroom, unsigned char **out, size_t *len_out, int *is_binary);

#endif
