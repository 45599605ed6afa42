/*  log: levelled, sanitised lines on stderr. One write(2) per line so lines from kenneld and
 *  from kernels sharing the same stderr do not interleave mid-line. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static const char *s_progname = "kennel";
static log_level_t s_level = LOG_LEVEL_INFO;

void log_init(const char *progname, log_level_t level)
{
    s_progname = progname;
    s_level = level;
}

int log_level_parse(const char *name)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

void log_emit(log_level_t level, const char *func, int with_errno, const char *fmt, ...)
{
    static const char *tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    if (level > s_level)
        return;
    int saved = errno;
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %s %s %s: ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, s_progname, tags[level], func);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof line)
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line - 128)
        n = (int)sizeof line - 128;
    if (with_errno)
        n += snprintf(line + n, sizeof line - (size_t)n, ": %s", strerror(saved));
    line[n++] = '\n';
    (void)util_write_all(STDERR_FILENO, line, (size_t)n);
    errno = saved;
}

char *log_sanitize(char *out, size_t max_out, const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t room = max_out > 4 ? max_out - 4 : 0, i;
    for (i = 0; i < len && i < room; i++)
        out[i] = (p[i] >= 0x20 && p[i] < 0x7f) ? (char)p[i] : '?';
    if (i < len && max_out >= 4) {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = '\0';
    return out;
}

int log_allow(log_limit_t *lim, int burst)
{
    return log_allow_in(lim, burst, 1000);
}

int log_allow_in(log_limit_t *lim, int burst, long long window_ms)
{
    long long now = util_now_ms();
    if (now - lim->window_ms >= window_ms) {
        if (lim->dropped > 0)
            log_emit(LOG_LEVEL_WARN, "log_allow", 0, "%lld similar lines dropped", lim->dropped);
        lim->window_ms = now;
        lim->count = 0;
        lim->dropped = 0;
    }
    if (lim->count < burst) {
        lim->count++;
        return 1;
    }
    lim->dropped++;
    return 0;
}
