/*  runlog: run records, written on the worker (see runlog.h). */
#include "runlog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <regex.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "jtext.h"
#include "log.h"
#include "util.h"

#define DAY_S 86400

struct runlog {
    worker_t *worker;
    char dir[PATH_MAX];
    int record_code;
    unsigned keep_days;
    long long pruned_day; /* the UTC day (days since the epoch) files were last pruned on */
};

/*  One record on its way to the disk. Owned by the job: nothing in it is shared with the
 *  loop, so the worker may touch it. */
typedef struct {
    jtext_t text; /* the record as the loop wrote it, without its code's members and "}" */
    char *code; /* the code, or NULL */
    size_t code_len;
    char *raw; /* or the request's content, to find the code in */
    size_t raw_len;
    int record_code;
    long long wall_ms;
    unsigned keep_days;
    int prune;  /* the first record of a new day: remove the days past keep_days */
    int failed; /* errno of the write, or 0 */
    char dir[PATH_MAX]; /* (last: a new job zeroes what is before it, not these 4 KiB) */
} runjob_t;

/*  The patterns of secret-like strings. `group` is the part replaced (0: the whole match);
 *  icase: matched without regard to case. */
static const struct {
    const char *re;
    int group;
    int icase;
} s_patterns[] = {
    {"-----BEGIN [A-Z ]*PRIVATE KEY-----[^-]*-----END [A-Z ]*PRIVATE KEY-----", 0, 0},
    {"sk-[A-Za-z0-9_-]{16,}", 0, 0},                        /* OpenAI, Anthropic */
    {"(AKIA|ASIA)[0-9A-Z]{16}", 0, 0},                      /* AWS access key ids */
    {"gh[pousr]_[A-Za-z0-9]{30,}", 0, 0},                   /* GitHub tokens */
    {"github_pat_[A-Za-z0-9_]{30,}", 0, 0},
    {"xox[abprs]-[A-Za-z0-9-]{10,}", 0, 0},                 /* Slack */
    {"AIza[0-9A-Za-z_-]{35}", 0, 0},                        /* Google API keys */
    {"eyJ[A-Za-z0-9_-]{8,}\\.[A-Za-z0-9_-]{8,}\\.[A-Za-z0-9_-]{8,}", 0, 0}, /* JWTs */
    {"bearer[[:space:]]+([A-Za-z0-9._~+/=-]{12,})", 1, 1},
    /* A string literal given to a secret-like name: password = "...", "api_key": '...'.
     * Only literals: `tokens = tokenize(text)` is code, not a secret. */
    {"(pass(word|wd)?|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
     "credentials?)[A-Za-z0-9_]*[\"']?[[:space:]]*[:=][[:space:]]*[\"']([^\"']{4,})[\"']",
     3, 1},
    /* An environment-style assignment: SECRET_TOKEN=abc123, export API_KEY=... */
    {"[A-Z0-9_]*(PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|ACCESS_KEY|PRIVATE_KEY)[A-Z0-9_]*="
     "([^\"'[:space:]]{4,})",
     2, 0},
};
#define NPATTERNS (sizeof s_patterns / sizeof s_patterns[0])
static regex_t s_compiled[NPATTERNS];
static int s_compiled_ok = -1; /* -1: not yet; 0: failed; 1: ready */

static int s_compile(void)
{
    if (s_compiled_ok >= 0)
        return s_compiled_ok;
    s_compiled_ok = 1;
    for (size_t i = 0; i < NPATTERNS; i++)
        if (regcomp(&s_compiled[i], s_patterns[i].re,
                    REG_EXTENDED | (s_patterns[i].icase ? REG_ICASE : 0)) != 0) {
            LOG_E("runlog: pattern %zu does not compile", i);
            s_compiled_ok = 0;
        }
    return s_compiled_ok;
}

/*  text with pattern i's matches (its group) replaced. Caller owns; NULL on ENOMEM. */
static char *s_redact_one(const char *text, size_t i)
{
    static const char mark[] = "[REDACTED]";
    size_t len = strlen(text), cap = len + 1, used = 0;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    const char *at = text;
    regmatch_t m[8];
    int eflags = 0;
    while (*at && regexec(&s_compiled[i], at, 8, m, eflags) == 0) {
        int g = s_patterns[i].group;
        if (m[g].rm_so < 0 || m[0].rm_eo == 0) {
            break;
        }
        size_t keep = (size_t)m[g].rm_so, cut = (size_t)(m[g].rm_eo - m[g].rm_so);
        size_t need = used + keep + sizeof mark + (len - (size_t)(at - text));
        if (need > cap) {
            char *grown = realloc(out, need);
            if (!grown) {
                free(out);
                return NULL;
            }
            out = grown;
            cap = need;
        }
        memcpy(out + used, at, keep);
        used += keep;
        memcpy(out + used, mark, sizeof mark - 1);
        used += sizeof mark - 1;
        /* Past the whole match, so that what followed the value in it is kept. */
        size_t tail = (size_t)m[0].rm_eo - (keep + cut);
        memcpy(out + used, at + keep + cut, tail);
        used += tail;
        at += m[0].rm_eo;
        eflags = REG_NOTBOL;
    }
    size_t rest = strlen(at);
    if (used + rest + 1 > cap) {
        char *grown = realloc(out, used + rest + 1);
        if (!grown) {
            free(out);
            return NULL;
        }
        out = grown;
    }
    memcpy(out + used, at, rest + 1);
    return out;
}

char *runlog_redact(const char *text)
{
    if (!s_compile())
        return strdup("[REDACTED: the redaction patterns did not compile]");
    char *cur = strdup(text);
    for (size_t i = 0; cur && i < NPATTERNS; i++) {
        char *next = s_redact_one(cur, i);
        free(cur);
        cur = next;
    }
    return cur;
}

runlog_t *runlog_new(worker_t *worker, const runlog_cfg_t *cfg)
{
    if (!worker || !cfg->dir || cfg->keep_days < 1 || strlen(cfg->dir) >= PATH_MAX - 32) {
        errno = EINVAL;
        return NULL;
    }
    if (mkdir(cfg->dir, 0700) < 0 && errno != EEXIST)
        return NULL;
    runlog_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->worker = worker;
    snprintf(self->dir, sizeof self->dir, "%s", cfg->dir);
    self->record_code = cfg->record_code;
    self->keep_days = cfg->keep_days;
    self->pruned_day = -1;
    return self;
}

void runlog_destroy(runlog_t **self_p)
{
    if (!*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
}

/*  "YYYY-MM-DD" of a UTC day (days since the epoch). */
static void s_day_name(long long day, char out[16])
{
    time_t t = (time_t)(day * DAY_S);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 16, "%Y-%m-%d", &tm);
}

/*  Remove the files of days before the keep window ("YYYY-MM-DD.jsonl" only). */
static void s_prune(const runjob_t *j)
{
    char oldest[16];
    s_day_name(j->wall_ms / 1000 / DAY_S - (long long)j->keep_days + 1, oldest);
    DIR *d = opendir(j->dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n != 16 || strcmp(e->d_name + 10, ".jsonl") != 0 || strncmp(e->d_name, oldest, 10) >= 0)
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) < 0)
            PLOG_W("runlog: unlink %s/%s", j->dir, e->d_name);
    }
    closedir(d);
}

/*  The code of the job: its copy, or the "code" of its raw content (parsed here, off the
 *  loop). Borrowed from the job or from *holder (caller decrefs). */
static const char *s_code(runjob_t *j, json_t **holder, size_t *len)
{
    *holder = NULL;
    if (j->code) {
        *len = j->code_len;
        return j->code;
    }
    if (!j->raw)
        return NULL;
    *holder = json_loadb(j->raw, j->raw_len, JSON_ALLOW_NUL, NULL);
    json_t *code = json_object_get(*holder, "code");
    if (!json_is_string(code))
        return NULL;
    *len = json_string_length(code);
    return json_string_value(code);
}

static void s_run(void *arg)
{
    runjob_t *j = arg;
    json_t *holder;
    size_t len = 0;
    const char *code = s_code(j, &holder, &len);
    jtext_t *t = &j->text;
    jtext_lit(t, ",\"code_sha256\":");
    if (code) {
        unsigned char hash[crypto_hash_sha256_BYTES];
        char hex[2 * crypto_hash_sha256_BYTES + 1];
        crypto_hash_sha256(hash, (const unsigned char *)code, len);
        sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
        jtext_cstr(t, hex);
        if (j->record_code) {
            /* Cut at RUNLOG_MAX_CODE (on a character's start), NUL bytes cut it too. */
            size_t keep = len < RUNLOG_MAX_CODE ? len : RUNLOG_MAX_CODE;
            while (keep < len && keep > 0 && ((unsigned char)code[keep] & 0xC0) == 0x80)
                keep--;
            char *cut = strndup(code, keep);
            char *clean = cut ? runlog_redact(cut) : NULL;
            jtext_lit(t, ",\"code\":");
            jtext_cstr(t, clean);
            if (keep < len)
                jtext_lit(t, ",\"code_truncated\":true");
            free(cut);
            free(clean);
        }
    } else {
        jtext_lit(t, "null");
    }
    json_decref(holder);
    jtext_lit(t, "}\n");
    size_t n = t->len;
    char *line = jtext_take(t);
    char day[16], path[PATH_MAX + 32];
    s_day_name(j->wall_ms / 1000 / DAY_S, day);
    snprintf(path, sizeof path, "%s/%s.jsonl", j->dir, day);
    int fd = line ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : -1;
    if (fd < 0) {
        j->failed = line ? errno : ENOMEM;
    } else {
        /* One write of the line and its newline: O_APPEND keeps lines whole. */
        if (util_write_all(fd, line, n) < 0)
            j->failed = errno;
        close(fd);
    }
    free(line);
    if (j->prune)
        s_prune(j);
}

static void s_done(void *arg)
{
    runjob_t *j = arg;
    if (j->failed)
        LOG_W("runlog: a run record was not written to %s: %s", j->dir, strerror(j->failed));
    jtext_free(&j->text);
    free(j->code);
    free(j->raw);
    free(j);
}

/*  A record's member from the reply's metadata: key (its text, with the comma and colon
 *  before and after it), then v when it is of the kind the record keeps (ok), else
 *  fallback. */
static void s_member(jtext_t *t, const char *key, const json_t *v, int ok, const char *fallback)
{
    jtext_lit(t, key);
    if (ok)
        jtext_json(t, v);
    else
        jtext_lit(t, fallback);
}

int runlog_cell(runlog_t *self, const runlog_cell_t *c)
{
    /* (not calloc: the path buffer alone is 4 KiB of zeros a cell) */
    runjob_t *j = malloc(sizeof *j);
    if (!j)
        return -1;
    memset(j, 0, offsetof(runjob_t, dir));
    size_t dir_len = strlen(self->dir); /* (runlog_new checked it fits) */
    memcpy(j->dir, self->dir, dir_len + 1);
    j->wall_ms = util_wall_ms();
    j->record_code = self->record_code;
    j->keep_days = self->keep_days;
    long long day = j->wall_ms / 1000 / DAY_S;
    j->prune = day != self->pruned_day;
    char when[UTIL_ISO_LEN];
    util_iso_ms(j->wall_ms, when);
    const json_t *md = c->metadata;
    const json_t *digest = json_object_get(md, "runtime_digest");
    const json_t *files = json_object_get(md, "files");
    const json_t *deleted = json_object_get(md, "files_deleted");
    const json_t *metrics = json_object_get(md, "metrics");
    const json_t *outcome = json_object_get(md, "outcome");
    /* Written here as text (jtext), in the order the record always had; the worker adds the
     * code's members. What it holds is its own: nothing of the loop's reaches the worker. */
    jtext_t *t = &j->text;
    t->digits = 15; /* a cell's 0.711 ms reads 0.711, not 0.71099999999999985 */
    jtext_lit(t, "{\"time\":");
    jtext_cstr(t, when);
    jtext_lit(t, ",\"session\":");
    jtext_cstr(t, c->session);
    jtext_lit(t, ",\"name\":");
    jtext_cstr(t, c->name ? c->name : "");
    jtext_lit(t, ",\"cell\":");
    jtext_int(t, c->cell);
    s_member(t, ",\"runtime_digest\":", digest, json_is_string(digest), "null");
    jtext_lit(t, ",\"limits\":");
    jtext_lit(t, c->limits_text ? c->limits_text : "{}");
    s_member(t, ",\"outcome\":", outcome, json_is_string(outcome), "null");
    s_member(t, ",\"metrics\":", metrics, json_is_object(metrics), "{}");
    jtext_lit(t, ",\"output_bytes\":");
    jtext_int(t, (long long)c->output_bytes);
    s_member(t, ",\"artifacts\":", files, json_is_array(files), "[]");
    s_member(t, ",\"artifacts_deleted\":", deleted, json_is_array(deleted), "[]");
    jtext_lit(t, ",\"error\":");
    jtext_cstr(t, c->ename);
    if (c->code) {
        j->code = malloc(c->code_len + 1);
        if (j->code) {
            memcpy(j->code, c->code, c->code_len);
            j->code[c->code_len] = '\0';
            j->code_len = c->code_len;
        }
    } else if (c->raw_content) {
        j->raw = malloc(c->raw_len);
        if (j->raw) {
            memcpy(j->raw, c->raw_content, c->raw_len);
            j->raw_len = c->raw_len;
        }
    }
    int prune = j->prune; /* j is the worker's once submitted */
    if (j->text.failed || ((c->code && !j->code) || (!c->code && c->raw_content && !j->raw)) ||
        worker_submit(self->worker, s_run, s_done, j) < 0) {
        LOG_W("runlog: session=%s: the record of cell %lld is lost (out of memory or stopping)",
              c->session, c->cell);
        s_done(j);
        return -1;
    }
    if (prune)
        self->pruned_day = day;
    return 0;
}
