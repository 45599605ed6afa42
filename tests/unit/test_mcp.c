/*  Unit tests of mcp, `kennel mcp`'s protocol core: lines in, JSON-RPC out, against a
 *  recording world (no sockets, no kenneld). Each malformed input has a named test; a cell's
 *  outputs are fed as the glue feeds them, as Jupyter messages' types and contents. */
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "../harness.h"
#include "mcp.h"

#define MAX_FILES 8

typedef struct {
    char path[64];
    unsigned char *data;
    size_t len;
} file_t;

typedef struct {
    json_t *sent;        /* every message the core sent, parsed, in order */
    int bad_lines;       /* sent lines that were not one JSON object without a newline */
    int cells;           /* cell_start calls */
    char code[256];      /* the last cell's code */
    double timeout_s;    /* and its deadline */
    int fail_cell;       /* cell_start fails */
    int interrupts;
    file_t files[MAX_FILES];
    int fail_files;      /* file ops fail */
    int restarts;
    int fail_restart;
} world_t;

static void s_send(void *ctx, const char *text, size_t len)
{
    world_t *w = ctx;
    json_t *msg = json_loadb(text, len, 0, NULL);
    if (!json_is_object(msg) || memchr(text, '\n', len) || strlen(text) != len)
        w->bad_lines++;
    json_array_append_new(w->sent, msg ? msg : json_null());
}

static int s_cell_start(void *ctx, const char *code, double timeout_s, char *why, size_t why_len)
{
    world_t *w = ctx;
    if (w->fail_cell) {
        snprintf(why, why_len, "kenneld is not running");
        return -1;
    }
    w->cells++;
    snprintf(w->code, sizeof w->code, "%s", code);
    w->timeout_s = timeout_s;
    return 0;
}

static void s_cell_interrupt(void *ctx)
{
    ((world_t *)ctx)->interrupts++;
}

static file_t *s_file(world_t *w, const char *path, int make)
{
    for (int i = 0; i < MAX_FILES; i++)
        if (strcmp(w->files[i].path, path) == 0 && w->files[i].path[0])
            return &w->files[i];
    for (int i = 0; make && i < MAX_FILES; i++)
        if (!w->files[i].path[0]) {
            snprintf(w->files[i].path, sizeof w->files[i].path, "%s", path);
            return &w->files[i];
        }
    return NULL;
}

static int s_file_put(void *ctx, const char *path, const void *data, size_t len, char *why,
                      size_t why_len)
{
    world_t *w = ctx;
    file_t *f = w->fail_files ? NULL : s_file(w, path, 1);
    if (!f) {
        snprintf(why, why_len, "BadPath: no");
        return -1;
    }
    free(f->data);
    f->data = malloc(len + 1);
    memcpy(f->data, data, len);
    f->len = len;
    return 0;
}

static int s_file_get(void *ctx, const char *path, void **data, size_t *len, char *why,
                      size_t why_len)
{
    world_t *w = ctx;
    file_t *f = w->fail_files ? NULL : s_file(w, path, 0);
    if (!f) {
        snprintf(why, why_len, "NoSuchFile: %s", path);
        return -1;
    }
    *data = malloc(f->len + 1);
    memcpy(*data, f->data, f->len);
    *len = f->len;
    return 0;
}

static json_t *s_file_list(void *ctx, char *why, size_t why_len)
{
    world_t *w = ctx;
    if (w->fail_files) {
        snprintf(why, why_len, "NoSuchSession: gone");
        return NULL;
    }
    json_t *files = json_array();
    for (int i = MAX_FILES - 1; i >= 0; i--) /* not in name order: the core sorts */
        if (w->files[i].path[0])
            json_array_append_new(files, json_pack("{s:s, s:I, s:I}", "path", w->files[i].path,
                                                   "size", (json_int_t)w->files[i].len,
                                                   "mtime", (json_int_t)1700000000));
    json_array_append_new(files, json_pack("{s:i}", "size", 3)); /* no path: left out */
    return json_pack("{s:s, s:o, s:b}", "status", "ok", "files", files, "truncated", 0);
}

static int s_restart(void *ctx, char *why, size_t why_len)
{
    world_t *w = ctx;
    if (w->fail_restart) {
        snprintf(why, why_len, "session t did not answer the restart");
        return -1;
    }
    w->restarts++;
    return 0;
}

static const mcp_ops_t s_ops = {s_send, s_cell_start, s_cell_interrupt, s_file_put,
                                s_file_get, s_file_list, s_restart};

static mcp_t *s_new(world_t *w, const mcp_limits_t *limits)
{
    memset(w, 0, sizeof *w);
    w->sent = json_array();
    return mcp_new("t", limits, &s_ops, w);
}

static void s_free(mcp_t **m, world_t *w)
{
    mcp_destroy(m);
    json_decref(w->sent);
    for (int i = 0; i < MAX_FILES; i++)
        free(w->files[i].data);
}

/*  Feed text and a newline. */
static void s_line(mcp_t *m, const char *text)
{
    mcp_feed(m, text, strlen(text));
    mcp_feed(m, "\n", 1);
}

static size_t s_count(world_t *w)
{
    return json_array_size(w->sent);
}

/*  The last message sent (borrowed). */
static json_t *s_last(world_t *w)
{
    return json_array_get(w->sent, json_array_size(w->sent) - 1);
}

static long long s_error_code(json_t *msg)
{
    return json_integer_value(json_object_get(json_object_get(msg, "error"), "code"));
}

static int s_id_is(json_t *msg, long long id)
{
    json_t *v = json_object_get(msg, "id");
    return json_is_integer(v) && json_integer_value(v) == id;
}

static json_t *s_result(json_t *msg)
{
    return json_object_get(msg, "result");
}

static int s_is_error_result(json_t *msg)
{
    return json_is_true(json_object_get(s_result(msg), "isError"));
}

/*  Content block i of a tools/call result (borrowed). */
static json_t *s_block(json_t *msg, size_t i)
{
    return json_array_get(json_object_get(s_result(msg), "content"), i);
}

static const char *s_block_text(json_t *msg, size_t i)
{
    return json_string_value(json_object_get(s_block(msg, i), "text"));
}

static void s_init(mcp_t *m)
{
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":"
              "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"
              "\"clientInfo\":{\"name\":\"test\",\"version\":\"1\"}}}");
    s_line(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
}

/*  tools/call of name with arguments (JSON text), id. */
static void s_call(mcp_t *m, int id, const char *name, const char *args)
{
    char line[4096];
    snprintf(line, sizeof line,
             "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":"
             "{\"name\":\"%s\",\"arguments\":%s}}", id, name, args);
    s_line(m, line);
}

static void s_output(mcp_t *m, const char *type, const char *content)
{
    json_t *c = json_loads(content, 0, NULL);
    CHECK(c != NULL);
    mcp_cell_output(m, type, c);
    json_decref(c);
}

static void s_done(mcp_t *m, const char *reply, const char *metadata)
{
    json_t *r = json_loads(reply, 0, NULL), *md = json_loads(metadata, 0, NULL);
    CHECK(r && md);
    mcp_cell_done(m, r, md);
    json_decref(r);
    json_decref(md);
}

static const char s_ok_reply[] = "{\"status\":\"ok\",\"execution_count\":1}";
static const char s_ok_md[] = "{\"outcome\":\"ok\",\"metrics\":{\"wall_ms\":2,\"cpu_ms\":1.5}}";

/* ---- lifecycle ------------------------------------------------------------------------- */

TEST(initialize_answers_the_version_served)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    CHECK_EQ_INT(s_count(&w), 1); /* the notification is not answered */
    json_t *r = s_result(s_last(&w));
    CHECK(s_id_is(s_last(&w), 0));
    CHECK_STR(json_string_value(json_object_get(r, "protocolVersion")), MCP_PROTOCOL_VERSION);
    CHECK(json_is_object(json_object_get(json_object_get(r, "capabilities"), "tools")));
    CHECK_STR(json_string_value(json_object_get(json_object_get(r, "serverInfo"), "name")),
              "kennel");
    CHECK(strstr(json_string_value(json_object_get(r, "instructions")), "session t") != NULL);
    CHECK_STR(json_string_value(json_object_get(s_last(&w), "jsonrpc")), "2.0");
    CHECK_EQ_INT(w.bad_lines, 0);
    s_free(&m, &w);
}

TEST(initialize_with_another_version_gets_ours)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"initialize\",\"params\":"
              "{\"protocolVersion\":\"2099-01-01\",\"capabilities\":{}}}");
    json_t *r = s_result(s_last(&w));
    CHECK_STR(json_string_value(json_object_get(s_last(&w), "id")), "a");
    CHECK_STR(json_string_value(json_object_get(r, "protocolVersion")), MCP_PROTOCOL_VERSION);
    s_free(&m, &w);
}

TEST(malformed_initialize_without_version)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_free(&m, &w);
}

TEST(initialize_twice_is_refused)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_init(m);
    CHECK_EQ_INT(s_count(&w), 2);
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    s_free(&m, &w);
}

TEST(tools_before_initialize_are_refused_but_ping_is_answered)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
    CHECK(json_is_object(s_result(s_last(&w))));
    CHECK_EQ_INT(json_object_size(s_result(s_last(&w))), 0);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    s_call(m, 3, "run_python", "{\"code\":\"1\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    CHECK_EQ_INT(w.cells, 0);
    s_free(&m, &w);
}

TEST(tools_list_has_the_five_tools_and_their_schemas)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{}}");
    json_t *tools = json_object_get(s_result(s_last(&w)), "tools"), *t;
    CHECK_EQ_INT(json_array_size(tools), 5);
    const char *names[] = {"run_python", "upload_file", "download_file", "list_files", "restart"};
    size_t i;
    json_array_foreach(tools, i, t) {
        CHECK_STR(json_string_value(json_object_get(t, "name")), i < 5 ? names[i] : "");
        CHECK_STR(json_string_value(json_object_get(json_object_get(t, "inputSchema"), "type")),
                  "object");
        CHECK(json_string_length(json_object_get(t, "description")) > 20);
    }
    json_t *run = json_array_get(tools, 0);
    CHECK(json_is_object(json_object_get(run, "outputSchema")));
    CHECK(json_is_object(json_object_get(json_array_get(tools, 3), "outputSchema")));
    CHECK_STR(json_string_value(json_array_get(
                  json_object_get(json_object_get(run, "inputSchema"), "required"), 0)),
              "code");
    s_free(&m, &w);
}

/* ---- malformed input, one test each ----------------------------------------------------- */

TEST(malformed_json_is_a_parse_error)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":1,");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_PARSE_ERROR);
    CHECK(json_is_null(json_object_get(s_last(&w), "id")));
    s_line(m, "garbage");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_PARSE_ERROR);
    CHECK_EQ_INT(s_count(&w), 2);
    s_free(&m, &w);
}

TEST(malformed_not_utf8_is_a_parse_error)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xff\xfeing\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_PARSE_ERROR);
    s_free(&m, &w);
}

TEST(malformed_nul_byte_is_a_parse_error)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    mcp_feed(m, "{\"jsonrpc\":\"2.0\",\0\"id\":1}\n", 26);
    CHECK_EQ_INT(s_count(&w), 1);
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_PARSE_ERROR);
    s_free(&m, &w);
}

TEST(malformed_batch_is_an_invalid_request)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_line(m, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    CHECK(json_is_null(json_object_get(s_last(&w), "id")));
    s_free(&m, &w);
}

TEST(malformed_scalar_is_an_invalid_request)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_line(m, "42");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    s_line(m, "\"ping\"");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    s_free(&m, &w);
}

TEST(malformed_missing_or_wrong_jsonrpc)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_line(m, "{\"id\":7,\"method\":\"ping\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    CHECK(s_id_is(s_last(&w), 7));
    s_line(m, "{\"jsonrpc\":\"1.0\",\"id\":8,\"method\":\"ping\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    CHECK(s_id_is(s_last(&w), 8));
    s_free(&m, &w);
}

TEST(malformed_null_or_object_id)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":{\"a\":1},\"method\":\"ping\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    CHECK(json_is_null(json_object_get(s_last(&w), "id")));
    s_free(&m, &w);
}

TEST(malformed_method_not_a_string)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":2}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    s_free(&m, &w);
}

TEST(malformed_params_not_an_object)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[1]}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":3}");
    CHECK_EQ_INT(s_count(&w), 1); /* a notification is never answered */
    s_free(&m, &w);
}

TEST(unknown_method_is_not_found)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/list\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_METHOD_NOT_FOUND);
    CHECK(s_id_is(s_last(&w), 1));
    s_free(&m, &w);
}

TEST(unknown_notification_and_responses_get_no_answer)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\",\"params\":{}}");
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}}");
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":9,\"error\":{\"code\":1,\"message\":\"x\"}}");
    CHECK_EQ_INT(s_count(&w), 0);
    s_free(&m, &w);
}

TEST(empty_lines_crlf_and_split_lines)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    mcp_feed(m, "\n\r\n  \n", 6);
    CHECK_EQ_INT(s_count(&w), 0);
    const char *ping = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n";
    for (size_t i = 0; ping[i]; i++)
        mcp_feed(m, ping + i, 1); /* a byte at a time */
    CHECK_EQ_INT(s_count(&w), 1);
    CHECK(s_id_is(s_last(&w), 1));
    /* two messages in one read */
    const char *two = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n"
                      "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n";
    mcp_feed(m, two, strlen(two));
    CHECK_EQ_INT(s_count(&w), 3);
    CHECK(s_id_is(s_last(&w), 3));
    s_free(&m, &w);
}

TEST(last_line_without_newline_is_read_at_the_end)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    const char *ping = "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}";
    mcp_feed(m, ping, strlen(ping));
    CHECK_EQ_INT(s_count(&w), 0);
    mcp_feed_end(m);
    CHECK_EQ_INT(s_count(&w), 1);
    CHECK(s_id_is(s_last(&w), 4));
    s_free(&m, &w);
}

TEST(oversize_line_is_refused_with_its_id_at_the_end)
{
    world_t w;
    mcp_limits_t lim = {256, MCP_MAX_RESULT_DEFAULT};
    mcp_t *m = s_new(&w, &lim);
    s_init(m);
    /* as the TypeScript SDK writes a call: the id last */
    char line[4096];
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    snprintf(line, sizeof line, "{\"method\":\"tools/call\",\"params\":{\"name\":\"upload_file\","
             "\"arguments\":{\"path\":\"a\",\"content\":\"%s\\\"\\\\\",\"x\":{\"id\":99}}},"
             "\"jsonrpc\":\"2.0\",\"id\":17}", big);
    for (size_t i = 0; i < strlen(line); i += 100) /* in slices */
        mcp_feed(m, line + i, strlen(line) - i < 100 ? strlen(line) - i : 100);
    mcp_feed(m, "\n", 1);
    CHECK_EQ_INT(s_count(&w), 2);
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    CHECK(s_id_is(s_last(&w), 17));
    json_t *data = json_object_get(json_object_get(s_last(&w), "error"), "data");
    CHECK_EQ_INT(json_integer_value(json_object_get(data, "bytes")), strlen(line));
    CHECK_EQ_INT(json_integer_value(json_object_get(data, "max_request")), 256);
    CHECK(w.files[0].path[0] == '\0');
    /* the next line is read as usual */
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":18,\"method\":\"ping\"}");
    CHECK(s_id_is(s_last(&w), 18));
    CHECK(json_is_object(s_result(s_last(&w))));
    s_free(&m, &w);
}

TEST(oversize_line_with_a_string_id_first)
{
    world_t w;
    mcp_limits_t lim = {64, MCP_MAX_RESULT_DEFAULT};
    mcp_t *m = s_new(&w, &lim);
    s_line(m, "{\"id\":\"req-1\",\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"name\":"
              "\"run_python\",\"arguments\":{\"code\":\"print(1)\"}}}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    CHECK_STR(json_string_value(json_object_get(s_last(&w), "id")), "req-1");
    s_free(&m, &w);
}

TEST(oversize_line_without_an_id_says_null)
{
    world_t w;
    mcp_limits_t lim = {16, MCP_MAX_RESULT_DEFAULT};
    mcp_t *m = s_new(&w, &lim);
    s_line(m, "[\"id\", 5, {\"id\": 6}, \"and more and more and more\"]");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_REQUEST);
    CHECK(json_is_null(json_object_get(s_last(&w), "id")));
    s_line(m, "{\"xid\":1, \"i\\u0064\":2, \"padding\": \"..........\"}");
    CHECK(json_is_null(json_object_get(s_last(&w), "id")));
    const char *last = "{\"padding\": \"...................\", \"id\": 3";
    mcp_feed(m, last, strlen(last));
    mcp_feed_end(m); /* the end of input ends it, the number with it */
    CHECK(s_id_is(s_last(&w), 3));
    CHECK_EQ_INT(s_count(&w), 3);
    s_free(&m, &w);
}

/* ---- tools/call: protocol errors ------------------------------------------------------------ */

TEST(unknown_tool_and_bad_arguments_are_invalid_params)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "rm_rf", "{}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    CHECK(strstr(json_string_value(json_object_get(json_object_get(s_last(&w), "error"),
                                                   "message")), "rm_rf") != NULL);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{}}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_call(m, 3, "run_python", "[]");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_call(m, 4, "run_python", "{}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_call(m, 5, "run_python", "{\"code\":1}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_call(m, 6, "run_python", "{\"code\":\"1\",\"timeout\":-1}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_call(m, 7, "run_python", "{\"code\":\"1\",\"timeout\":\"5\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_call(m, 8, "upload_file", "{\"path\":\"a\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_call(m, 9, "upload_file", "{\"path\":\"a\",\"content\":\"x\",\"encoding\":\"hex\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_call(m, 10, "download_file", "{\"path\":\"\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_call(m, 11, "download_file", "{\"path\":\"a\\u0000b\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    CHECK(s_id_is(s_last(&w), 11));
    s_call(m, 12, "run_python", "{\"code\":\"1\\u0000; import os\"}"); /* not cut short */
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_call(m, 13, "run_python\\u0000x", "{\"code\":\"1\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_INVALID_PARAMS);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"ping\\u0000\"}");
    CHECK_EQ_INT(s_error_code(s_last(&w)), MCP_METHOD_NOT_FOUND);
    CHECK_EQ_INT(w.cells, 0);
    s_free(&m, &w);
}

/* ---- run_python ------------------------------------------------------------------------------ */

TEST(run_python_collects_streams_result_and_structured_content)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "run_python", "{\"code\":\"print('hi'); 1+1\",\"timeout\":2.5}");
    CHECK_EQ_INT(w.cells, 1);
    CHECK_STR(w.code, "print('hi'); 1+1");
    CHECK(w.timeout_s == 2.5);
    CHECK(mcp_cell_running(m));
    CHECK_EQ_INT(s_count(&w), 1); /* not answered yet */
    s_output(m, "status", "{\"execution_state\":\"busy\"}");
    s_output(m, "execute_input", "{\"code\":\"print('hi'); 1+1\",\"execution_count\":1}");
    s_output(m, "stream", "{\"name\":\"stdout\",\"text\":\"hi\\n\"}");
    s_output(m, "stream", "{\"name\":\"stderr\",\"text\":\"warn\\n\"}");
    s_output(m, "execute_result", "{\"data\":{\"text/plain\":\"2\"},\"execution_count\":1}");
    s_done(m, s_ok_reply,
           "{\"outcome\":\"ok\",\"metrics\":{\"wall_ms\":2,\"cpu_ms\":0.711,\"x\":\"no\"},"
           "\"files\":[{\"name\":\"a.csv\",\"size\":3},{\"name\":5},\"junk\"],"
           "\"files_deleted\":[\"old\",7],\"files_truncated\":false}");
    CHECK(!mcp_cell_running(m));
    json_t *msg = s_last(&w);
    CHECK(s_id_is(msg, 1));
    CHECK(!s_is_error_result(msg));
    CHECK_STR(s_block_text(msg, 0), "hi\nwarn\n2\n");
    json_t *sc = json_object_get(s_result(msg), "structuredContent");
    CHECK_STR(json_string_value(json_object_get(sc, "outcome")), "ok");
    CHECK_EQ_INT(json_integer_value(json_object_get(sc, "execution_count")), 1);
    json_t *metrics = json_object_get(sc, "metrics");
    CHECK_EQ_INT(json_object_size(metrics), 2); /* the string is left out */
    CHECK(json_real_value(json_object_get(metrics, "cpu_ms")) == 0.711);
    json_t *files = json_object_get(sc, "files");
    CHECK_EQ_INT(json_array_size(files), 1);
    CHECK_STR(json_string_value(json_object_get(json_array_get(files, 0), "name")), "a.csv");
    CHECK_EQ_INT(json_array_size(json_object_get(sc, "files_deleted")), 1);
    CHECK(json_is_false(json_object_get(sc, "files_truncated")));
    /* the structured content, also as text (the last block): a model reads 0.711, not
     * jansson's 17 digits (0.71099999999999985) */
    CHECK(strstr(s_block_text(msg, 1), "\"cpu_ms\":0.711}") != NULL);
    json_t *again = json_loads(s_block_text(msg, 1), 0, NULL);
    CHECK(json_equal(again, sc));
    json_decref(again);
    CHECK_EQ_INT(json_array_size(json_object_get(s_result(msg), "content")), 2);
    CHECK_EQ_INT(w.bad_lines, 0);
    s_free(&m, &w);
}

TEST(run_python_error_is_a_result_with_is_error_and_no_colours)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "run_python", "{\"code\":\"1/0\"}");
    CHECK(w.timeout_s == 0);
    s_output(m, "error", "{\"ename\":\"ZeroDivisionError\",\"evalue\":\"division by zero\","
                         "\"traceback\":[\"\\u001b[0;31m---------\\u001b[0m\","
                         "\"\\u001b[0;31mZeroDivisionError\\u001b[0m: division by zero\","
                         "\"\\u001b]0;title\\u0007bell\\u0007 \\u001b(Bdone\\u001b[\","
                         "\"\\u001b\\u00e9t\\u00e9\\u001b\"]}");
    s_done(m, "{\"status\":\"error\",\"ename\":\"ZeroDivisionError\","
              "\"evalue\":\"division by zero\",\"execution_count\":1}",
           "{\"outcome\":\"error\",\"metrics\":{\"wall_ms\":1}}");
    json_t *msg = s_last(&w);
    CHECK(json_object_get(msg, "error") == NULL); /* not a protocol error */
    CHECK(s_is_error_result(msg));
    CHECK_STR(s_block_text(msg, 0),
              "---------\nZeroDivisionError: division by zero\nbell done\n\xc3\xa9t\xc3\xa9\n");
    CHECK(strchr(s_block_text(msg, 0), 0x1b) == NULL);
    json_t *sc = json_object_get(s_result(msg), "structuredContent");
    CHECK_STR(json_string_value(json_object_get(sc, "outcome")), "error");
    s_free(&m, &w);
}

TEST(run_python_failure_without_an_iopub_error_says_why)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "run_python", "{\"code\":\"while True: pass\",\"timeout\":1}");
    s_done(m, "{\"status\":\"error\",\"ename\":\"CellTimeout\",\"evalue\":\"past 1 s\"}",
           "{\"outcome\":\"timeout\"}");
    CHECK(s_is_error_result(s_last(&w)));
    CHECK_STR(s_block_text(s_last(&w), 0), "CellTimeout: past 1 s\n");
    json_t *sc = json_object_get(s_result(s_last(&w)), "structuredContent");
    CHECK_STR(json_string_value(json_object_get(sc, "outcome")), "timeout");
    s_call(m, 2, "run_python", "{\"code\":\"2\"}");
    s_done(m, "{\"status\":\"aborted\"}", "{}");
    CHECK(s_is_error_result(s_last(&w)));
    CHECK(strstr(s_block_text(s_last(&w), 0), "not run") != NULL);
    sc = json_object_get(s_result(s_last(&w)), "structuredContent");
    CHECK_STR(json_string_value(json_object_get(sc, "outcome")), "aborted");
    s_free(&m, &w);
}

/*  base64 of data, as IPython writes it: lines of 76 characters. */
static char *s_b64_lines(const void *data, size_t len)
{
    size_t size = sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
    char *flat = malloc(size), *out = malloc(size + size / 76 + 2);
    sodium_bin2base64(flat, size, data, len, sodium_base64_VARIANT_ORIGINAL);
    size_t n = 0;
    for (size_t i = 0; flat[i]; i++) {
        out[n++] = flat[i];
        if (i % 76 == 75)
            out[n++] = '\n';
    }
    out[n++] = '\n';
    out[n] = '\0';
    free(flat);
    return out;
}

static const unsigned char s_png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13,
                                      'I', 'H', 'D', 'R', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                      13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
                                      27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40};

TEST(run_python_png_is_image_content_in_order)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "run_python", "{\"code\":\"plot\"}");
    char *b64 = s_b64_lines(s_png, sizeof s_png);
    json_t *c = json_pack("{s:{s:s, s:s}, s:{}}", "data", "image/png", b64, "text/plain",
                          "<Figure size 640x480 with 1 Axes>", "metadata");
    s_output(m, "stream", "{\"name\":\"stdout\",\"text\":\"before\\n\"}");
    mcp_cell_output(m, "display_data", c);
    s_output(m, "stream", "{\"name\":\"stdout\",\"text\":\"after\\n\"}");
    s_output(m, "display_data", "{\"data\":{\"text/html\":\"<b>x</b>\",\"application/x\":{}}}");
    s_done(m, s_ok_reply, s_ok_md);
    json_t *msg = s_last(&w);
    CHECK_STR(s_block_text(msg, 0), "before\n");
    json_t *img = s_block(msg, 1);
    CHECK_STR(json_string_value(json_object_get(img, "type")), "image");
    CHECK_STR(json_string_value(json_object_get(img, "mimeType")), "image/png");
    const char *data = json_string_value(json_object_get(img, "data"));
    CHECK(data && strchr(data, '\n') == NULL);
    unsigned char back[256];
    size_t back_len = 0;
    CHECK(sodium_base642bin(back, sizeof back, data, strlen(data), NULL, &back_len, NULL,
                            sodium_base64_VARIANT_ORIGINAL) == 0);
    CHECK_EQ_INT(back_len, sizeof s_png);
    CHECK(memcmp(back, s_png, sizeof s_png) == 0);
    CHECK_STR(s_block_text(msg, 2),
              "after\n[kennel mcp: an output of text/html, application/x is not shown]\n");
    json_t *sc = json_object_get(s_result(msg), "structuredContent");
    CHECK_EQ_INT(json_integer_value(json_object_get(sc, "images")), 1);
    json_decref(c);
    free(b64);
    s_free(&m, &w);
}

TEST(run_python_bad_base64_image_is_not_shown)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "run_python", "{\"code\":\"x\"}");
    s_output(m, "display_data", "{\"data\":{\"image/png\":\"not base64!\"}}");
    s_done(m, s_ok_reply, s_ok_md);
    CHECK_STR(s_block_text(s_last(&w), 0),
              "[kennel mcp: 1 image output is not valid base64: not shown]\n");
    CHECK_EQ_INT(json_array_size(json_object_get(s_result(s_last(&w)), "content")), 2);
    s_free(&m, &w);
}

TEST(run_python_output_past_the_bound_is_cut_but_the_error_stays)
{
    world_t w;
    mcp_limits_t lim = {MCP_MAX_REQUEST_DEFAULT, 100};
    mcp_t *m = s_new(&w, &lim);
    s_init(m);
    s_call(m, 1, "run_python", "{\"code\":\"x\"}");
    char content[512], text[301];
    memset(text, 'a', 300);
    text[300] = '\0';
    snprintf(content, sizeof content, "{\"name\":\"stdout\",\"text\":\"%s\"}", text);
    s_output(m, "stream", content);
    char *b64 = s_b64_lines(s_png, sizeof s_png);
    json_t *c = json_pack("{s:{s:s}}", "data", "image/png", b64);
    mcp_cell_output(m, "display_data", c); /* past the bound: a line says so */
    s_output(m, "error", "{\"ename\":\"E\",\"evalue\":\"v\",\"traceback\":[\"E: the reason\"]}");
    s_done(m, "{\"status\":\"error\"}", "{\"outcome\":\"error\"}");
    const char *t = s_block_text(s_last(&w), 0);
    CHECK(t && strncmp(t, text, 100) == 0 && t[100] != 'a');
    CHECK(strstr(t, "E: the reason\n") != NULL);
    CHECK(strstr(t, "276 bytes of this cell's output (1 image among them) are not shown") != NULL);
    CHECK(s_is_error_result(s_last(&w)));
    json_decref(c);
    free(b64);
    s_free(&m, &w);
}

TEST(run_python_cut_never_splits_a_character)
{
    world_t w;
    mcp_limits_t lim = {MCP_MAX_REQUEST_DEFAULT, 5};
    mcp_t *m = s_new(&w, &lim);
    s_init(m);
    s_call(m, 1, "run_python", "{\"code\":\"x\"}");
    s_output(m, "stream", "{\"name\":\"stdout\",\"text\":\"ab\\u00e9\\u00e9\"}"); /* 2 + 2x2 */
    s_done(m, s_ok_reply, s_ok_md);
    const char *t = s_block_text(s_last(&w), 0);
    CHECK(t && strncmp(t, "ab\xc3\xa9\n[kennel mcp: 2 bytes", 24) == 0);
    s_free(&m, &w);
}

TEST(run_python_clear_output_forgets_what_came_before)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "run_python", "{\"code\":\"x\"}");
    s_output(m, "stream", "{\"name\":\"stdout\",\"text\":\"10%\"}");
    s_output(m, "clear_output", "{\"wait\":false}");
    s_output(m, "stream", "{\"name\":\"stdout\",\"text\":\"50%\"}");
    s_output(m, "clear_output", "{\"wait\":true}");
    s_output(m, "status", "{\"execution_state\":\"busy\"}"); /* not an output: no clear */
    s_output(m, "stream", "{\"name\":\"stdout\",\"text\":\"100%\"}");
    s_done(m, s_ok_reply, s_ok_md);
    CHECK_STR(s_block_text(s_last(&w), 0), "100%");
    s_free(&m, &w);
}

TEST(run_python_that_cannot_start_is_an_error_result)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    w.fail_cell = 1;
    s_call(m, 1, "run_python", "{\"code\":\"1\"}");
    CHECK(s_is_error_result(s_last(&w)));
    CHECK_STR(s_block_text(s_last(&w), 0), "kenneld is not running");
    CHECK(!mcp_cell_running(m));
    s_free(&m, &w);
}

TEST(run_python_lost_is_an_error_result_with_what_came)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "run_python", "{\"code\":\"1\"}");
    s_output(m, "stream", "{\"name\":\"stdout\",\"text\":\"partial\"}");
    mcp_cell_lost(m, "the session ended while the cell ran");
    CHECK(s_is_error_result(s_last(&w)));
    CHECK_STR(s_block_text(s_last(&w), 0), "partial\nthe session ended while the cell ran\n");
    /* events after its end change nothing */
    s_output(m, "stream", "{\"name\":\"stdout\",\"text\":\"late\"}");
    s_done(m, s_ok_reply, s_ok_md);
    CHECK_EQ_INT(s_count(&w), 2);
    s_free(&m, &w);
}

TEST(calls_wait_in_order_while_pings_are_answered)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "run_python", "{\"code\":\"first\"}");
    s_call(m, 2, "upload_file", "{\"path\":\"f.txt\",\"content\":\"hello\"}");
    s_call(m, 3, "run_python", "{\"code\":\"second\"}");
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}");
    CHECK(s_id_is(s_last(&w), 4));
    CHECK_EQ_INT(w.cells, 1);
    CHECK(w.files[0].path[0] == '\0'); /* the upload waits behind the cell */
    s_done(m, s_ok_reply, s_ok_md);
    /* the cell's answer, the upload's, and the second cell started */
    CHECK_EQ_INT(s_count(&w), 4);
    CHECK(s_id_is(json_array_get(w.sent, 2), 1));
    CHECK(s_id_is(json_array_get(w.sent, 3), 2));
    CHECK_STR(s_block_text(json_array_get(w.sent, 3), 0), "wrote f.txt: 5 bytes");
    CHECK_EQ_INT(w.cells, 2);
    CHECK_STR(w.code, "second");
    s_done(m, s_ok_reply, s_ok_md);
    CHECK(s_id_is(s_last(&w), 3));
    s_free(&m, &w);
}

TEST(cancelled_calls_get_no_answer)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "run_python", "{\"code\":\"sleep\"}");
    s_call(m, 2, "run_python", "{\"code\":\"queued\"}");
    s_call(m, 3, "run_python", "{\"code\":\"third\"}");
    s_line(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
              "\"params\":{\"requestId\":2,\"reason\":\"no\"}}");
    s_line(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
              "\"params\":{\"requestId\":1}}");
    CHECK_EQ_INT(w.interrupts, 1);
    s_line(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
              "\"params\":{\"requestId\":1}}"); /* twice: one interrupt */
    s_line(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
              "\"params\":{\"requestId\":77}}");
    CHECK_EQ_INT(w.interrupts, 1);
    s_output(m, "error", "{\"ename\":\"KeyboardInterrupt\",\"evalue\":\"\",\"traceback\":[]}");
    s_done(m, "{\"status\":\"error\"}", "{\"outcome\":\"interrupted\"}");
    CHECK_EQ_INT(s_count(&w), 1); /* neither 1 nor 2 is answered */
    CHECK_STR(w.code, "third");   /* 2 was dropped; 3 runs */
    s_done(m, s_ok_reply, s_ok_md);
    CHECK(s_id_is(s_last(&w), 3));
    s_free(&m, &w);
}

TEST(too_many_waiting_calls_are_refused)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "run_python", "{\"code\":\"runs\"}");
    for (int i = 0; i < MCP_MAX_QUEUED; i++)
        s_call(m, 100 + i, "list_files", "{}");
    CHECK_EQ_INT(s_count(&w), 1);
    s_call(m, 2, "list_files", "{}");
    CHECK(s_id_is(s_last(&w), 2));
    CHECK(s_is_error_result(s_last(&w)));
    CHECK(strstr(s_block_text(s_last(&w), 0), "Busy") != NULL);
    s_free(&m, &w); /* the waiting calls are freed unanswered */
}

/* ---- files and restart ------------------------------------------------------------------- */

TEST(upload_list_download_round_trip)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "upload_file", "{\"path\":\"dir/notes.txt\",\"content\":\"h\\u00e9llo\\n\"}");
    CHECK(!s_is_error_result(s_last(&w)));
    CHECK_EQ_INT(s_file(&w, "dir/notes.txt", 0)->len, 7);
    char *b64 = s_b64_lines(s_png, sizeof s_png);
    char args[512];
    b64[strlen(b64) - 1] = '\0';
    snprintf(args, sizeof args, "{\"path\":\"p.png\",\"content\":\"%s\",\"encoding\":\"base64\"}",
             b64);
    for (char *p = args; *p; p++)
        if (*p == '\n')
            *p = ' '; /* white space in base64 is allowed */
    s_call(m, 2, "upload_file", args);
    CHECK(!s_is_error_result(s_last(&w)));
    CHECK_EQ_INT(s_file(&w, "p.png", 0)->len, sizeof s_png);
    s_file_put(&w, "blob.bin", "\x00\x01\xff", 3, NULL, 0);

    s_call(m, 3, "list_files", "{}");
    json_t *sc = json_object_get(s_result(s_last(&w)), "structuredContent");
    json_t *files = json_object_get(sc, "files");
    CHECK_EQ_INT(json_array_size(files), 3);
    CHECK_STR(json_string_value(json_object_get(json_array_get(files, 0), "path")), "blob.bin");
    CHECK_STR(json_string_value(json_object_get(json_array_get(files, 2), "path")), "p.png");
    CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(files, 2), "mtime")),
                 1700000000);
    CHECK(json_is_false(json_object_get(sc, "truncated")));

    s_call(m, 4, "download_file", "{\"path\":\"dir/notes.txt\"}");
    CHECK_STR(json_string_value(json_object_get(s_block(s_last(&w), 0), "type")), "text");
    CHECK_STR(s_block_text(s_last(&w), 0), "h\xc3\xa9llo\n");
    s_call(m, 5, "download_file", "{\"path\":\"p.png\"}");
    json_t *img = s_block(s_last(&w), 0);
    CHECK_STR(json_string_value(json_object_get(img, "type")), "image");
    CHECK_STR(json_string_value(json_object_get(img, "mimeType")), "image/png");
    s_call(m, 6, "download_file", "{\"path\":\"blob.bin\"}");
    json_t *res = json_object_get(s_block(s_last(&w), 0), "resource");
    CHECK_STR(json_string_value(json_object_get(s_block(s_last(&w), 0), "type")), "resource");
    CHECK_STR(json_string_value(json_object_get(res, "uri")), "kennel://t/blob.bin");
    CHECK_STR(json_string_value(json_object_get(res, "blob")), "AAH/");
    CHECK_STR(json_string_value(json_object_get(res, "mimeType")), "application/octet-stream");
    CHECK_EQ_INT(w.bad_lines, 0);
    free(b64);
    s_free(&m, &w);
}

TEST(download_uri_is_percent_encoded)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_file_put(&w, "a b/\xc3\xa9#?.bin", "\x00", 1, NULL, 0);
    s_call(m, 1, "download_file", "{\"path\":\"a b/\\u00e9#?.bin\"}");
    json_t *res = json_object_get(s_block(s_last(&w), 0), "resource");
    CHECK_STR(json_string_value(json_object_get(res, "uri")), "kennel://t/a%20b/%C3%A9%23%3F.bin");
    s_free(&m, &w);
}

TEST(file_errors_are_error_results)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "download_file", "{\"path\":\"missing.txt\"}");
    CHECK(s_is_error_result(s_last(&w)));
    CHECK_STR(s_block_text(s_last(&w), 0), "NoSuchFile: missing.txt");
    s_call(m, 2, "upload_file", "{\"path\":\"x\",\"content\":\"!!\",\"encoding\":\"base64\"}");
    CHECK(s_is_error_result(s_last(&w)));
    CHECK(strstr(s_block_text(s_last(&w), 0), "base64") != NULL);
    w.fail_files = 1;
    s_call(m, 3, "upload_file", "{\"path\":\"../x\",\"content\":\"\"}");
    CHECK(s_is_error_result(s_last(&w)));
    CHECK_STR(s_block_text(s_last(&w), 0), "BadPath: no");
    s_call(m, 4, "list_files", "{}");
    CHECK(s_is_error_result(s_last(&w)));
    CHECK_STR(s_block_text(s_last(&w), 0), "NoSuchSession: gone");
    s_free(&m, &w);
}

TEST(download_past_the_result_bound_is_refused)
{
    world_t w;
    mcp_limits_t lim = {MCP_MAX_REQUEST_DEFAULT, 40};
    mcp_t *m = s_new(&w, &lim);
    s_init(m);
    s_file_put(&w, "p.png", s_png, sizeof s_png, NULL, 0);
    s_call(m, 1, "download_file", "{\"path\":\"p.png\"}");
    CHECK(s_is_error_result(s_last(&w)));
    CHECK(strstr(s_block_text(s_last(&w), 0), "TooLarge: p.png is 56 bytes") != NULL);
    CHECK(strstr(s_block_text(s_last(&w), 0), "kennel get t p.png") != NULL);
    s_file_put(&w, "q.txt", "\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"", 21, NULL, 0);
    s_call(m, 2, "download_file", "{\"path\":\"q.txt\"}"); /* 21 bytes, 42 as JSON */
    CHECK(s_is_error_result(s_last(&w)));
    s_free(&m, &w);
}

TEST(restart_and_its_failure)
{
    world_t w;
    mcp_t *m = s_new(&w, NULL);
    s_init(m);
    s_call(m, 1, "restart", "{}");
    CHECK_EQ_INT(w.restarts, 1);
    CHECK(!s_is_error_result(s_last(&w)));
    CHECK(strstr(s_block_text(s_last(&w), 0), "fresh namespace") != NULL);
    w.fail_restart = 1;
    s_line(m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
              "{\"name\":\"restart\"}}"); /* arguments may be left out */
    CHECK(s_is_error_result(s_last(&w)));
    CHECK_STR(s_block_text(s_last(&w), 0), "session t did not answer the restart");
    s_free(&m, &w);
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    RUN(initialize_answers_the_version_served);
    RUN(initialize_with_another_version_gets_ours);
    RUN(malformed_initialize_without_version);
    RUN(initialize_twice_is_refused);
    RUN(tools_before_initialize_are_refused_but_ping_is_answered);
    RUN(tools_list_has_the_five_tools_and_their_schemas);
    RUN(malformed_json_is_a_parse_error);
    RUN(malformed_not_utf8_is_a_parse_error);
    RUN(malformed_nul_byte_is_a_parse_error);
    RUN(malformed_batch_is_an_invalid_request);
    RUN(malformed_scalar_is_an_invalid_request);
    RUN(malformed_missing_or_wrong_jsonrpc);
    RUN(malformed_null_or_object_id);
    RUN(malformed_method_not_a_string);
    RUN(malformed_params_not_an_object);
    RUN(unknown_method_is_not_found);
    RUN(unknown_notification_and_responses_get_no_answer);
    RUN(empty_lines_crlf_and_split_lines);
    RUN(last_line_without_newline_is_read_at_the_end);
    RUN(oversize_line_is_refused_with_its_id_at_the_end);
    RUN(oversize_line_with_a_string_id_first);
    RUN(oversize_line_without_an_id_says_null);
    RUN(unknown_tool_and_bad_arguments_are_invalid_params);
    RUN(run_python_collects_streams_result_and_structured_content);
    RUN(run_python_error_is_a_result_with_is_error_and_no_colours);
    RUN(run_python_failure_without_an_iopub_error_says_why);
    RUN(run_python_png_is_image_content_in_order);
    RUN(run_python_bad_base64_image_is_not_shown);
    RUN(run_python_output_past_the_bound_is_cut_but_the_error_stays);
    RUN(run_python_cut_never_splits_a_character);
    RUN(run_python_clear_output_forgets_what_came_before);
    RUN(run_python_that_cannot_start_is_an_error_result);
    RUN(run_python_lost_is_an_error_result_with_what_came);
    RUN(calls_wait_in_order_while_pings_are_answered);
    RUN(cancelled_calls_get_no_answer);
    RUN(too_many_waiting_calls_are_refused);
    RUN(upload_list_download_round_trip);
    RUN(download_uri_is_percent_encoded);
    RUN(file_errors_are_error_results);
    RUN(download_past_the_result_bound_is_refused);
    RUN(restart_and_its_failure);
    return harness_done();
}
