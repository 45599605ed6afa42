/*  Unit tests of walls: sentences kept in order, the list NULL-terminated, extras dropped. */
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "walls.h"

TEST(sentences_in_order_and_terminated)
{
    walls_t w = {0};
    CHECK(walls_list(&w)[0] == NULL);
    walls_add(&w, "first %d", 1);
    walls_add(&w, "second");
    CHECK_STR(walls_list(&w)[0], "first 1");
    CHECK_STR(walls_list(&w)[1], "second");
    CHECK(walls_list(&w)[2] == NULL);
}

TEST(no_more_than_the_maximum)
{
    walls_t w = {0};
    for (int i = 0; i < WALLS_MAX + 3; i++)
        walls_add(&w, "wall %d", i);
    CHECK_EQ_INT(w.n, WALLS_MAX);
    CHECK(walls_list(&w)[WALLS_MAX] == NULL);
}

TEST(what_is_lost_depends_on_who_runs_it)
{
    walls_t w = {0};
    walls_add_identity(&w);
    walls_add_cgroups(&w, 3, "cgroups: memory (v1) pids (v1) cpu (v1)");
    if (geteuid() == 0) {
        CHECK_EQ_INT(w.n, 0);
    } else {
        CHECK(w.n >= 1 && strstr(walls_list(&w)[0], "a host uid per session") != NULL);
    }
    size_t before = w.n;
    walls_add_cgroups(&w, 1, "cgroups: memory (v1)");
    CHECK_EQ_INT(w.n, before + 1);
    CHECK(strstr(walls_list(&w)[before], "cgroups: memory (v1)") != NULL);
}

int main(void)
{
    RUN(sentences_in_order_and_terminated);
    RUN(no_more_than_the_maximum);
    RUN(what_is_lost_depends_on_who_runs_it);
    return harness_done();
}
