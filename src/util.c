/*  util: small system helpers shared by every layer. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <uuid/uuid.h>

int util_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int s_set_flag(int fd, int get, int set, int flag, int on)
{
    int flags = fcntl(fd, get);
    if (flags < 0)
        return -1;
    flags = on ? (flags | flag) : (flags & ~flag);
    return fcntl(fd, set, flags);
}

int util_set_cloexec(int fd, int on)
{
    return s_set_flag(fd, F_GETFD, F_SETFD, FD_CLOEXEC, on);
}

int util_set_nonblock(int fd, int on)
{
    return s_set_flag(fd, F_GETFL, F_SETFL, O_NONBLOCK, on);
}

static long long s_clock_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long util_now_ms(void)
{
    return s_clock_ms(CLOCK_MONOTONIC);
}

long long util_wall_ms(void)
{
    return s_clock_ms(CLOCK_REALTIME);
}

/*  "YYYY-MM-DDTHH:MM:SS" of sec at out (no NUL); its length. Formatted once a second (per
 *  thread): every message kenneld makes has a date, and every cell a run record. */
static size_t s_iso_second(time_t sec, char *out)
{
    static __thread time_t cached_sec = -1;
    static __thread char cached[32];
    static __thread size_t cached_len;
    if (sec != cached_sec) {
        struct tm tm;
        gmtime_r(&sec, &tm);
        cached_len = strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
        cached_sec = sec;
    }
    memcpy(out, cached, cached_len);
    return cached_len;
}

/*  out + at: "." and the n digits of frac (zero-padded), "Z", NUL. */
static char *s_iso_fraction(char *out, size_t at, long frac, int n)
{
    char *p = out + at;
    *p++ = '.';
    for (int i = n - 1; i >= 0; i--, frac /= 10)
        p[i] = (char)('0' + frac % 10);
    p[n] = 'Z';
    p[n + 1] = '\0';
    return out;
}

char *util_iso_now(char *out)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return s_iso_fraction(out, s_iso_second(ts.tv_sec, out), ts.tv_nsec / 1000, 6);
}

char *util_iso_ms(long long wall_ms, char *out)
{
    return s_iso_fraction(out, s_iso_second((time_t)(wall_ms / 1000), out),
                          (long)(wall_ms % 1000), 3);
}

char *util_hex(char *out, const void *data, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * len] = '\0';
    return out;
}

char *util_uuid(char *out)
{
    uuid_t u;
    uuid_generate_random(u);
    uuid_unparse_lower(u, out);
    return out;
}

char *util_read_file(const char *path, size_t max, size_t *len_out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *buf = malloc(max + 1);
    size_t len = 0;
    if (!buf)
        goto fail;
    for (;;) {
        if (len == max) {
            char extra;
            ssize_t more = read(fd, &extra, 1);
            if (more > 0) {
                errno = EFBIG;
                goto fail;
            }
            if (more < 0 && errno == EINTR)
                continue;
            if (more < 0)
                goto fail;
            break;
        }
        ssize_t n = read(fd, buf + len, max - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto fail;
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    if (len_out)
        *len_out = len;
    return buf;
fail:;
    int saved = errno;
    free(buf);
    close(fd);
    errno = saved;
    return NULL;
}

/*  Field 22 of /proc/PID/stat, after the command name (which may hold spaces and
 *  parentheses, hence the last ')'). */
/*  A small /proc file (one read) into buf, NUL-terminated: 0, or -1 with errno (EIO: empty).
 *  Allocates nothing (util_statm's callers). */
static int s_read_proc(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    int saved = errno;
    close(fd);
    if (n <= 0) {
        errno = n < 0 ? saved : EIO;
        return -1;
    }
    buf[n] = '\0';
    return 0;
}

int util_start_time(pid_t pid, unsigned long long *ticks)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (s_read_proc(path, buf, sizeof buf) < 0)
        return -1;
    char *p = strrchr(buf, ')');
    /* Each turn finds the space before field `field`: state (3) is the first after ")". */
    for (int field = 3; p && field <= 22; field++)
        p = strchr(p + 1, ' ');
    if (!p || sscanf(p + 1, "%llu", ticks) != 1) {
        errno = EPROTO;
        return -1;
    }
    return 0;
}

int util_statm(pid_t pid, long long *size_bytes, long long *resident_bytes)
{
    char path[64], buf[128];
    if (pid)
        snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/statm");
    if (s_read_proc(path, buf, sizeof buf) < 0)
        return -1;
    long long size, resident;
    if (sscanf(buf, "%lld %lld", &size, &resident) != 2) {
        errno = EPROTO;
        return -1;
    }
    long long page = sysconf(_SC_PAGESIZE);
    *size_bytes = size * page;
    *resident_bytes = resident * page;
    return 0;
}

long long util_seconds_ms(double seconds)
{
    double ms = seconds * 1000;
    long long whole = (long long)ms;
    return whole < ms ? whole + 1 : whole;
}

int util_append(char **buf, size_t *len, size_t *cap, const void *data, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t grown_cap = *cap ? *cap : 256;
        while (grown_cap < *len + n + 1)
            grown_cap *= 2;
        char *grown = realloc(*buf, grown_cap);
        if (!grown)
            return -1;
        *buf = grown;
        *cap = grown_cap;
    }
    if (n)
        memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

void util_hugepage_hint(void *p, size_t len)
{
    const uintptr_t huge = 2u << 20;
    if (!p || len < (4u << 20))
        return;
    uintptr_t start = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    uintptr_t end = ((uintptr_t)p + len) & ~(huge - 1);
    if (end > start)
        (void)madvise((void *)start, end - start, MADV_HUGEPAGE);
}

int util_send_fds(int sock, const void *data, size_t len, const int fds[], size_t nfds,
                  int flags)
{
    if (nfds > UTIL_MAX_SEND_FDS) {
        errno = E2BIG;
        return -1;
    }
    union {
        char buf[CMSG_SPACE(sizeof(int) * UTIL_MAX_SEND_FDS)];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {(void *)data, len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        msg.msg_control = ctl.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    ssize_t n;
    do
        n = sendmsg(sock, &msg, flags | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)len ? 0 : -1;
}

void util_socket_buffers(int fd, int bytes)
{
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}
