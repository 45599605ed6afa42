/*  Unit tests of the tenants file: a good file read whole, each mistake refused naming its
 *  line, callers found by uid and by key (root an operator always), and each quota hit with
 *  its numbers. */
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include "../harness.h"
#include "tenants.h"

#define KEY_A "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"

static int s_refused(const char *text, const char *said)
{
    char err[400] = "";
    tenants_t *t = tenants_parse(text, err, sizeof err);
    int ok = !t && strstr(err, said) != NULL;
    if (!ok)
        fprintf(stderr, "  (said: %s)\n", err);
    tenants_destroy(&t);
    return ok;
}

TEST(a_good_file_is_read_whole)
{
    char err[400] = "";
    tenants_t *t = tenants_parse("# teams\n\ntenant alice uids=1001,1002 sessions=2 memory=2G "
                                 "cpu=1.5 group=12345\n  tenant bob keys=" KEY_A "\n"
                                 "operator uids=4242\n",
                                 err, sizeof err);
    CHECK(t != NULL);
    if (!t) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    CHECK_EQ_INT((int)tenants_size(t), 2);
    const tenant_t *a = tenants_find(t, "alice");
    CHECK(a && a->nuids == 2 && a->uids[1] == 1002 && a->max_sessions == 2 &&
          a->max_memory_bytes == (2ull << 30) && a->max_cpus == 1.5 && a->gid == 12345);
    const tenant_t *b = tenants_find(t, "bob"), *who;
    CHECK(b && b->nkeys == 1 && b->max_sessions == -1 && !b->max_memory_bytes);
    CHECK(tenants_by_uid(t, 1002, &who) == TENANTS_TENANT && who == a);
    CHECK(tenants_by_uid(t, 4242, &who) == TENANTS_OPERATOR);
    CHECK(tenants_by_uid(t, 0, &who) == TENANTS_OPERATOR);
    CHECK(tenants_by_uid(t, 7777, &who) == TENANTS_UNKNOWN && !who);
    unsigned char key[32];
    CHECK(zmq_z85_decode(key, KEY_A) != NULL);
    CHECK(tenants_by_key(t, key, &who) == TENANTS_TENANT && who == b);
    key[0] ^= 1;
    CHECK(tenants_by_key(t, key, &who) == TENANTS_UNKNOWN);
    CHECK(tenants_of_name(t, "alice.work") == a);
    CHECK(tenants_of_name(t, "alicework") == NULL && tenants_of_name(t, "al.work") == NULL);
    tenants_destroy(&t);
}

TEST(each_mistake_is_refused_with_its_line)
{
    CHECK(s_refused("tenant alice uids=1001\nfoo bar\n", "line 2"));
    CHECK(s_refused("tenant al.ce uids=1001\n", "name"));
    CHECK(s_refused("tenant -alice uids=1001\n", "starting with a letter or a digit"));
    CHECK(s_refused("tenant alice\n", "neither uids= nor keys="));
    CHECK(s_refused("tenant alice uids=no-such-user-here\n", "no such user"));
    CHECK(s_refused("tenant alice uids=0\n", "operator, never a tenant"));
    CHECK(s_refused("tenant alice keys=short\n", "not a CURVE public key"));
    CHECK(s_refused("tenant alice uids=1001 sessions=x\n", "sessions must be"));
    CHECK(s_refused("tenant alice uids=1001 memory=lots\n", "memory must be"));
    CHECK(s_refused("tenant alice uids=1001 cpu=-1\n", "cpu must be"));
    CHECK(s_refused("tenant alice uids=1001 colour=red\n", "unknown key colour="));
    CHECK(s_refused("tenant alice uids=1001\ntenant alice uids=1002\n", "listed twice"));
    CHECK(s_refused("tenant alice uids=1001\ntenant bob uids=1001\n", "uid 1001 is listed twice"));
    CHECK(s_refused("tenant alice uids=1001\noperator uids=1001\n", "listed twice"));
    CHECK(s_refused("tenant alice uids=1001 group=0\n", "root's"));
    CHECK(s_refused("operator uids=1\noperator uids=2\n", "second operator"));
}

TEST(each_quota_is_named_with_its_numbers)
{
    char err[400], why[300];
    tenants_t *t = tenants_parse("tenant alice uids=1001 sessions=2 memory=1G cpu=1 group=9\n", err,
                                 sizeof err);
    CHECK(t != NULL);
    if (!t)
        return;
    const tenant_t *a = tenants_find(t, "alice");
    tenants_usage_t used = {1, 512ull << 20, 0.5}, one = {1, 256ull << 20, 0.25};
    CHECK(tenants_check(a, &used, &one, why, sizeof why) == 0);
    used.sessions = 2;
    CHECK(tenants_check(a, &used, &one, why, sizeof why) < 0 && strstr(why, "sessions quota is 2"));
    used.sessions = 1;
    one.memory_bytes = 768ull << 20;
    CHECK(tenants_check(a, &used, &one, why, sizeof why) < 0 &&
          strstr(why, "memory quota is 1024 MiB") && strstr(why, "asks for 768 MiB"));
    one.memory_bytes = 256ull << 20;
    one.cpus = 0.75;
    CHECK(tenants_check(a, &used, &one, why, sizeof why) < 0 && strstr(why, "cpu quota is 1 CPUs"));
    tenants_usage_t tenths = {0, 0, 0.3}, tenth = {1, 0, 0.1};
    tenths.cpus = 0.1 + 0.2 + 0.3 + 0.2; /* 0.8 with rounding */
    tenth.cpus = 0.2;
    CHECK(tenants_check(a, &tenths, &tenth, why, sizeof why) == 0);
    tenants_destroy(&t);
}

int main(void)
{
    RUN(a_good_file_is_read_whole);
    RUN(each_mistake_is_refused_with_its_line);
    RUN(each_quota_is_named_with_its_numbers);
    return harness_done();
}
