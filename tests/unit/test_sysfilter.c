/*  Unit tests of sysfilter: the filter compiled on each apply and the one sysfilter_prepare
 *  compiled once (what the zygote's sessions load) deny the same calls, each in a child.
 *  Under valgrind (make memcheck), which knows neither seccomp nor libseccomp's probes of it,
 *  the tests are skipped. */
#include <errno.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

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
        _exit(bad);
    }
    return harness_exit_status(pid);
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
    return harness_done();
}
