/*  Unit tests of runlog: secret-like strings redacted and ordinary code left alone; a record
 *  written through a real worker as one JSON line with the code's sha256 (and the code only
 *  when asked); a large request's code found in its raw content; old days removed. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "../harness.h"
#include "loop.h"
#include "runlog.h"
#include "util.h"
#include "worker.h"

static char s_root[] = "/tmp/kennel-test-runlog-XXXXXX";

static void s_check_redacted(const char *in, const char *want)
{
    char *out = runlog_redact(in);
    CHECK_STR(out, want);
    free(out);
}

TEST(secrets_are_redacted)
{
    s_check_redacted("key = 'sk-ant-api03-abcdefghijklmnopqrstuv'", "key = '[REDACTED]'");
    s_check_redacted("os.environ['AWS'] = 'AKIAIOSFODNN7EXAMPLE'", "os.environ['AWS'] = '[REDACTED]'");
    s_check_redacted("t = 'ghp_abcdefghijklmnopqrstuvwxyz0123456789'", "t = '[REDACTED]'");
    s_check_redacted("password = \"hunter22\"\nprint(1)", "password = \"[REDACTED]\"\nprint(1)");
    s_check_redacted("{\"api_key\": \"abcd1234\", \"n\": 1}", "{\"api_key\": \"[REDACTED]\", \"n\": 1}");
    s_check_redacted("DB_PASSWORD=s3cr3t python x.py", "DB_PASSWORD=[REDACTED] python x.py");
    s_check_redacted("h = {'Authorization': 'Bearer abcdefghijklmnop'}",
                     "h = {'Authorization': 'Bearer [REDACTED]'}");
    s_check_redacted("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----!",
                     "[REDACTED]!");
    s_check_redacted("jwt = eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.SflKxwRJSMeKKF2QT4fw",
                     "jwt = [REDACTED]");
    /* Two on one line, each replaced. */
    s_check_redacted("a='sk-aaaaaaaaaaaaaaaaaaaa' b='sk-bbbbbbbbbbbbbbbbbbbb'",
                     "a='[REDACTED]' b='[REDACTED]'");
}

TEST(ordinary_code_is_left_alone)
{
    const char *plain[] = {
        "tokens = nltk.tokenize.wordpunct_tokenize(text)",
        "password_length = 12",
        "df = pd.read_csv('sales.csv'); df.groupby('region').sum()",
        "secret = get_secret()",
        "import sklearn\nprint(sklearn.__version__)",
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        s_check_redacted(plain[i], plain[i]);
}

/*  The lines of dir/name, parsed; NULL if it cannot be read. */
static json_t *s_lines(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = util_read_file(path, 1 << 20, NULL);
    if (!text)
        return NULL;
    json_t *out = json_array();
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save))
        json_array_append_new(out, json_loads(line, 0, NULL));
    free(text);
    return out;
}

/*  Today's file name, UTC. */
static void s_today(char out[32])
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%d.jsonl", &tm);
}

TEST(a_record_is_one_json_line_written_on_the_worker)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/runs", s_root);
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    runlog_cfg_t cfg = {dir, 1, 7};
    runlog_t *r = runlog_new(w, &cfg);
    CHECK(r != NULL);
    /* An old day, and a file that is not a day's: the first record removes only the first. */
    char old[300], other[300];
    snprintf(old, sizeof old, "%s/2001-01-01.jsonl", dir);
    snprintf(other, sizeof other, "%s/notes.txt", dir);
    close(open(old, O_CREAT | O_WRONLY, 0600));
    close(open(other, O_CREAT | O_WRONLY, 0600));
    json_t *md = json_pack("{s:s, s:s, s:{s:i}, s:[{s:s, s:i}]}", "outcome", "error",
                           "runtime_digest", "sha256:ab", "metrics", "wall_ms", 5, "files",
                           "name", "out.csv", "size", 3);
    const char *limits = "{\"memory\":1024}";
    const char *code = "key = 'sk-abcdefghijklmnopqrstuvwx'\n1/0";
    runlog_cell_t c = {"sid", "work", 3, code, strlen(code), NULL, 0, limits, md,
                       "ZeroDivisionError", 120};
    CHECK_EQ_INT(runlog_cell(r, &c), 0);
    /* A large request's content, parsed only shallowly by kenneld: the code is found in it. */
    const char *raw = "{\"code\": \"print(2)\", \"silent\": false}";
    runlog_cell_t big = {"sid", "work", 4, NULL, 0, raw, strlen(raw), limits, md, NULL, 0};
    CHECK_EQ_INT(runlog_cell(r, &big), 0);
    worker_destroy(&w); /* waits for the jobs */
    runlog_destroy(&r);
    char today[32];
    s_today(today);
    json_t *lines = s_lines(dir, today);
    CHECK(lines && json_array_size(lines) == 2);
    json_t *rec = json_array_get(lines, 0);
    unsigned char hash[crypto_hash_sha256_BYTES];
    char hex[2 * crypto_hash_sha256_BYTES + 1];
    crypto_hash_sha256(hash, (const unsigned char *)code, strlen(code));
    sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
    CHECK_STR(json_string_value(json_object_get(rec, "code_sha256")), hex);
    CHECK_STR(json_string_value(json_object_get(rec, "code")), "key = '[REDACTED]'\n1/0");
    CHECK_STR(json_string_value(json_object_get(rec, "session")), "sid");
    CHECK_STR(json_string_value(json_object_get(rec, "name")), "work");
    CHECK_EQ_INT(json_integer_value(json_object_get(rec, "cell")), 3);
    CHECK_STR(json_string_value(json_object_get(rec, "outcome")), "error");
    CHECK_STR(json_string_value(json_object_get(rec, "error")), "ZeroDivisionError");
    CHECK_STR(json_string_value(json_object_get(rec, "runtime_digest")), "sha256:ab");
    CHECK_EQ_INT(json_integer_value(json_object_get(rec, "output_bytes")), 120);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(rec, "limits"), "memory")), 1024);
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(rec, "artifacts"), 0),
                                                "name")), "out.csv");
    json_t *second = json_array_get(lines, 1);
    crypto_hash_sha256(hash, (const unsigned char *)"print(2)", 8);
    sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
    CHECK_STR(json_string_value(json_object_get(second, "code_sha256")), hex);
    CHECK(json_is_null(json_object_get(second, "error")));
    json_decref(lines);
    CHECK(access(old, F_OK) < 0);
    CHECK(access(other, F_OK) == 0);
    json_decref(md);
    loop_destroy(&loop);
}

TEST(without_record_code_only_the_hash)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/runs2", s_root);
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    runlog_cfg_t cfg = {dir, 0, 1};
    runlog_t *r = runlog_new(w, &cfg);
    json_t *md = json_pack("{s:s}", "outcome", "ok");
    runlog_cell_t c = {"sid", "", 1, "1+1", 3, NULL, 0, NULL, md, NULL, 0};
    CHECK_EQ_INT(runlog_cell(r, &c), 0);
    worker_destroy(&w);
    runlog_destroy(&r);
    char today[32];
    s_today(today);
    json_t *lines = s_lines(dir, today);
    CHECK(lines && json_array_size(lines) == 1);
    json_t *rec = json_array_get(lines, 0);
    CHECK(json_object_get(rec, "code") == NULL);
    CHECK(json_is_string(json_object_get(rec, "code_sha256")));
    CHECK(json_is_null(json_object_get(rec, "runtime_digest")));
    json_decref(lines);
    json_decref(md);
    loop_destroy(&loop);
}

TEST(bad_config_is_refused)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    runlog_cfg_t zero_days = {s_root, 0, 0};
    CHECK(runlog_new(w, &zero_days) == NULL);
    CHECK(runlog_new(NULL, &(runlog_cfg_t){s_root, 0, 1}) == NULL);
    worker_destroy(&w);
    loop_destroy(&loop);
}

int main(void)
{
    if (sodium_init() < 0 || !mkdtemp(s_root))
        return 1;
    RUN(secrets_are_redacted);
    RUN(ordinary_code_is_left_alone);
    RUN(a_record_is_one_json_line_written_on_the_worker);
    RUN(without_record_code_only_the_hash);
    RUN(bad_config_is_refused);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_root);
    if (system(cmd) != 0)
        return 1;
    return harness_done();
}
