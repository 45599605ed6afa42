/*  route: the message catalogue (protocol/messages.def) as a lookup table: where a msg_type
 *  may travel, what reply it gets and who answers it. Pure data, no I/O. */
#ifndef KENNEL_ROUTE_H
#define KENNEL_ROUTE_H

/*  Channels, as bits. SHELL, CONTROL and STDIN are client-to-kennel; IOPUB and KSTDIN are
 *  kernel-to-client; MANAGER is the manager socket. */
#define ROUTE_SHELL 0x01
#define ROUTE_CONTROL 0x02
#define ROUTE_STDIN 0x04
#define ROUTE_IOPUB 0x08
#define ROUTE_KSTDIN 0x10
#define ROUTE_MANAGER 0x20

typedef enum { ROUTE_BY_BROKER, ROUTE_BY_KERNEL, ROUTE_BY_NONE } route_handler_t;

typedef struct {
    const char *msg_type;
    unsigned channels;         /* ROUTE_* bits */
    const char *reply_type;    /* NULL when it gets no reply */
    route_handler_t handler;
} route_t;

/*  The catalogue entry for msg_type, or NULL when unknown. */
const route_t *route_lookup(const char *msg_type);
/*  The entry for msg_type if it may travel on `channel` (one ROUTE_* bit), else NULL. */
const route_t *route_on(const char *msg_type, unsigned channel);
/*  "shell", "control", "stdin", "iopub", … for one ROUTE_* bit. */
const char *route_channel_name(unsigned channel);

#endif
