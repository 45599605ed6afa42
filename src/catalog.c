/*  catalog: hiredis's blocking API with a timeout on every call; the scripts are sent with
 *  EVAL each time (a few hundred bytes; Redis caches them by hash). */
#include "catalog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

struct catalog {
    redisContext *ctx;
    char err[256];
};

/*  A name as the catalog holds them (a session's, a node's): what the manager and --node
 *  allow. Anything else read back from Redis is garbage. */
static int s_name_ok(const char *s, size_t len, size_t max)
{
    if (!s || len == 0 || len > max)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

static void s_fail(catalog_t *self, const char *what)
{
    snprintf(self->err, sizeof self->err, "redis: %s: %s", what,
             self->ctx && self->ctx->err ? self->ctx->errstr : "unexpected reply");
}

catalog_t *catalog_connect(const char *url, int timeout_ms, char *err, size_t err_len)
{
    char host[256];
    int port = 6379;
    const char *p = strncmp(url, "redis://", 8) == 0 ? url + 8 : NULL;
    const char *colon = p ? strrchr(p, ':') : NULL;
    size_t hlen = p ? (colon ? (size_t)(colon - p) : strlen(p)) : 0;
    if (!p || hlen == 0 || hlen >= sizeof host ||
        (colon && (sscanf(colon + 1, "%d", &port) != 1 || port <= 0 || port > 65535))) {
        snprintf(err, err_len, "the cluster must be redis://HOST:PORT, not %s", url);
        return NULL;
    }
    memcpy(host, p, hlen);
    host[hlen] = '\0';
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext *ctx = redisConnectWithTimeout(host, port, tv);
    if (!ctx || ctx->err) {
        snprintf(err, err_len, "cannot reach the cluster's Redis at %s:%d: %s", host, port,
                 ctx ? ctx->errstr : "out of memory");
        if (ctx)
            redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    catalog_t *self = calloc(1, sizeof *self);
    if (!self) {
        redisFree(ctx);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    self->ctx = ctx;
    return self;
}

void catalog_destroy(catalog_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    if ((*self_p)->ctx)
        redisFree((*self_p)->ctx);
    free(*self_p);
    *self_p = NULL;
}

const char *catalog_error(const catalog_t *self)
{
    return self->err;
}

/*  A reply, or NULL with err set (an error reply too: scripts and commands here never fail
 *  on good data, so one means garbage or a Redis that is not one). */
static redisReply *s_check(catalog_t *self, redisReply *r, const char *what)
{
    if (!r) {
        s_fail(self, what);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(self->err, sizeof self->err, "redis: %s: %.200s", what, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

int catalog_heartbeat(catalog_t *self, const char *node, const char *record, long long ttl_ms)
{
    redisAppendCommand(self->ctx, "SET kennel:node:%s %s PX %lld", node, record, ttl_ms);
    redisAppendCommand(self->ctx, "SADD kennel:nodes %s", node);
    for (int i = 0; i < 2; i++) {
        void *r = NULL;
        if (redisGetReply(self->ctx, &r) != REDIS_OK) {
            s_fail(self, "heartbeat");
            return -1;
        }
        if (!s_check(self, r, "heartbeat"))
            return -1;
        freeReplyObject(r);
    }
    return 0;
}

static const char s_nodes_lua[] =
    "local out = {} "
    "for _, n in ipairs(redis.call('SMEMBERS', 'kennel:nodes')) do "
    "  local r = redis.call('GET', 'kennel:node:' .. n) "
    "  if r then out[#out+1] = n; out[#out+1] = r; "
    "    out[#out+1] = redis.call('EXISTS', 'kennel:drain:' .. n) end "
    "end return out";

json_t *catalog_nodes(catalog_t *self, int *bad)
{
    if (bad)
        *bad = 0;
    redisReply *r = s_check(self, redisCommand(self->ctx, "EVAL %s 0", s_nodes_lua), "nodes");
    if (!r)
        return NULL;
    json_t *out = json_array();
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 3 <= r->elements; i += 3) {
        redisReply *n = r->element[i], *rec = r->element[i + 1], *dr = r->element[i + 2];
        json_t *o = n->type == REDIS_REPLY_STRING && rec->type == REDIS_REPLY_STRING &&
                            s_name_ok(n->str, n->len, 63)
                        ? json_loadb(rec->str, rec->len, 0, NULL)
                        : NULL;
        const char *m = json_string_value(json_object_get(o, "manager"));
        const char *nn = json_string_value(json_object_get(o, "node"));
        if (!json_is_object(o) || !m || strncmp(m, "tcp://", 6) != 0 || strlen(m) > 128 || !nn ||
            strlen(nn) != n->len || memcmp(nn, n->str, n->len) != 0) {
            if (bad)
                (*bad)++;
            json_decref(o);
            continue;
        }
        json_object_set_new(o, "draining", json_boolean(dr->type == REDIS_REPLY_INTEGER &&
                                                        dr->integer == 1));
        json_array_append_new(out, o);
    }
    freeReplyObject(r);
    return out;
}

int catalog_drain(catalog_t *self, const char *node, int on)
{
    redisReply *r = s_check(self,
                            on ? redisCommand(self->ctx, "SET kennel:drain:%s 1", node)
                               : redisCommand(self->ctx, "DEL kennel:drain:%s", node),
                            "drain");
    if (!r)
        return -1;
    freeReplyObject(r);
    return 0;
}

/*  A strictly positive integer out of a reply string; 0 when it is none. */
static long long s_gen(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 18)
        return 0;
    char buf[20], *end;
    memcpy(buf, r->str, r->len);
    buf[r->len] = '\0';
    long long v = strtoll(buf, &end, 10);
    return *end || v <= 0 ? 0 : v;
}

/*  Copy a checked name out of a reply (nil or "" gives ""). 0, or -1 when it is garbage. */
static int s_name_out(const redisReply *r, char *out, size_t size)
{
    out[0] = '\0';
    if (!r || r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_STRING && r->len == 0))
        return 0;
    if (r->type != REDIS_REPLY_STRING || !s_name_ok(r->str, r->len, size - 1))
        return -1;
    memcpy(out, r->str, r->len);
    out[r->len] = '\0';
    return 0;
}

int catalog_lookup(catalog_t *self, const char *name, catalog_entry_t *out)
{
    memset(out, 0, sizeof *out);
    redisReply *r = s_check(self, redisCommand(self->ctx, "HMGET kennel:s:%s node gen id", name),
                            "lookup");
    if (!r)
        return -1;
    int rc = -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
        snprintf(self->err, sizeof self->err, "redis: lookup: not an array");
    } else if (r->element[0]->type == REDIS_REPLY_NIL) {
        rc = 0;
    } else if (s_name_out(r->element[0], out->node, sizeof out->node) < 0 || !out->node[0] ||
               !(out->gen = s_gen(r->element[1])) ||
               s_name_out(r->element[2], out->id, sizeof out->id) < 0) {
        snprintf(self->err, sizeof self->err,
                 "the catalog's entry for session %s is malformed (kennel:s:%s)", name, name);
    } else {
        rc = 1;
    }
    freeReplyObject(r);
    return rc;
}

/*  KEYS[1] the session's key; ARGV[1] the node to place it on, ARGV[2] a node not to keep it
 *  on (drain), "" for none. An entry that is not a well-formed hash of a live node's is
 *  replaced: repaired, not trusted. */
static const char s_claim_lua[] =
    "local k = KEYS[1] "
    "local t = redis.call('TYPE', k).ok "
    "local n, g, id = false, nil, '' "
    "if t == 'hash' then "
    "  local e = redis.call('HMGET', k, 'node', 'gen', 'id') "
    "  n, g, id = e[1], tonumber(e[2]), e[3] or '' "
    "  if n and g and n ~= ARGV[2] and redis.call('EXISTS', 'kennel:node:' .. n) == 1 then "
    "    return {0, n, tostring(g), id, '', ''} end "
    "end "
    "local ng = redis.call('INCR', 'kennel:gen') "
    "redis.call('DEL', k) "
    "redis.call('HSET', k, 'node', ARGV[1], 'gen', ng) "
    "if not n or not g then n, id = '', '' end "
    "return {1, ARGV[1], tostring(ng), '', n, id}";

int catalog_claim(catalog_t *self, const char *name, const char *node, const char *avoid,
                  catalog_entry_t *out)
{
    memset(out, 0, sizeof *out);
    redisReply *r = s_check(self,
                            redisCommand(self->ctx, "EVAL %s 1 kennel:s:%s %s %s", s_claim_lua,
                                         name, node, avoid ? avoid : ""),
                            "claim");
    if (!r)
        return -1;
    int rc = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 6 &&
        r->element[0]->type == REDIS_REPLY_INTEGER &&
        s_name_out(r->element[1], out->node, sizeof out->node) == 0 && out->node[0] &&
        (out->gen = s_gen(r->element[2])) > 0 &&
        s_name_out(r->element[3], out->id, sizeof out->id) == 0 &&
        s_name_out(r->element[4], out->prev, sizeof out->prev) == 0 &&
        s_name_out(r->element[5], out->prev_id, sizeof out->prev_id) == 0) {
        out->placed = r->element[0]->integer == 1;
        rc = 0;
    } else {
        snprintf(self->err, sizeof self->err,
                 "the catalog's entry for session %s is malformed (kennel:s:%s)", name, name);
    }
    freeReplyObject(r);
    return rc;
}

static const char s_set_id_lua[] =
    "if redis.call('TYPE', KEYS[1]).ok == 'hash' and "
    "   redis.call('HGET', KEYS[1], 'gen') == ARGV[1] then "
    "  redis.call('HSET', KEYS[1], 'id', ARGV[2]) return 1 end return 0";

int catalog_set_id(catalog_t *self, const char *name, long long gen, const char *id)
{
    redisReply *r = s_check(self,
                            redisCommand(self->ctx, "EVAL %s 1 kennel:s:%s %lld %s", s_set_id_lua,
                                         name, gen, id),
                            "set id");
    if (!r)
        return -1;
    freeReplyObject(r);
    return 0;
}

static const char s_put_back_lua[] =
    "if redis.call('TYPE', KEYS[1]).ok == 'hash' and "
    "   redis.call('HGET', KEYS[1], 'gen') == ARGV[1] then "
    "  redis.call('HSET', KEYS[1], 'node', ARGV[2], 'id', ARGV[3]) return 1 end return 0";

int catalog_put_back(catalog_t *self, const char *name, long long gen, const char *node,
                     const char *id)
{
    redisReply *r = s_check(self,
                            redisCommand(self->ctx, "EVAL %s 1 kennel:s:%s %lld %s %s",
                                         s_put_back_lua, name, gen, node, id),
                            "put back");
    if (!r)
        return -1;
    freeReplyObject(r);
    return 0;
}

static const char s_release_lua[] =
    "if ARGV[1] == '0' or (redis.call('TYPE', KEYS[1]).ok == 'hash' and "
    "   redis.call('HGET', KEYS[1], 'gen') == ARGV[1]) then "
    "  return redis.call('DEL', KEYS[1]) end return 0";

int catalog_release(catalog_t *self, const char *name, long long gen)
{
    redisReply *r = s_check(self,
                            redisCommand(self->ctx, "EVAL %s 1 kennel:s:%s %lld", s_release_lua,
                                         name, gen),
                            "release");
    if (!r)
        return -1;
    freeReplyObject(r);
    return 0;
}

/*  ARGV[1] the node; then name, gen, id for each session it holds. Garbage is written back
 *  as the node's, and so is a missing entry when Redis has lost its data: kennel:up:NODE,
 *  which this script sets, is then missing too. While it is there, a missing entry was
 *  released on purpose (`kennel rm` ends a session, then releases its name, and a heartbeat
 *  can carry a list of sessions taken before the end): the name is returned as stale, never
 *  written back. kennel:gen is kept above every generation a node still holds, so a new
 *  claim never reuses one. */
static const char s_fence_lua[] =
    "local me = ARGV[1] local out = {} "
    "local top = tonumber(redis.call('GET', 'kennel:gen') or '0') or 0 "
    "local known = redis.call('EXISTS', 'kennel:up:' .. me) == 1 "
    "for i = 2, #ARGV - 2, 3 do "
    "  local k = 'kennel:s:' .. ARGV[i] local g = tonumber(ARGV[i+1]) or 0 "
    "  local t = redis.call('TYPE', k).ok "
    "  local e = t == 'hash' and redis.call('HMGET', k, 'node', 'gen') or {false, false} "
    "  if t == 'none' and known then out[#out+1] = ARGV[i] "
    "  elseif t ~= 'hash' or not e[1] or not tonumber(e[2]) then "
    "    if g == 0 then g = redis.call('INCR', 'kennel:gen') top = g end "
    "    redis.call('DEL', k) "
    "    redis.call('HSET', k, 'node', me, 'gen', g, 'id', ARGV[i+2]) "
    "    if g > top then redis.call('SET', 'kennel:gen', g) top = g end "
    "  elseif e[1] ~= me or (g ~= 0 and tonumber(e[2]) ~= g) then out[#out+1] = ARGV[i] end "
    "end redis.call('SET', 'kennel:up:' .. me, '1') return out";

json_t *catalog_fence(catalog_t *self, const char *node, const json_t *held)
{
    size_t n = json_array_size(held);
    size_t argc = 3 + 1 + 3 * n;
    const char **argv = calloc(argc, sizeof *argv);
    char(*gens)[24] = calloc(n + 1, sizeof *gens);
    if (!argv || !gens) {
        free(argv);
        free(gens);
        snprintf(self->err, sizeof self->err, "out of memory");
        return NULL;
    }
    size_t a = 0;
    argv[a++] = "EVAL";
    argv[a++] = s_fence_lua;
    argv[a++] = "0";
    argv[a++] = node;
    for (size_t i = 0; i < n; i++) {
        json_t *h = json_array_get(held, i);
        snprintf(gens[i], sizeof gens[i], "%lld",
                 (long long)json_integer_value(json_object_get(h, "gen")));
        argv[a++] = json_string_value(json_object_get(h, "name")) ?: "";
        argv[a++] = gens[i];
        argv[a++] = json_string_value(json_object_get(h, "id")) ?: "";
    }
    redisReply *r = s_check(self, redisCommandArgv(self->ctx, (int)a, argv, NULL), "fence");
    free(argv);
    free(gens);
    if (!r)
        return NULL;
    json_t *out = json_array();
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING)
            json_array_append_new(out, json_stringn(r->element[i]->str, r->element[i]->len));
    freeReplyObject(r);
    return out;
}

json_t *catalog_sessions(catalog_t *self)
{
    json_t *out = json_object();
    char cursor[32] = "0";
    /* Bounded: a catalog of up to 10^6 sessions at 1000 a step. */
    for (int step = 0; step < 1000; step++) {
        redisReply *r = s_check(self,
                                redisCommand(self->ctx, "SCAN %s MATCH kennel:s:* COUNT 1000",
                                             cursor),
                                "scan");
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len >= sizeof cursor) {
            if (r)
                freeReplyObject(r);
            json_decref(out);
            return NULL;
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len);
        cursor[r->element[0]->len] = '\0';
        redisReply *keys = r->element[1];
        for (size_t i = 0; keys->type == REDIS_REPLY_ARRAY && i < keys->elements; i++) {
            redisReply *k = keys->element[i];
            if (k->type != REDIS_REPLY_STRING || k->len <= 9 || k->len > 9 + 128)
                continue;
            char name[140];
            memcpy(name, k->str + 9, k->len - 9);
            name[k->len - 9] = '\0';
            catalog_entry_t e;
            int found = s_name_ok(name, strlen(name), 128) ? catalog_lookup(self, name, &e) : -1;
            if (found == 1)
                json_object_set_new(out, name,
                                    json_pack("{s:s, s:I, s:s}", "node", e.node, "gen",
                                              (json_int_t)e.gen, "id", e.id));
            else if (found < 0 && self->ctx->err) {
                freeReplyObject(r);
                json_decref(out);
                return NULL;
            }
        }
        freeReplyObject(r);
        if (strcmp(cursor, "0") == 0)
            break;
    }
    self->err[0] = '\0';
    return out;
}
