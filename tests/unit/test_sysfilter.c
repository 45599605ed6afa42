/*  Unit tests of sysfilter: the filter compiled on each apply and the one sysfilter_prepare
 *  compiled once (what the zygote's sessions load) deny the same calls, each in a child.
 *  Under valgrind (make memcheck), which knows neither seccomp nor libseccomp's probes of it,
 *  the tests are skipped. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../harness.h"
#include "sysfilter.h"

/*  In a child: load the filter, then one bit per expectation that failed (0: all held). */
static int s_denials(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || sysfilter_apply() < 0)
            _exit(0x80);
        int bad = 0;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (!(fd < 0 && errno == EAFNOSUPPORT))
            bad |= 1;
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0)
            bad |= 2;
        if (!(unshare(CLONE_NEWUSER) < 0 && errno == EPERM))
            bad |= 4;
        if (!(syscall(SYS_clone3, NULL, 0) < 0 && errno == ENOSYS))
            bad |= 8;
        if (!(ioctl(0, TIOCSTI, "x") < 0 && errno == EPERM))
            bad |= 16;
        if (getpid() <= 0)
            bad |= 32; /* what is not denied still works */
#ifdef __x86_64__
        char ldt[16];
        if (!(syscall(154 /* modify_ldt */, 0, ldt, sizeof ldt) < 0 && errno == EPERM))
            bad |= 64;
        if (!(syscall(447 /* memfd_secret */, 0) < 0 && errno == EPERM))
            bad |= 128;
#endif
        _exit(bad);
    }
    return harness_exit_status(pid);
}

/*  Dirty: in /proc/meminfo, in bytes (-1 if unknown). */
static long long s_dirty(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    long long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Dirty: %lld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib < 0 ? -1 : kib << 10;
}

/*  Under the filter, sync() and syncfs() succeed and flush nothing: dirty pages of a file
 *  just written stay dirty (writeback starts on its own only after 30 s, or past 10% of
 *  memory). Without the filter the same calls would leave none. */
TEST(sync_is_a_no_op)
{
    enum { SIZE = 64 << 20 };
    char path[] = "/var/tmp/kennel-test-sync-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    unlink(path);
    pid_t pid = fork();
    if (pid == 0) {
        static char block[1 << 20];
        memset(block, 'x', sizeof block);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || sysfilter_apply() < 0)
            _exit(1);
        for (int i = 0; i < SIZE / (int)sizeof block; i++)
            if (write(fd, block, sizeof block) != (ssize_t)sizeof block)
                _exit(2);
        if (syscall(SYS_sync) != 0 || syscall(SYS_syncfs, fd) != 0)
            _exit(3);
        _exit(s_dirty() >= SIZE / 2 ? 0 : 4);
    }
    CHECK_EQ_INT(harness_exit_status(pid), 0);
    close(fd);
}

TEST(compiled_on_each_apply)
{
    CHECK_EQ_INT(s_denials(), 0);
}

TEST(prepared_once_denies_the_same)
{
    CHECK_EQ_INT(sysfilter_prepare(), 0);
    CHECK_EQ_INT(sysfilter_prepare(), 0); /* again: a no-op */
    CHECK_EQ_INT(s_denials(), 0);
}

int main(void)
{
    if (RUNNING_ON_VALGRIND) {
        printf("test_sysfilter: skipped under valgrind (no seccomp there)\n");
        return harness_done();
    }
    RUN(compiled_on_each_apply);
    RUN(prepared_once_denies_the_same);
    RUN(sync_is_a_no_op);
    return harness_done();
}
