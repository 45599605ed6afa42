/*  mcp: the protocol logic of `kennel mcp`, a Model Context Protocol server (revision
 *  2025-06-18, JSON-RPC 2.0 over newline-delimited stdio) bound to one kennel session.
 *  Takes the client's bytes, splits them into bounded lines, answers initialize, ping,
 *  tools/list and tools/call, runs one tool call at a time (the rest wait, in order) and
 *  builds tool results from a cell's Jupyter outputs: text without terminal escapes, PNG and
 *  JPEG images, and structured content (outcome, metrics, files the cell changed).
 *  It does no I/O: every effect goes through mcp_ops_t, so tests drive it with plain calls.
 *  It knows no socket and no kenneld; the glue (src/kennel.c, `kennel mcp`) does. */
#ifndef KENNEL_MCP_H
#define KENNEL_MCP_H

#include <stddef.h>

#include <jansson.h>

#define MCP_PROTOCOL_VERSION "2025-06-18"
#define MCP_MAX_REQUEST_DEFAULT (48u << 20) /* a request line: a 32 MiB file, base64, fits */
#define MCP_MAX_RESULT_DEFAULT (8u << 20)   /* a tool result's text and images, JSON-escaped */
#define MCP_MAX_QUEUED 64                   /* tool calls waiting behind the running one */
#define MCP_ERROR_TEXT_MAX (64u << 10)      /* an error's traceback kept past the result's bound */

/*  JSON-RPC's error codes, as the responses carry them. */
#define MCP_PARSE_ERROR -32700      /* the line is not JSON */
#define MCP_INVALID_REQUEST -32600  /* JSON, but not a request: also a line past max_request */
#define MCP_METHOD_NOT_FOUND -32601
#define MCP_INVALID_PARAMS -32602   /* also an unknown tool, and a tool's bad arguments */

typedef struct {
    size_t max_request; /* bytes of one line from the client, its newline not counted */
    size_t max_result;  /* about the bytes a tool result's content may take, as JSON */
} mcp_limits_t;

/*  What the core needs from the world. Every call but cell_start answers at once; a cell
 *  started by cell_start answers later, through mcp_cell_output and mcp_cell_done (or
 *  mcp_cell_lost), never from inside cell_start. Failing ops write a sentence for the client
 *  into why (why_len bytes). */
typedef struct {
    /* One JSON-RPC message for the client: compact JSON, no newline (the glue ends the
     * line). text is valid only during the call. */
    void (*send)(void *ctx, const char *text, size_t len);
    /* Run code in the session; timeout_s > 0 is the cell's deadline, 0 the session's own.
     * 0, or -1 (then no event comes). */
    int (*cell_start)(void *ctx, const char *code, double timeout_s, char *why, size_t why_len);
    /* Interrupt the running cell (its client gave up on it). Its end still comes. */
    void (*cell_interrupt)(void *ctx);
    /* Write a workspace file (data borrowed). 0 or -1. */
    int (*file_put)(void *ctx, const char *path, const void *data, size_t len, char *why,
                    size_t why_len);
    /* Read a workspace file into a malloc'd *data (caller frees). 0 or -1. */
    int (*file_get)(void *ctx, const char *path, void **data, size_t *len, char *why,
                    size_t why_len);
    /* The workspace's files: a new reference to {"files": [{"path", "size", "mtime"}, …],
     * "truncated": bool} (the manager's file_list_reply), or NULL. */
    json_t *(*file_list)(void *ctx, char *why, size_t why_len);
    /* A fresh namespace for the session (its restart). 0 or -1. */
    int (*restart)(void *ctx, char *why, size_t why_len);
} mcp_ops_t;

typedef struct mcp mcp_t;

/*  A server for the session named session (copied; it names the session in the text of the
 *  results). limits NULL: the defaults. NULL on allocation failure. */
mcp_t *mcp_new(const char *session, const mcp_limits_t *limits, const mcp_ops_t *ops,
               void *ops_ctx);
/*  Destroy *self_p and set it to NULL. No-op if *self_p is NULL. A running call is dropped
 *  unanswered. */
void mcp_destroy(mcp_t **self_p);

/*  Bytes the client wrote, in any slices: each complete line is one message, handled before
 *  this returns (responses go out through ops->send). A line longer than max_request is not
 *  kept: it is answered MCP_INVALID_REQUEST with its id when the id can be told. */
void mcp_feed(mcp_t *self, const void *data, size_t len);
/*  The client closed its end: a last line without a newline is handled as a message. */
void mcp_feed_end(mcp_t *self);

/*  One iopub message of the running cell: its msg_type and content (borrowed). */
void mcp_cell_output(mcp_t *self, const char *msg_type, const json_t *content);
/*  The running cell ended: its execute_reply's content and metadata (borrowed). The call's
 *  result goes out, and the next waiting call starts. */
void mcp_cell_done(mcp_t *self, const json_t *reply, const json_t *metadata);
/*  The running cell's end will never come (the session or kenneld went away): the call is
 *  answered as failed, saying why. */
void mcp_cell_lost(mcp_t *self, const char *why);
/*  Whether a cell is running (events are expected). */
int mcp_cell_running(const mcp_t *self);

#endif
