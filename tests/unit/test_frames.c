/*  Unit tests of frames: parts copied and moved (a large moved part's bytes are the ones
 *  libzmq sends: no copy), the fixed room, copies that share bytes, sends over a real libzmq
 *  socket pair (inproc) and a send that fails. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <czmq.h>

#include "../harness.h"
#include "frames.h"

TEST(parts_are_copied_and_counted)
{
    frames_t *f = frames_new(3);
    char small[] = "abc";
    CHECK_EQ_INT(frames_addmem(f, small, 3), 0);
    small[0] = 'x'; /* a copy: not seen */
    CHECK_EQ_INT(frames_addmem(f, "", 0), 0);
    char big[5000];
    memset(big, 'b', sizeof big);
    CHECK_EQ_INT(frames_addmem(f, big, sizeof big), 0);
    CHECK_EQ_INT(frames_addmem(f, "d", 1), -1); /* no room: the cap is fixed */
    CHECK_EQ_INT(frames_count(f), 3);
    CHECK_EQ_INT(frames_bytes(f), 5003);
    CHECK(memcmp(zmq_msg_data(frames_part(f, 0)), "abc", 3) == 0);
    CHECK_EQ_INT(zmq_msg_size(frames_part(f, 1)), 0);
    CHECK(zmq_msg_data(frames_part(f, 2)) != big);
    zmsg_t *z = frames_zmsg(f);
    CHECK(z && zmsg_size(z) == 3 && zmsg_content_size(z) == 5003);
    CHECK(zframe_streq(zmsg_first(z), "abc"));
    zmsg_destroy(&z);
    frames_destroy(&f);
    CHECK(f == NULL);
    frames_destroy(&f); /* no-op */
}

TEST(a_large_frame_moves_and_a_small_one_is_copied)
{
    frames_t *f = frames_new(2);
    zframe_t *large = zframe_new(NULL, 4096), *small = zframe_new("tiny", 4);
    memset(zframe_data(large), 'L', 4096);
    const void *large_bytes = zframe_data(large);
    CHECK_EQ_INT(frames_add_frame(f, &large), 0);
    CHECK_EQ_INT(frames_add_frame(f, &small), 0);
    CHECK(large == NULL && small == NULL);
    CHECK(zmq_msg_data(frames_part(f, 0)) == large_bytes);
    CHECK(memcmp(zmq_msg_data(frames_part(f, 1)), "tiny", 4) == 0);
    zframe_t *more = zframe_new("x", 1);
    CHECK_EQ_INT(frames_add_frame(f, &more), -1); /* no room: taken and freed all the same */
    CHECK(more == NULL);
    CHECK_EQ_INT(frames_bytes(f), 4100);
    frames_destroy(&f); /* frees the moved frame (valgrind: make memcheck) */
}

TEST(sent_parts_arrive_in_order_and_copies_share_bytes)
{
    zsock_t *a = zsock_new_pair("@inproc://frames-test");
    zsock_t *b = zsock_new_pair(">inproc://frames-test");
    CHECK(a && b);
    frames_t *f = frames_new(3);
    zframe_t *large = zframe_new(NULL, 2048);
    memset(zframe_data(large), 'q', 2048);
    CHECK(frames_addmem(f, "one", 3) == 0 && frames_add_frame(f, &large) == 0 &&
          frames_addmem(f, "three", 5) == 0);
    frames_t *copy = frames_dup(f);
    CHECK(copy && frames_count(copy) == 3 && frames_bytes(copy) == 2056);
    CHECK(zmq_msg_data(frames_part(copy, 1)) == zmq_msg_data(frames_part(f, 1)));
    CHECK_EQ_INT(frames_send(&f, a, 1), 0);
    CHECK(f == NULL);
    CHECK_EQ_INT(frames_send(&copy, zsock_resolve(a), 0), 0); /* a libzmq handle as well */
    for (int round = 0; round < 2; round++) {
        zmsg_t *got = zmsg_recv(b);
        CHECK(got && zmsg_size(got) == 3);
        if (!got)
            break;
        CHECK(zframe_streq(zmsg_first(got), "one"));
        zframe_t *mid = zmsg_next(got);
        CHECK(zframe_size(mid) == 2048 && ((char *)zframe_data(mid))[2047] == 'q');
        CHECK(zframe_streq(zmsg_next(got), "three"));
        zmsg_destroy(&got);
    }
    zsock_destroy(&b);
    zsock_destroy(&a);
}

/*  A send that fails (a PAIR with no peer, not waiting) takes the message all the same and
 *  says why. */
TEST(a_failed_send_frees_the_message_and_sets_errno)
{
    zsock_t *a = zsock_new_pair("@inproc://frames-alone");
    frames_t *f = frames_new(2);
    CHECK(frames_addmem(f, "a", 1) == 0 && frames_addmem(f, "b", 1) == 0);
    errno = 0;
    CHECK_EQ_INT(frames_send(&f, a, 1), -1);
    CHECK(f == NULL && errno == EAGAIN);
    CHECK_EQ_INT(frames_send(&f, a, 1), -1); /* nothing to send */
    zsock_destroy(&a);
}

int main(void)
{
    RUN(parts_are_copied_and_counted);
    RUN(a_large_frame_moves_and_a_small_one_is_copied);
    RUN(sent_parts_arrive_in_order_and_copies_share_bytes);
    RUN(a_failed_send_frees_the_message_and_sets_errno);
    return harness_done();
}
