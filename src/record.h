/*  record: a session's record on disk, STATE/sessions/<id>/meta.json: what a later kenneld
 *  needs to bring the session back as it was (its id, name, uid slot, limits, launcher and
 *  history). Written whole (statedir's temporary file, then rename); read back as far as it
 *  goes: a member missing or of the wrong type reads as absent, and the reader decides what
 *  that means. Values in, values out: it knows no session. */
#ifndef KENNEL_RECORD_H
#define KENNEL_RECORD_H

#include <sys/types.h>

#include <jansson.h>

#include "reslimits.h"

typedef struct {
    const char *id;               /* NULL: absent */
    const char *name;             /* NULL: absent */
    const char *tenant;           /* its tenant (kenneld --tenants); NULL or "": none */
    int launched;                 /* made by a kernelspec launcher: lives as long as it */
    long long slot;               /* its uid slot (launch.h); -1: absent */
    int has_limits;               /* read: limits were there (as an object) */
    reslimits_t limits;
    pid_t launcher_pid;           /* the launcher's pid; 0: none (not written) */
    unsigned long long launcher_start; /* its start time, clock ticks after boot */
    const char *launcher_boot;    /* the boot's id it ran in; NULL: absent */
    json_t *history;              /* what session_history gave (borrowed); NULL: none */
    json_t *json;                 /* record_read: the file's JSON, which the strings and
                                   * history point into (record_clear frees it) */
} record_t;

/*  Write r as dir's meta.json (0600, whole or not at all). 0, or -1 with errno. */
int record_write(const char *dir, const record_t *r);
/*  Read dir's meta.json into r: as far as it goes (0), or every member absent when the file
 *  is missing, unreadable or not JSON (-1). Free with record_clear. */
int record_read(const char *dir, record_t *r);
/*  Free what record_read kept; r's pointers are then invalid. */
void record_clear(record_t *r);
/*  Remove dir's meta.json (a session that must not come back), if it is there. 0, or -1 with
 *  errno. */
int record_remove(const char *dir);

#endif
