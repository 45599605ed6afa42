/*  route: built from protocol/messages.def so the catalogue is typed once. A linear scan over
 *  two dozen entries with a first-byte check beats hashing at this size. */
#include "route.h"

#include <stddef.h>
#include <string.h>

static const route_t s_routes[] = {
#define MSG(type, channels, reply, handler) {#type, (channels), (reply), (handler)},
#include "../protocol/messages.def"
#undef MSG
};

const route_t *route_lookup(const char *msg_type)
{
    for (size_t i = 0; i < sizeof s_routes / sizeof s_routes[0]; i++)
        if (s_routes[i].msg_type[0] == msg_type[0] && strcmp(s_routes[i].msg_type, msg_type) == 0)
            return &s_routes[i];
    return NULL;
}

const route_t *route_on(const char *msg_type, unsigned channel)
{
    const route_t *r = route_lookup(msg_type);
    return (r && (r->channels & channel)) ? r : NULL;
}

const char *route_channel_name(unsigned channel)
{
    switch (channel) {
    case ROUTE_SHELL: return "shell";
    case ROUTE_CONTROL: return "control";
    case ROUTE_STDIN: return "stdin";
    case ROUTE_IOPUB: return "iopub";
    case ROUTE_KSTDIN: return "stdin";
    case ROUTE_MANAGER: return "manager";
    default: return "?";
    }
}
