/*  log: levelled lines on stderr. Each line carries the level, the function and, when the
 *  caller knows one, `session=<id>`. Peer data passed through log_sanitize() is truncated and
 *  has non-printables replaced. This module never logs message content or keys by itself. */
#ifndef KENNEL_LOG_H
#define KENNEL_LOG_H

#include <stddef.h>

typedef enum { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG } log_level_t;

/*  Set the lowest level printed and the program name shown on each line. */
void log_init(const char *progname, log_level_t level);
/*  Parse "error", "warn", "info" or "debug". Returns the level, or -1 if unknown. */
int log_level_parse(const char *name);
/*  Emit one line. with_errno appends ": strerror(errno)". Keeps errno intact. */
void log_emit(log_level_t level, const char *func, int with_errno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/*  Copy at most max_out-1 bytes of untrusted data into out, replacing anything that is not
 *  printable ASCII with '?', and "..." when truncated. Returns out. */
char *log_sanitize(char *out, size_t max_out, const void *data, size_t len);
/*  Rate limit for warnings peers can trigger: returns 1 when a line may be logged now
 *  (at most `burst` per second per limiter), 0 to drop it. */
typedef struct { long long window_ms; int count; long long dropped; } log_limit_t;
int log_allow(log_limit_t *lim, int burst);
/*  The same, at most `burst` per window_ms. */
int log_allow_in(log_limit_t *lim, int burst, long long window_ms);

#define LOG_E(...) log_emit(LOG_LEVEL_ERROR, __func__, 0, __VA_ARGS__)
#define LOG_W(...) log_emit(LOG_LEVEL_WARN, __func__, 0, __VA_ARGS__)
#define LOG_I(...) log_emit(LOG_LEVEL_INFO, __func__, 0, __VA_ARGS__)
#define LOG_D(...) log_emit(LOG_LEVEL_DEBUG, __func__, 0, __VA_ARGS__)
#define PLOG_E(...) log_emit(LOG_LEVEL_ERROR, __func__, 1, __VA_ARGS__)
#define PLOG_W(...) log_emit(LOG_LEVEL_WARN, __func__, 1, __VA_ARGS__)

#endif
