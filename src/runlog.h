/*  runlog: run records. One JSON line per cell that ran, appended to
 *  STATE/runs/YYYY-MM-DD.jsonl (UTC): when, which session and cell, the sha256 of the code
 *  (the code itself only with --record-code, secret-like strings redacted), the runtime
 *  digest, the limits, the outcome, the metrics, the output's bytes, the files the cell made
 *  and the error's name. The loop only copies what the record needs; hashing, redacting,
 *  writing and removing days older than --runs-keep happen on the worker, so that a cell's
 *  round trip never waits on the disk. Knows nothing of sessions or sockets. */
#ifndef KENNEL_RUNLOG_H
#define KENNEL_RUNLOG_H

#include <stddef.h>

#include <jansson.h>

#include "worker.h"

#define RUNLOG_MAX_CODE (64u << 10) /* bytes of code a record keeps (--record-code) */

typedef struct runlog runlog_t;

typedef struct {
    const char *dir;        /* STATE/runs, made if missing */
    int record_code;        /* records carry the (redacted) code, not only its hash */
    unsigned keep_days;     /* files of days older than this are removed; at least 1 */
} runlog_cfg_t;

/*  One cell, as the session and the broker know it. Every pointer is borrowed for the call. */
typedef struct {
    const char *session;    /* its id */
    const char *name;       /* its name, or "" */
    long long cell;         /* the session's count of cells that ran, this one included */
    const char *code;       /* the code, or NULL when the request's content was parsed only
                             * shallowly (a large one): then raw_content */
    size_t code_len;
    const void *raw_content; /* the request's content as it came, or NULL */
    size_t raw_len;
    const char *limits_text; /* the session's limits as compact JSON (reslimits_json's), or
                              * NULL for {} */
    const json_t *metadata; /* the execute_reply's metadata: outcome, metrics, files,
                             * runtime_digest */
    const char *ename;      /* the error's name, or NULL */
    size_t output_bytes;    /* what the cell published, as the output cap counts it */
} runlog_cell_t;

/*  A run log writing through worker (borrowed; must outlive it). NULL with errno. */
runlog_t *runlog_new(worker_t *worker, const runlog_cfg_t *cfg);
/*  Free it; records already handed to the worker are written (worker_destroy waits for
 *  them). No-op on NULL. */
void runlog_destroy(runlog_t **self_p);
/*  Queue the record of one cell. 0, or -1 (out of memory, or the worker is stopping): the
 *  record is lost, and kenneld says so in its log. */
int runlog_cell(runlog_t *self, const runlog_cell_t *cell);
/*  text with every secret-like substring (API keys and tokens of the usual shapes, private
 *  key blocks, JWTs, bearer tokens, the value in `password = ...`, `api_key: ...` and the
 *  like) replaced by "[REDACTED]". Caller owns the result; NULL on allocation failure. Not
 *  for two threads at once (its patterns are compiled once, on first use). */
char *runlog_redact(const char *text);

#endif
