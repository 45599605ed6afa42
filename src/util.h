/*  util: EINTR-safe I/O, fd flags, clocks, hex, random ids. No domain logic. */
#ifndef KENNEL_UTIL_H
#define KENNEL_UTIL_H

#include <stddef.h>
#include <sys/types.h>

/*  kennel's version: kenneld's info, and the kernel_info kenneld answers before any kernel
 *  said hello. kernels/python/kennel_kernel.py's VERSION is the same. */
#define KENNEL_VERSION "0.1"

/*  Write all len bytes, retrying on EINTR and short writes. 0, or -1 with errno. */
int util_write_all(int fd, const void *buf, size_t len);
/*  Set or clear FD_CLOEXEC / O_NONBLOCK. 0, or -1 with errno. */
int util_set_cloexec(int fd, int on);
int util_set_nonblock(int fd, int on);
/*  Monotonic milliseconds (for deadlines and ages; never for dates). */
/*  Seconds (finite, >= 0, at most about 292 million years) as whole milliseconds, rounded
 *  up: a positive time never becomes 0 (which means "none" for limits). */
long long util_seconds_ms(double seconds);
long long util_now_ms(void);
/*  Ask for transparent huge pages under a large buffer not yet written (len of 4 MiB and
 *  more; the page-aligned inside of it): a snapshot of tens of MB written into 4 KiB pages
 *  costs a page fault each, which on this kind of VM made copying 50 MB take ~0.5 s. A hint:
 *  ignored where it cannot be taken. */
void util_hugepage_hint(void *p, size_t len);
/*  Send len bytes (at least one) with nfds descriptors attached (SCM_RIGHTS; at most
 *  UTIL_MAX_SEND_FDS) in one sendmsg, with flags (MSG_NOSIGNAL added), retried on EINTR.
 *  0 once all len bytes went; -1 with errno otherwise (E2BIG: too many fds; a short send
 *  leaves errno as it was). */
#define UTIL_MAX_SEND_FDS 8
int util_send_fds(int sock, const void *data, size_t len, const int fds[], size_t nfds,
                  int flags);
/*  Let a socket hold bytes in flight each way (SO_SNDBUF, SO_RCVBUF; capped by the
 *  system's wmem_max and rmem_max). A hint: failures are ignored. */
void util_socket_buffers(int fd, int bytes);
/*  Milliseconds since the epoch (for what must outlast the process: a stored time of use). */
long long util_wall_ms(void);
/*  The current UTC time as ISO 8601 with microseconds, e.g. 2026-11-22T07:30:00.123456Z.
 *  out must hold UTIL_ISO_LEN bytes. Returns out. */
#define UTIL_ISO_LEN 64
char *util_iso_now(char *out);
/*  The same for wall_ms (ms since the epoch, util_wall_ms), to the millisecond. */
char *util_iso_ms(long long wall_ms, char *out);
/*  Lowercase hex of len bytes into out (2*len+1 bytes). Returns out. */
char *util_hex(char *out, const void *data, size_t len);
/*  A fresh random uuid4 string into out (37 bytes). Returns out. */
char *util_uuid(char *out);
/*  Read a whole small file into a NUL-terminated malloc'd buffer (at most max bytes).
 *  Caller owns the result. NULL with errno on failure (EFBIG when larger than max). */
char *util_read_file(const char *path, size_t max, size_t *len_out);
/*  Append n bytes to the malloc'd text *buf of *len bytes in *cap (a NULL *buf with 0 and 0
 *  to start), growing it by doubling, and keep it NUL-terminated. 0, or -1 when memory is
 *  short (the text is then unchanged). */
int util_append(char **buf, size_t *len, size_t *cap, const void *data, size_t n);
/*  When process pid started, in clock ticks after boot (/proc/PID/stat): with a pid, it names
 *  one process for as long as the system runs. 0, or -1 with errno (ENOENT: no such pid). */
int util_start_time(pid_t pid, unsigned long long *ticks);
/*  The first two fields of /proc/PID/statm (pid 0: this process's), in bytes: its address
 *  space and its resident set. 0, or -1 with errno. Allocates nothing (the zygote calls it
 *  between forks, where a malloc'd page is one more each kernel copies). */
int util_statm(pid_t pid, long long *size_bytes, long long *resident_bytes);

#endif
