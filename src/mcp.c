/*  mcp: `kennel mcp`'s protocol logic. Lines in, JSON-RPC messages out through ops->send;
 *  tool calls served one at a time, in the order they came, so that a file written by one
 *  call is there for the next and a cell never races a restart. While a cell runs, pings,
 *  tools/list and cancellations are still answered at once: the glue keeps reading the
 *  client during a cell. What a cell shows is kept within the result's bound, in the order it
 *  came: text merged into blocks, each image a block of its own. */
#include "mcp.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "jvalid.h"
#include "util.h"

#define SCAN_VALUE_MAX 80 /* the longest id told from a line past max_request */
#define LINE_KEEP_CAP (1u << 20) /* the line buffer is freed after a line larger than this */
#define FILES_MAX 1000    /* the kernel lists at most 1,000 names; more are not passed on */

/* ---- growable bytes --------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} buf_t;

/*  Append len bytes. 0, or -1 on allocation failure (the buffer is unchanged). */
static int s_buf_add(buf_t *b, const void *p, size_t len)
{
    return util_append(&b->data, &b->len, &b->cap, p, len);
}

static void s_buf_free(buf_t *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* ---- the id of a line too long to keep --------------------------------------------------
 * A line past max_request is not kept, so it cannot be parsed; but its client waits for an
 * answer to its id, and would wait until its own timeout for one without it. So the bytes
 * are scanned as they pass for the outer object's "id" member (the TypeScript SDK writes it
 * last, after the params): strings, escapes and nesting are followed, nothing is built. */

typedef struct {
    int depth;         /* objects and arrays open */
    int in_string, escape;
    int want_key;      /* at depth 1, the next string is a key */
    int in_key;        /* reading a depth-1 key */
    char key[4];       /* its first bytes ("id" is all that matters) */
    size_t key_len;
    int key_is_id;     /* the last depth-1 key read was "id" */
    int in_value;      /* reading the id's value (a string, or a number or literal) */
    int value_is_string;
    char value[SCAN_VALUE_MAX + 1]; /* the id's raw JSON, quotes included for a string */
    size_t value_len;
    int value_bad;     /* too long, or not a scalar */
    int have_value;    /* a whole value was read */
} idscan_t;

static void s_scan_value_add(idscan_t *s, char c)
{
    if (s->value_len < SCAN_VALUE_MAX)
        s->value[s->value_len++] = c;
    else
        s->value_bad = 1;
}

static void s_scan_value_end(idscan_t *s)
{
    s->in_value = 0;
    s->value[s->value_len] = '\0';
    s->have_value = !s->value_bad && s->value_len > 0;
}

static void s_scan(idscan_t *s, const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        if (s->in_string) {
            if (s->in_value)
                s_scan_value_add(s, c);
            if (s->escape) {
                s->escape = 0;
                if (s->in_key)
                    s->key_len = sizeof s->key; /* an escaped key is not "id" as written */
            } else if (c == '\\') {
                s->escape = 1;
            } else if (c == '"') {
                s->in_string = 0;
                if (s->in_key) {
                    s->in_key = 0;
                    s->key_is_id = s->key_len == 2 && memcmp(s->key, "id", 2) == 0;
                } else if (s->in_value) {
                    s_scan_value_end(s);
                }
            } else if (s->in_key && s->key_len < sizeof s->key) {
                s->key[s->key_len++] = c;
            } else if (s->in_key) {
                s->key_len = sizeof s->key;
            }
            continue;
        }
        if (s->in_value && !s->value_is_string) {
            /* a number or a literal ends at what cannot be part of it */
            if (c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\r' ||
                c == '\n')
                s_scan_value_end(s);
            else {
                s_scan_value_add(s, c);
                continue;
            }
        }
        switch (c) {
        case '"':
            s->in_string = 1;
            if (s->depth == 1 && s->want_key) {
                s->in_key = 1;
                s->want_key = 0;
                s->key_len = 0;
            } else if (s->depth == 1 && s->key_is_id) {
                s->in_value = s->value_is_string = 1;
                s->value_len = 0;
                s->value_bad = s->have_value = 0;
                s->key_is_id = 0;
                s_scan_value_add(s, c);
            }
            break;
        case '{':
        case '[':
            if (s->depth == 1 && s->key_is_id) {
                s->key_is_id = 0; /* an id that is an object or an array: none */
                s->have_value = 0;
            }
            s->depth++;
            s->want_key = c == '{' && s->depth == 1;
            break;
        case '}':
        case ']':
            s->depth--;
            break;
        case ',':
            if (s->depth == 1) {
                s->want_key = 1;
                s->key_is_id = 0;
            }
            break;
        case ':':
        case ' ':
        case '\t':
        case '\r':
            break;
        default:
            if (s->depth == 1 && s->key_is_id) {
                s->in_value = 1;
                s->value_is_string = 0;
                s->value_len = 0;
                s->value_bad = s->have_value = 0;
                s->key_is_id = 0;
                s_scan_value_add(s, c);
            }
            break;
        }
    }
}

/*  The id the scan found, as a new reference (a string or a number), or NULL. */
static json_t *s_scan_id(idscan_t *s)
{
    if (s->in_value && !s->value_is_string)
        s_scan_value_end(s); /* a number at the very end of the line */
    if (!s->have_value)
        return NULL;
    json_t *id = json_loadb(s->value, s->value_len, JSON_DECODE_ANY, NULL);
    if (id && !json_is_string(id) && !json_is_number(id)) {
        json_decref(id);
        id = NULL;
    }
    return id;
}

/* ---- the server ---------------------------------------------------------------------------- */

typedef enum { TOOL_RUN, TOOL_UPLOAD, TOOL_DOWNLOAD, TOOL_LIST, TOOL_RESTART } tool_t;

typedef struct call {
    json_t *id;        /* the request's id (a reference of the call's own) */
    json_t *args;      /* its arguments, checked (likewise) */
    tool_t tool;
    struct call *next; /* the next call waiting */
} call_t;

/*  What the running cell has shown so far, as it will be in its result. */
typedef struct {
    json_t *content;   /* the result's blocks so far */
    buf_t text;        /* text not yet made a block: it grows until an image comes */
    size_t used;       /* bytes of the result's bound taken: text as JSON, images as base64 */
    size_t dropped;    /* bytes of output past the bound, not shown */
    size_t error_used; /* bytes of error text kept past the bound */
    int images;
    int images_dropped; /* images past the bound (their base64 is in dropped) */
    int images_bad;    /* images whose data was not base64 */
    int clear_pending; /* a clear_output(wait=True): clear when the next output comes */
    int saw_error;     /* an error message came (its traceback is in the text) */
} shown_t;

struct mcp {
    char *session;
    mcp_limits_t limits;
    const mcp_ops_t *ops;
    void *ctx;
    json_t *tools;       /* tools/list's result, built once */
    int initialized;     /* initialize was answered */
    buf_t line;          /* the line being read */
    int oversize;        /* it passed max_request: scanned for its id, not kept */
    size_t oversize_len; /* the bytes of that line so far */
    idscan_t scan;
    call_t *running;     /* the call being served: a cell's while it runs */
    int cancelled;       /* the client cancelled it: it gets no answer */
    call_t *head, *tail; /* calls waiting, oldest first */
    size_t queued;
    shown_t shown;
};

/* The tools, as tools/list gives them. The descriptions are for the model that calls them. */
static const char s_tools_json[] =
    "{\"tools\": ["
    "{\"name\": \"run_python\", \"title\": \"Run Python\","
    " \"description\": \"Run Python code in a persistent, sandboxed IPython session: variables,"
    " imports and files stay from one call to the next. Returns what the code printed (stdout"
    " and stderr), the value of its last expression, each matplotlib figure or other PNG/JPEG"
    " shown as an image, and an error's traceback. structuredContent says how the cell ended"
    " (outcome: ok, error, timeout, interrupted, memory, crashed, killed, output_truncated,"
    " aborted, budget), what it cost (metrics) and which workspace files it created, changed or"
    " deleted. IPython syntax works (!shell commands, %magics). The working directory is the"
    " session's workspace.\","
    " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
    "  \"code\": {\"type\": \"string\", \"description\": \"The Python code to run, one cell.\"},"
    "  \"timeout\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"description\":"
    "   \"Seconds the cell may run before it is stopped (default: the session's deadline).\"}},"
    " \"required\": [\"code\"]},"
    " \"outputSchema\": {\"type\": \"object\", \"properties\": {"
    "  \"outcome\": {\"type\": \"string\"},"
    "  \"execution_count\": {\"type\": \"integer\"},"
    "  \"metrics\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"number\"}},"
    "  \"files\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {"
    "   \"name\": {\"type\": \"string\"}, \"size\": {\"type\": \"integer\"}},"
    "   \"required\": [\"name\", \"size\"]}},"
    "  \"files_deleted\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}},"
    "  \"files_truncated\": {\"type\": \"boolean\"},"
    "  \"images\": {\"type\": \"integer\"}},"
    " \"required\": [\"outcome\"]}},"
    "{\"name\": \"upload_file\", \"title\": \"Upload a file\","
    " \"description\": \"Write a file into the session's workspace (the code's working"
    " directory), making missing directories; replaces a file of that name.\","
    " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
    "  \"path\": {\"type\": \"string\", \"description\": \"Path relative to the workspace.\"},"
    "  \"content\": {\"type\": \"string\", \"description\": \"The file's content.\"},"
    "  \"encoding\": {\"type\": \"string\", \"enum\": [\"text\", \"base64\"], \"description\":"
    "   \"text (UTF-8, the default) or base64 for binary files.\"}},"
    " \"required\": [\"path\", \"content\"]}},"
    "{\"name\": \"download_file\", \"title\": \"Download a file\","
    " \"description\": \"Read a file of the session's workspace: UTF-8 text comes as text, PNG"
    " and JPEG as an image, anything else as an embedded resource (base64 blob).\","
    " \"inputSchema\": {\"type\": \"object\", \"properties\": {"
    "  \"path\": {\"type\": \"string\", \"description\": \"Path relative to the workspace.\"}},"
    " \"required\": [\"path\"]}},"
    "{\"name\": \"list_files\", \"title\": \"List files\","
    " \"description\": \"List the regular files in the session's workspace: path, size in"
    " bytes, modification time (seconds since 1970).\","
    " \"inputSchema\": {\"type\": \"object\", \"properties\": {}},"
    " \"outputSchema\": {\"type\": \"object\", \"properties\": {"
    "  \"files\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {"
    "   \"path\": {\"type\": \"string\"}, \"size\": {\"type\": \"integer\"},"
    "   \"mtime\": {\"type\": \"integer\"}}, \"required\": [\"path\", \"size\"]}},"
    "  \"truncated\": {\"type\": \"boolean\"}}, \"required\": [\"files\", \"truncated\"]}},"
    "{\"name\": \"restart\", \"title\": \"Restart Python\","
    " \"description\": \"Restart the session's Python: a fresh namespace (variables, imports and"
    " history are gone; workspace files stay). A cell running then is stopped.\","
    " \"inputSchema\": {\"type\": \"object\", \"properties\": {}}}"
    "]}";

static const struct {
    const char *name;
    tool_t tool;
} s_tool_names[] = {{"run_python", TOOL_RUN},       {"upload_file", TOOL_UPLOAD},
                    {"download_file", TOOL_DOWNLOAD}, {"list_files", TOOL_LIST},
                    {"restart", TOOL_RESTART}};

mcp_t *mcp_new(const char *session, const mcp_limits_t *limits, const mcp_ops_t *ops,
               void *ops_ctx)
{
    assert(session && ops);
    mcp_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->session = strdup(session);
    self->ops = ops;
    self->ctx = ops_ctx;
    self->limits.max_request = limits ? limits->max_request : MCP_MAX_REQUEST_DEFAULT;
    self->limits.max_result = limits ? limits->max_result : MCP_MAX_RESULT_DEFAULT;
    self->tools = json_loads(s_tools_json, 0, NULL);
    assert(self->tools); /* the table above is ours: a parse failure is a programmer's error */
    if (!self->session) {
        mcp_destroy(&self);
        return NULL;
    }
    return self;
}

static void s_call_free(call_t *call)
{
    if (!call)
        return;
    json_decref(call->id);
    json_decref(call->args);
    free(call);
}

static void s_shown_reset(shown_t *s)
{
    json_decref(s->content);
    s_buf_free(&s->text);
    memset(s, 0, sizeof *s);
}

void mcp_destroy(mcp_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    mcp_t *self = *self_p;
    while (self->head) {
        call_t *next = self->head->next;
        s_call_free(self->head);
        self->head = next;
    }
    s_call_free(self->running);
    s_shown_reset(&self->shown);
    s_buf_free(&self->line);
    json_decref(self->tools);
    free(self->session);
    free(self);
    *self_p = NULL;
}

/* ---- JSON-RPC out ------------------------------------------------------------------------ */

/*  Send msg (stolen) as one line. */
static void s_send(mcp_t *self, json_t *msg)
{
    char *text = msg ? json_dumps(msg, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    if (text)
        self->ops->send(self->ctx, text, strlen(text));
    free(text);
    json_decref(msg);
}

/*  A result for id (borrowed), result stolen. */
static void s_result(mcp_t *self, json_t *id, json_t *result)
{
    s_send(self, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

/*  An error for id (borrowed; NULL: null, for a request whose id cannot be told). data,
 *  stolen, may be NULL. */
static void s_error(mcp_t *self, json_t *id, int code, const char *message, json_t *data)
{
    json_t *err = json_pack("{s:i, s:s}", "code", code, "message", message);
    if (err && data)
        json_object_set_new(err, "data", data);
    else
        json_decref(data);
    s_send(self, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                           "error", err));
}

/* ---- text for a model ----------------------------------------------------------------------- */

/*  Copy text into out (len bytes at most) without terminal escapes and control characters:
 *  CSI sequences (colours, cursor moves), OSC, DCS and the other string sequences up to their
 *  terminator, two-byte escapes, and C0 controls other than tab, newline and carriage
 *  return. A sequence cut short by the end of the text is dropped. Returns the bytes
 *  written. */
static size_t s_strip(const char *in, size_t len, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)in[i];
        if (c != 0x1b) {
            if (c >= 0x20 || c == '\n' || c == '\t' || c == '\r')
                out[n++] = (char)c;
            i++;
            continue;
        }
        if (++i >= len)
            break;
        unsigned char kind = (unsigned char)in[i++];
        if (kind == '[') { /* CSI: parameters and intermediates, then one final byte */
            while (i < len && (unsigned char)in[i] >= 0x20 && (unsigned char)in[i] <= 0x3f)
                i++;
            if (i < len && (unsigned char)in[i] >= 0x40 && (unsigned char)in[i] <= 0x7e)
                i++;
        } else if (kind == ']' || kind == 'P' || kind == 'X' || kind == '^' || kind == '_') {
            /* a string up to BEL or ESC backslash */
            while (i < len && in[i] != 0x07 && !(in[i] == 0x1b && i + 1 < len && in[i + 1] == '\\'))
                i++;
            i += i < len && in[i] == 0x07 ? 1 : 2;
        } else if (kind >= 0x80) {
            i--; /* ESC before a character: only the ESC goes, the character stays whole */
        } else {
            while (kind >= 0x20 && kind <= 0x2f && i < len) /* intermediates, then a final */
                kind = (unsigned char)in[i++];
        }
    }
    return n;
}

/*  What byte c costs in a JSON string as jansson writes it. */
static size_t s_json_cost(unsigned char c)
{
    if (c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f')
        return 2;
    return c < 0x20 ? 6 : 1;
}

static size_t s_json_len(const char *p, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += s_json_cost((unsigned char)p[i]);
    return n;
}

/*  {"type": "text", "text": …}; text that is not UTF-8 (a cut cannot make it: it stops at a
 *  character's start) is replaced by a sentence saying so. */
static json_t *s_text_block(const char *text, size_t len)
{
    json_t *s = json_stringn(text, len);
    if (!s)
        s = json_string("[kennel mcp: text that is not UTF-8 is not shown]");
    return json_pack("{s:s, s:o}", "type", "text", "text", s);
}

static void s_flush_text(shown_t *s)
{
    if (!s->text.len)
        return;
    json_array_append_new(s->content, s_text_block(s->text.data, s->text.len));
    s->text.len = 0;
}

/*  Add text (len bytes, a kernel's) to what the cell shows, without escapes. Output past the
 *  result's bound is counted, not kept; an error's text is kept past it, up to
 *  MCP_ERROR_TEXT_MAX, so that a cell that printed much still says why it failed. */
static void s_add_text(mcp_t *self, const char *text, size_t len, int is_error)
{
    shown_t *s = &self->shown;
    char *clean = malloc(len + 1);
    if (!clean) {
        s->dropped += len;
        return;
    }
    len = s_strip(text, len, clean);
    size_t cost = 0, keep = 0;
    size_t room = is_error ? MCP_ERROR_TEXT_MAX - s->error_used
                  : s->used < self->limits.max_result ? self->limits.max_result - s->used
                                                      : 0;
    if (is_error && s->used < self->limits.max_result)
        room += self->limits.max_result - s->used;
    while (keep < len && cost + s_json_cost((unsigned char)clean[keep]) <= room)
        cost += s_json_cost((unsigned char)clean[keep++]);
    while (keep < len && keep > 0 && ((unsigned char)clean[keep] & 0xc0) == 0x80)
        cost -= s_json_cost((unsigned char)clean[--keep]); /* not inside a character */
    if (keep && s_buf_add(&s->text, clean, keep) < 0)
        keep = cost = 0;
    if (is_error && s->used + cost > self->limits.max_result) {
        size_t within = s->used < self->limits.max_result ? self->limits.max_result - s->used : 0;
        s->error_used += cost - within;
        s->used += within;
    } else {
        s->used += cost;
    }
    s->dropped += len - keep;
    free(clean);
}

/*  A printf'd notice of kennel mcp's own, into the text (it always fits: it is small, and a
 *  result's bound is never that tight). */
static void s_notice(mcp_t *self, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_notice(mcp_t *self, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (self->shown.text.len && self->shown.text.data[self->shown.text.len - 1] != '\n')
        s_buf_add(&self->shown.text, "\n", 1);
    s_buf_add(&self->shown.text, line, len);
    self->shown.used += s_json_len(line, len);
}

/*  Base64 from a kernel (white space allowed, as IPython writes it) without its white space,
 *  as a malloc'd string, or NULL when it is not base64. *bin_len: the bytes it decodes to;
 *  *head: their first bytes (for a PNG's signature), when head is not NULL. */
static char *s_clean_base64(const char *b64, size_t len, size_t *bin_len)
{
    char *clean = malloc(len + 1);
    size_t n = 0;
    for (size_t i = 0; clean && i < len; i++)
        if (b64[i] != ' ' && b64[i] != '\n' && b64[i] != '\r' && b64[i] != '\t')
            clean[n++] = b64[i];
    unsigned char *bin = clean ? malloc(n / 4 * 3 + 3) : NULL;
    if (!bin || sodium_base642bin(bin, n / 4 * 3 + 3, clean, n, NULL, bin_len, NULL,
                                  sodium_base64_VARIANT_ORIGINAL) != 0 || n == 0) {
        free(bin);
        free(clean);
        return NULL;
    }
    free(bin);
    clean[n] = '\0';
    return clean;
}

/*  Add an image output (mime, base64 as the kernel sent it) as an image block of its own. */
static void s_add_image(mcp_t *self, const char *mime, const char *b64)
{
    shown_t *s = &self->shown;
    size_t bin_len = 0;
    char *clean = s_clean_base64(b64, strlen(b64), &bin_len);
    if (!clean) {
        s->images_bad++;
        return;
    }
    size_t len = strlen(clean);
    if (s->used + len > self->limits.max_result) {
        s->images_dropped++;
        s->dropped += len;
        free(clean);
        return;
    }
    s_flush_text(s);
    json_array_append_new(s->content, json_pack("{s:s, s:s, s:s}", "type", "image", "data",
                                                clean, "mimeType", mime));
    s->used += len;
    s->images++;
    free(clean);
}

/*  What a display_data or execute_result shows: its PNG or JPEG as an image; otherwise its
 *  text/plain; otherwise a line naming what it carries that a model is not shown. */
static void s_add_display(mcp_t *self, const json_t *data)
{
    static const char *const images[] = {"image/png", "image/jpeg"};
    int shown = 0;
    for (size_t i = 0; i < sizeof images / sizeof images[0]; i++) {
        const char *b64 = json_string_value(json_object_get(data, images[i]));
        if (b64) {
            s_add_image(self, images[i], b64);
            shown = 1;
        }
    }
    if (shown)
        return;
    json_t *plain = json_object_get(data, "text/plain");
    if (json_is_string(plain)) {
        s_add_text(self, json_string_value(plain), json_string_length(plain), 0);
        s_add_text(self, "\n", 1, 0);
        return;
    }
    const char *mime;
    json_t *v;
    char kinds[256] = "";
    size_t n = 0;
    json_object_foreach((json_t *)data, mime, v) {
        int w = snprintf(kinds + n, sizeof kinds - n, "%s%s", n ? ", " : "", mime);
        if (w < 0 || (size_t)w >= sizeof kinds - n)
            break;
        n += (size_t)w;
    }
    if (n)
        s_add_text(self, "[kennel mcp: an output of ", 26, 0), s_add_text(self, kinds, n, 0),
            s_add_text(self, " is not shown]\n", 15, 0);
}

/*  Forget what the cell has shown so far (clear_output). */
static void s_clear(mcp_t *self)
{
    shown_t *s = &self->shown;
    json_array_clear(s->content);
    s->text.len = 0;
    s->used = s->dropped = s->error_used = 0;
    s->images = s->images_dropped = s->images_bad = 0;
    s->clear_pending = 0;
}

/* ---- tool results ---------------------------------------------------------------------- */

/*  A tool result with one text block; is_error says whether the call failed. */
static json_t *s_text_result(const char *text, int is_error)
{
    json_t *content = json_array();
    json_array_append_new(content, s_text_block(text, strlen(text)));
    return json_pack("{s:o, s:b}", "content", content, "isError", is_error);
}

static void s_answer_text(mcp_t *self, json_t *id, int is_error, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void s_answer_text(mcp_t *self, json_t *id, int is_error, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    s_result(self, id, s_text_result(text, is_error));
}

/*  structuredContent of a run_python result, from the reply's metadata (kenneld's outcome and
 *  metrics; the files the kernel listed, which are a kernel's and so checked member by
 *  member: what does not fit the tool's outputSchema is left out). */
static json_t *s_cell_structured(const char *outcome, const json_t *reply, const json_t *md,
                                 int images)
{
    json_t *out = json_pack("{s:s, s:i}", "outcome", outcome, "images", images);
    json_t *count = json_object_get(reply, "execution_count");
    if (json_is_integer(count))
        json_object_set(out, "execution_count", count);
    json_t *metrics = json_object(), *v;
    const char *key;
    json_object_foreach((json_t *)json_object_get(md, "metrics"), key, v)
        if (json_is_number(v))
            json_object_set(metrics, key, v);
    json_object_set_new(out, "metrics", metrics);
    json_t *files = json_object_get(md, "files");
    if (json_is_array(files)) {
        json_t *kept = json_array(), *f;
        size_t i;
        json_array_foreach(files, i, f) {
            json_t *name = json_object_get(f, "name"), *size = json_object_get(f, "size");
            if (i >= FILES_MAX || !json_is_string(name) || !json_is_integer(size))
                continue;
            json_t *entry = json_pack("{s:O, s:O}", "name", name, "size", size);
            if (json_is_false(json_object_get(f, "utf8")))
                json_object_set_new(entry, "utf8", json_false());
            json_array_append_new(kept, entry);
        }
        json_object_set_new(out, "files", kept);
    }
    json_t *deleted = json_object_get(md, "files_deleted");
    if (json_is_array(deleted)) {
        json_t *kept = json_array(), *name;
        size_t i;
        json_array_foreach(deleted, i, name)
            if (i < FILES_MAX && json_is_string(name))
                json_array_append(kept, name);
        json_object_set_new(out, "files_deleted", kept);
    }
    json_t *truncated = json_object_get(md, "files_truncated");
    if (json_is_boolean(truncated))
        json_object_set(out, "files_truncated", truncated);
    return out;
}

/*  The result of a tool with structured content: the content blocks so far (stolen), then
 *  the structured content serialised as text, as the specification asks of such tools for
 *  clients that read only content. */
static json_t *s_structured_result(json_t *content, json_t *structured, int is_error)
{
    /* 15 digits: a cell's 0.711 ms reads 0.711, not 0.71099999999999985 (jansson's 17). */
    char *text = json_dumps(structured, JSON_COMPACT | JSON_REAL_PRECISION(15));
    if (text)
        json_array_append_new(content, s_text_block(text, strlen(text)));
    free(text);
    return json_pack("{s:o, s:o, s:b}", "content", content, "structuredContent", structured,
                     "isError", is_error);
}

/*  The running call is answered (unless cancelled) and forgotten; the next one starts. */
static void s_pump(mcp_t *self);
static void s_finish(mcp_t *self, json_t *result)
{
    call_t *call = self->running;
    assert(call);
    if (!self->cancelled)
        s_result(self, call->id, result);
    else
        json_decref(result);
    self->running = NULL;
    self->cancelled = 0;
    s_call_free(call);
    s_shown_reset(&self->shown);
    s_pump(self);
}

int mcp_cell_running(const mcp_t *self)
{
    return self->running && self->running->tool == TOOL_RUN;
}

void mcp_cell_output(mcp_t *self, const char *msg_type, const json_t *content)
{
    if (!mcp_cell_running(self) || !msg_type)
        return;
    int is_output = strcmp(msg_type, "stream") == 0 || strcmp(msg_type, "display_data") == 0 ||
                    strcmp(msg_type, "update_display_data") == 0 ||
                    strcmp(msg_type, "execute_result") == 0 || strcmp(msg_type, "error") == 0;
    if (is_output && self->shown.clear_pending)
        s_clear(self);
    if (strcmp(msg_type, "stream") == 0) {
        json_t *text = json_object_get(content, "text");
        if (json_is_string(text))
            s_add_text(self, json_string_value(text), json_string_length(text), 0);
    } else if (strcmp(msg_type, "error") == 0) {
        self->shown.saw_error = 1;
        json_t *tb = json_object_get(content, "traceback"), *line;
        size_t i;
        if (json_is_array(tb) && json_array_size(tb)) {
            json_array_foreach(tb, i, line) {
                if (!json_is_string(line))
                    continue;
                s_add_text(self, json_string_value(line), json_string_length(line), 1);
                s_add_text(self, "\n", 1, 1);
            }
        } else {
            const char *ename = json_string_value(json_object_get(content, "ename"));
            const char *evalue = json_string_value(json_object_get(content, "evalue"));
            s_add_text(self, ename ? ename : "Error", strlen(ename ? ename : "Error"), 1);
            s_add_text(self, ": ", 2, 1);
            s_add_text(self, evalue ? evalue : "", strlen(evalue ? evalue : ""), 1);
            s_add_text(self, "\n", 1, 1);
        }
    } else if (is_output) {
        json_t *data = json_object_get(content, "data");
        if (json_is_object(data))
            s_add_display(self, data);
    } else if (strcmp(msg_type, "clear_output") == 0) {
        if (json_is_true(json_object_get(content, "wait")))
            self->shown.clear_pending = 1;
        else
            s_clear(self);
    }
}

/*  One line at the result's end for what was not shown. */
static void s_notice_dropped(mcp_t *self)
{
    shown_t *s = &self->shown;
    if (s->images_bad)
        s_notice(self, "[kennel mcp: %d image output%s not valid base64: not shown]\n",
                 s->images_bad, s->images_bad == 1 ? " is" : "s are");
    char images[64] = "";
    if (s->images_dropped)
        snprintf(images, sizeof images, " (%d image%s among them)", s->images_dropped,
                 s->images_dropped == 1 ? "" : "s");
    if (s->dropped)
        s_notice(self, "[kennel mcp: %zu bytes of this cell's output%s are not shown: a result "
                 "holds at most %zu bytes (kennel mcp --max-result)]\n", s->dropped, images,
                 self->limits.max_result);
}

void mcp_cell_done(mcp_t *self, const json_t *reply, const json_t *metadata)
{
    if (!mcp_cell_running(self))
        return;
    const char *status = json_string_value(json_object_get(reply, "status"));
    const char *outcome = json_string_value(json_object_get(metadata, "outcome"));
    if (!status)
        status = "error";
    if (!outcome)
        outcome = strcmp(status, "ok") == 0 ? "ok" : strcmp(status, "aborted") == 0 ? "aborted"
                                                                                    : "error";
    int failed = strcmp(status, "ok") != 0;
    if (strcmp(status, "aborted") == 0) {
        s_notice(self, "[kennel mcp: the cell was not run: a cell before it failed]\n");
    } else if (failed && !self->shown.saw_error) {
        /* An error reply comes with an iopub error, kenneld's own too; this is for one that
         * did not. */
        const char *ename = json_string_value(json_object_get(reply, "ename"));
        const char *evalue = json_string_value(json_object_get(reply, "evalue"));
        s_notice(self, "%.100s: %.300s\n", ename ? ename : "Error", evalue ? evalue : status);
    }
    s_notice_dropped(self);
    s_flush_text(&self->shown);
    json_t *content = self->shown.content;
    self->shown.content = NULL;
    json_t *structured = s_cell_structured(outcome, reply, metadata, self->shown.images);
    s_finish(self, s_structured_result(content, structured, failed));
}

void mcp_cell_lost(mcp_t *self, const char *why)
{
    if (!mcp_cell_running(self))
        return;
    s_notice_dropped(self);
    s_notice(self, "%s\n", why ? why : "the cell's end was lost");
    s_flush_text(&self->shown);
    json_t *content = self->shown.content;
    self->shown.content = NULL;
    s_finish(self, json_pack("{s:o, s:b}", "content", content, "isError", 1));
}

/* ---- the tools --------------------------------------------------------------------------- */

/*  "kennel://SESSION/PATH", the path percent-encoded but for its slashes: the URI of a
 *  workspace file in an embedded resource. */
static char *s_file_uri(const char *session, const char *path)
{
    buf_t b = {0};
    static const char hex[] = "0123456789ABCDEF";
    s_buf_add(&b, "kennel://", 9);
    s_buf_add(&b, session, strlen(session));
    s_buf_add(&b, "/", 1);
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~/", *p)) {
            s_buf_add(&b, p, 1);
        } else {
            char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            s_buf_add(&b, esc, 3);
        }
    }
    return b.data;
}

/*  data as base64, a malloc'd string, or NULL. */
static char *s_base64(const void *data, size_t len)
{
    size_t size = sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
    char *b64 = malloc(size);
    if (b64)
        sodium_bin2base64(b64, size, data, len, sodium_base64_VARIANT_ORIGINAL);
    return b64;
}

static int s_is_text(const unsigned char *data, size_t len)
{
    for (size_t i = 0, n; i < len; i += n)
        if (data[i] == 0 || (n = jvalid_utf8(data + i, len - i)) == 0)
            return 0;
    return 1;
}

static void s_download(mcp_t *self, call_t *call)
{
    const char *path = json_string_value(json_object_get(call->args, "path"));
    char why[512] = "";
    void *data = NULL;
    size_t len = 0;
    if (self->ops->file_get(self->ctx, path, &data, &len, why, sizeof why) < 0) {
        s_answer_text(self, call->id, 1, "%s", why[0] ? why : "the file could not be read");
        return;
    }
    const unsigned char *bytes = data;
    const char *image = len >= 8 && memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) == 0 ? "image/png"
                        : len >= 3 && memcmp(bytes, "\xff\xd8\xff", 3) == 0 ? "image/jpeg"
                                                                            : NULL;
    int text = !image && s_is_text(bytes, len);
    size_t cost = text ? s_json_len(data, len)
                       : sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
    json_t *block = NULL;
    if (cost > self->limits.max_result) {
        s_answer_text(self, call->id, 1, "TooLarge: %s is %zu bytes; a result holds at most %zu "
                      "(kennel mcp --max-result). `kennel get %s %s` copies it whole.", path, len,
                      self->limits.max_result, self->session, path);
        free(data);
        return;
    }
    if (text) {
        block = s_text_block(data, len);
    } else {
        char *b64 = s_base64(data, len);
        char *uri = image ? NULL : s_file_uri(self->session, path);
        if (b64 && image)
            block = json_pack("{s:s, s:s, s:s}", "type", "image", "data", b64, "mimeType", image);
        else if (b64 && uri)
            block = json_pack("{s:s, s:{s:s, s:s, s:s}}", "type", "resource", "resource", "uri",
                              uri, "mimeType", "application/octet-stream", "blob", b64);
        free(b64);
        free(uri);
    }
    free(data);
    if (!block) {
        s_answer_text(self, call->id, 1, "out of memory for a result of %zu bytes", cost);
        return;
    }
    json_t *content = json_array();
    json_array_append_new(content, block);
    s_result(self, call->id, json_pack("{s:o, s:b}", "content", content, "isError", 0));
}

static void s_upload(mcp_t *self, call_t *call)
{
    const char *path = json_string_value(json_object_get(call->args, "path"));
    json_t *content = json_object_get(call->args, "content");
    const char *encoding = json_string_value(json_object_get(call->args, "encoding"));
    const char *data = json_string_value(content);
    size_t len = json_string_length(content);
    unsigned char *bin = NULL;
    if (encoding && strcmp(encoding, "base64") == 0) {
        bin = malloc(len / 4 * 3 + 3);
        if (!bin || sodium_base642bin(bin, len / 4 * 3 + 3, data, len, " \t\r\n", &len, NULL,
                                      sodium_base64_VARIANT_ORIGINAL) != 0) {
            free(bin);
            s_answer_text(self, call->id, 1, "content is not valid base64 (encoding: base64)");
            return;
        }
        data = (const char *)bin;
    }
    char why[512] = "";
    if (self->ops->file_put(self->ctx, path, data, len, why, sizeof why) < 0)
        s_answer_text(self, call->id, 1, "%s", why[0] ? why : "the file could not be written");
    else
        s_answer_text(self, call->id, 0, "wrote %s: %zu bytes", path, len);
    free(bin);
}

static int s_by_path(const void *x, const void *y)
{
    const char *a = json_string_value(json_object_get(*(json_t *const *)x, "path"));
    const char *b = json_string_value(json_object_get(*(json_t *const *)y, "path"));
    return strcmp(a ? a : "", b ? b : "");
}

static void s_list(mcp_t *self, call_t *call)
{
    char why[512] = "";
    json_t *reply = self->ops->file_list(self->ctx, why, sizeof why);
    json_t *files = json_object_get(reply, "files");
    if (!json_is_array(files)) {
        json_decref(reply);
        s_answer_text(self, call->id, 1, "%s", why[0] ? why : "the files could not be listed");
        return;
    }
    size_t n = json_array_size(files), i;
    json_t **sorted = calloc(n ? n : 1, sizeof *sorted);
    json_t *kept = json_array(), *f;
    json_array_foreach(files, i, f) {
        json_t *path = json_object_get(f, "path"), *size = json_object_get(f, "size");
        if (sorted && json_is_string(path) && json_is_integer(size))
            sorted[i] = json_pack("{s:O, s:O}", "path", path, "size", size);
        json_t *mtime = json_object_get(f, "mtime");
        if (sorted && sorted[i] && json_is_integer(mtime))
            json_object_set(sorted[i], "mtime", mtime);
        if (sorted && sorted[i] && json_is_false(json_object_get(f, "utf8")))
            json_object_set_new(sorted[i], "utf8", json_false());
    }
    size_t m = 0;
    for (i = 0; sorted && i < n; i++)
        if (sorted[i])
            sorted[m++] = sorted[i];
    if (sorted)
        qsort(sorted, m, sizeof *sorted, s_by_path);
    for (i = 0; i < m; i++)
        json_array_append_new(kept, sorted[i]);
    free(sorted);
    json_t *structured = json_pack("{s:o, s:b}", "files", kept, "truncated",
                                   json_is_true(json_object_get(reply, "truncated")));
    json_decref(reply);
    s_result(self, call->id, s_structured_result(json_array(), structured, 0));
}

/*  Serve call: answer it now, or (a cell) start it and answer when it ends. */
static void s_serve(mcp_t *self, call_t *call)
{
    char why[512] = "";
    self->running = call;
    switch (call->tool) {
    case TOOL_RUN: {
        const char *code = json_string_value(json_object_get(call->args, "code"));
        json_t *timeout = json_object_get(call->args, "timeout");
        double timeout_s = json_is_number(timeout) ? json_number_value(timeout) : 0;
        self->shown.content = json_array();
        if (!self->shown.content ||
            self->ops->cell_start(self->ctx, code, timeout_s, why, sizeof why) < 0) {
            s_answer_text(self, call->id, 1, "%s", why[0] ? why : "the cell could not be sent");
            break;
        }
        return; /* answered by mcp_cell_done or mcp_cell_lost */
    }
    case TOOL_UPLOAD:
        s_upload(self, call);
        break;
    case TOOL_DOWNLOAD:
        s_download(self, call);
        break;
    case TOOL_LIST:
        s_list(self, call);
        break;
    case TOOL_RESTART:
        if (self->ops->restart(self->ctx, why, sizeof why) < 0)
            s_answer_text(self, call->id, 1, "%s", why[0] ? why : "the restart failed");
        else
            s_answer_text(self, call->id, 0, "restarted session %s: a fresh namespace (variables, "
                          "imports and history are gone; workspace files stay)", self->session);
        break;
    }
    self->running = NULL;
    s_shown_reset(&self->shown);
    s_call_free(call);
}

/*  Serve the waiting calls until one is a cell that runs, or none is left. */
static void s_pump(mcp_t *self)
{
    while (!self->running && self->head) {
        call_t *call = self->head;
        self->head = call->next;
        if (!self->head)
            self->tail = NULL;
        self->queued--;
        call->next = NULL;
        s_serve(self, call);
    }
}

/*  v is a string without NUL: as C reads it, it is whole. */
static int s_is_cstr(const json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

/*  A path argument: a non-empty string without NUL (kenneld checks the rest). */
static int s_is_path(const json_t *path)
{
    return s_is_cstr(path) && json_string_length(path);
}

/*  The arguments of tool for tools/call: NULL when they are fine, else why not. */
static const char *s_check_args(tool_t tool, const json_t *args)
{
    json_t *code = json_object_get(args, "code"), *timeout = json_object_get(args, "timeout");
    json_t *path = json_object_get(args, "path"), *content = json_object_get(args, "content");
    json_t *encoding = json_object_get(args, "encoding");
    switch (tool) {
    case TOOL_RUN:
        if (!s_is_cstr(code))
            return "run_python needs code, a string (without NUL)";
        if (timeout && !json_is_null(timeout) &&
            (!json_is_number(timeout) || !(json_number_value(timeout) > 0) ||
             !isfinite(json_number_value(timeout))))
            return "run_python's timeout is a number of seconds above 0";
        return NULL;
    case TOOL_UPLOAD:
        if (!json_is_string(content))
            return "upload_file needs content, a string";
        if (encoding && !json_is_null(encoding) &&
            (!json_is_string(encoding) || (strcmp(json_string_value(encoding), "text") != 0 &&
                                           strcmp(json_string_value(encoding), "base64") != 0)))
            return "upload_file's encoding is text or base64";
        return s_is_path(path) ? NULL : "upload_file needs path, a file's path in the workspace";
    case TOOL_DOWNLOAD:
        return s_is_path(path) ? NULL : "download_file needs path, a file's path in the workspace";
    case TOOL_LIST:
    case TOOL_RESTART:
        return NULL;
    }
    return "unknown tool";
}

static void s_tools_call(mcp_t *self, json_t *id, json_t *params)
{
    json_t *jname = json_object_get(params, "name");
    const char *name = json_string_value(jname);
    json_t *args = json_object_get(params, "arguments");
    if (!name) {
        s_error(self, id, MCP_INVALID_PARAMS, "tools/call needs name, a string", NULL);
        return;
    }
    size_t ntools = sizeof s_tool_names / sizeof s_tool_names[0];
    size_t t = s_is_cstr(jname) ? 0 : ntools;
    while (t < ntools && strcmp(s_tool_names[t].name, name) != 0)
        t++;
    if (t == ntools) {
        char msg[200];
        snprintf(msg, sizeof msg, "Unknown tool: %.100s", name);
        s_error(self, id, MCP_INVALID_PARAMS, msg, NULL);
        return;
    }
    if (args && !json_is_null(args) && !json_is_object(args)) {
        s_error(self, id, MCP_INVALID_PARAMS, "tools/call's arguments must be an object", NULL);
        return;
    }
    const char *bad = s_check_args(s_tool_names[t].tool, args);
    if (bad) {
        s_error(self, id, MCP_INVALID_PARAMS, bad, NULL);
        return;
    }
    if (self->queued >= MCP_MAX_QUEUED) {
        s_answer_text(self, id, 1, "Busy: %d calls wait already behind the running one; try "
                      "again when they are done", MCP_MAX_QUEUED);
        return;
    }
    call_t *call = calloc(1, sizeof *call);
    if (!call) {
        s_answer_text(self, id, 1, "out of memory");
        return;
    }
    call->id = json_incref(id);
    call->args = json_is_object(args) ? json_incref(args) : json_object();
    call->tool = s_tool_names[t].tool;
    if (self->tail)
        self->tail->next = call;
    else
        self->head = call;
    self->tail = call;
    self->queued++;
    s_pump(self);
}

/*  notifications/cancelled: a waiting call is dropped; the running cell is interrupted and
 *  its result, when it comes, not sent (the specification: no response to a cancelled
 *  request). Calls that answer at once cannot be cancelled: they are done before the
 *  notification is read. */
static void s_cancel(mcp_t *self, const json_t *params)
{
    json_t *id = json_object_get(params, "requestId");
    if (!id)
        return;
    if (self->running && json_equal(self->running->id, id) && !self->cancelled) {
        self->cancelled = 1;
        if (self->running->tool == TOOL_RUN)
            self->ops->cell_interrupt(self->ctx);
        return;
    }
    for (call_t **p = &self->head; *p; p = &(*p)->next) {
        if (!json_equal((*p)->id, id))
            continue;
        call_t *gone = *p;
        *p = gone->next;
        if (self->tail == gone) {
            self->tail = NULL;
            for (call_t *c = self->head; c; c = c->next)
                self->tail = c;
        }
        self->queued--;
        s_call_free(gone);
        return;
    }
}

static void s_initialize(mcp_t *self, json_t *id, json_t *params)
{
    if (!json_is_string(json_object_get(params, "protocolVersion"))) {
        s_error(self, id, MCP_INVALID_PARAMS, "initialize needs protocolVersion, a string", NULL);
        return;
    }
    if (self->initialized) {
        s_error(self, id, MCP_INVALID_REQUEST, "already initialized", NULL);
        return;
    }
    self->initialized = 1;
    /* Whatever version the client asked for, the one served is answered: a client that does
     * not know it disconnects (the specification's version negotiation). */
    char instructions[512];
    snprintf(instructions, sizeof instructions,
             "Runs Python in the kennel session %s: a persistent, sandboxed IPython. Variables, "
             "imports and workspace files stay from one call to the next (and across "
             "restarts of this server); restart gives a fresh namespace.", self->session);
    s_result(self, id, json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion",
                                 MCP_PROTOCOL_VERSION, "capabilities", "tools", "listChanged", 0,
                                 "serverInfo", "name", "kennel", "title", "kennel",
                                 "version", KENNEL_VERSION, "instructions", instructions));
}

/*  One message from the client, parsed. */
static void s_handle(mcp_t *self, json_t *msg)
{
    if (!json_is_object(msg)) {
        s_error(self, NULL, MCP_INVALID_REQUEST, json_is_array(msg)
                ? "batches are not served: MCP 2025-06-18 sends one message a line"
                : "a message is a JSON object", NULL);
        return;
    }
    json_t *id = json_object_get(msg, "id");
    json_t *method = json_object_get(msg, "method");
    json_t *params = json_object_get(msg, "params");
    int has_id = id != NULL;
    if (has_id && !json_is_string(id) && !json_is_number(id)) {
        s_error(self, NULL, MCP_INVALID_REQUEST, "a request's id is a string or a number", NULL);
        return;
    }
    const char *version = json_string_value(json_object_get(msg, "jsonrpc"));
    if (!version || strcmp(version, "2.0") != 0) {
        s_error(self, id, MCP_INVALID_REQUEST, "jsonrpc must be \"2.0\"", NULL);
        return;
    }
    if (!method) {
        /* A response (result or error) to a request of ours: this server sends none. */
        if (!json_object_get(msg, "result") && !json_object_get(msg, "error"))
            s_error(self, id, MCP_INVALID_REQUEST, "a request needs a method", NULL);
        return;
    }
    if (!json_is_string(method)) {
        s_error(self, id, MCP_INVALID_REQUEST, "method must be a string", NULL);
        return;
    }
    const char *name = s_is_cstr(method) ? json_string_value(method) : "";
    if (params && !json_is_object(params)) {
        if (has_id)
            s_error(self, id, MCP_INVALID_PARAMS, "params must be an object", NULL);
        return;
    }
    if (!has_id) { /* a notification: never answered */
        if (strcmp(name, "notifications/cancelled") == 0)
            s_cancel(self, params);
        return; /* notifications/initialized and the others change nothing here */
    }
    if (strcmp(name, "initialize") == 0) {
        s_initialize(self, id, params);
    } else if (strcmp(name, "ping") == 0) {
        s_result(self, id, json_object());
    } else if (strcmp(name, "tools/list") != 0 && strcmp(name, "tools/call") != 0) {
        char msg_text[200];
        snprintf(msg_text, sizeof msg_text, "Method not found: %.100s", name);
        s_error(self, id, MCP_METHOD_NOT_FOUND, msg_text, NULL);
    } else if (!self->initialized) {
        s_error(self, id, MCP_INVALID_REQUEST, "not initialized: the first request is initialize",
                NULL);
    } else if (strcmp(name, "tools/list") == 0) {
        s_result(self, id, json_incref(self->tools));
    } else {
        s_tools_call(self, id, params);
    }
}

/*  One whole line (its newline gone). */
static void s_line(mcp_t *self, const char *line, size_t len)
{
    if (len && line[len - 1] == '\r')
        len--;
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (i == len)
        return; /* an empty line: nothing */
    json_error_t err;
    /* \u0000 is JSON, so it parses; every string used is then checked for one (a NUL would
     * cut it short in C). */
    json_t *msg = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!msg) {
        char text[256];
        snprintf(text, sizeof text, "Parse error: %s (at byte %d)", err.text, err.position);
        s_error(self, NULL, MCP_PARSE_ERROR, text, NULL);
        return;
    }
    s_handle(self, msg);
    json_decref(msg);
}

/*  The end of a line that passed max_request. */
static void s_oversize_end(mcp_t *self)
{
    size_t len = self->oversize_len;
    json_t *id = s_scan_id(&self->scan);
    char text[256];
    snprintf(text, sizeof text, "the request is %zu bytes, past kennel mcp's bound of %zu "
             "(kennel mcp --max-request)", len, self->limits.max_request);
    s_error(self, id, MCP_INVALID_REQUEST, text,
            json_pack("{s:I, s:I}", "bytes", (json_int_t)len, "max_request",
                      (json_int_t)self->limits.max_request));
    json_decref(id);
    self->oversize = 0;
}

void mcp_feed(mcp_t *self, const void *data, size_t len)
{
    const char *p = data, *end = p + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (!self->oversize &&
            (self->line.len + n > self->limits.max_request || s_buf_add(&self->line, p, n) < 0)) {
            /* Past the bound (or past what memory allows): scanned from its start, and no
             * longer kept. */
            self->oversize = 1;
            memset(&self->scan, 0, sizeof self->scan);
            s_scan(&self->scan, self->line.data ? self->line.data : "", self->line.len);
            self->oversize_len = self->line.len;
            s_buf_free(&self->line);
        }
        if (self->oversize) {
            s_scan(&self->scan, p, n);
            self->oversize_len += n;
        }
        if (!nl)
            break;
        if (self->oversize)
            s_oversize_end(self);
        else
            s_line(self, self->line.data ? self->line.data : "", self->line.len);
        self->line.len = 0;
        if (self->line.cap > LINE_KEEP_CAP)
            s_buf_free(&self->line);
        p = nl + 1;
    }
}

void mcp_feed_end(mcp_t *self)
{
    if (self->oversize)
        s_oversize_end(self);
    else if (self->line.len)
        s_line(self, self->line.data, self->line.len);
    self->line.len = 0;
}
