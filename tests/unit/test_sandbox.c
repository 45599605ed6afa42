/*  Unit tests of sandbox_seal_keep: which descriptors the seal leaves open. Each check runs in
 *  a child, since a seal drops capabilities and loads the seccomp filter for good. Under
 *  valgrind (make memcheck), which knows no seccomp, the tests are skipped. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "../harness.h"
#include "sandbox.h"

#define TOP 10 /* fds 4..TOP are opened before each seal: one bit each in an exit status */

/*  In a child: open fds 3..TOP, seal keeping keep[0..n), and exit with a bit per fd in
 *  4..TOP still open (0x1: fd 4, …); 0xfc when it closed 0-3, 0xfe when the seal failed
 *  with EINVAL, 0xff otherwise. */
static int s_open_after_seal(const int *keep, size_t n)
{
    pid_t pid = fork();
    if (pid == 0) {
        for (int fd = 3; fd <= TOP; fd++)
            if (dup2(0, fd) < 0)
                _exit(0xfd);
        const char *step = NULL;
        if (sandbox_seal_keep(keep, n, &step) < 0)
            _exit(errno == EINVAL ? 0xfe : 0xff);
        int open_ = 0;
        for (int fd = 4; fd <= TOP; fd++)
            if (fcntl(fd, F_GETFD) >= 0)
                open_ |= 1 << (fd - 4);
        if (fcntl(0, F_GETFD) < 0 || fcntl(3, F_GETFD) < 0)
            _exit(0xfc); /* 0-3 are never the seal's to close */
        _exit(open_);
    }
    return harness_exit_status(pid);
}

TEST(seal_closes_every_fd_above_3)
{
    CHECK_EQ_INT(s_open_after_seal(NULL, 0), 0);
}

TEST(seal_keeps_the_fds_asked_for_in_any_order)
{
    /* 4 (the zygote's kennel-init) and 7 (a learner's pipe); unsorted, a duplicate, and fds
     * below 4 (never closed anyway) ignored. */
    int keep[] = {7, 2, 4, 7};
    CHECK_EQ_INT(s_open_after_seal(keep, 4), (1 << 0) | (1 << 3));
    int gap[] = {9, 5};
    CHECK_EQ_INT(s_open_after_seal(gap, 2), (1 << 1) | (1 << 5));
    int top[] = {TOP};
    CHECK_EQ_INT(s_open_after_seal(top, 1), 1 << (TOP - 4));
    int next[] = {4, 5};
    CHECK_EQ_INT(s_open_after_seal(next, 2), 0x3);
}

TEST(seal_refuses_more_than_it_can_keep)
{
    int many[SANDBOX_MAX_KEEP + 1] = {4, 5, 6, 7, 8};
    CHECK_EQ_INT(s_open_after_seal(many, SANDBOX_MAX_KEEP + 1), 0xfe);
}

int main(void)
{
    if (RUNNING_ON_VALGRIND) {
        printf("test_sandbox: skipped under valgrind (no seccomp there)\n");
        return harness_done();
    }
    RUN(seal_closes_every_fd_above_3);
    RUN(seal_keeps_the_fds_asked_for_in_any_order);
    RUN(seal_refuses_more_than_it_can_keep);
    return harness_done();
}
