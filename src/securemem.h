/*  securemem: where libzmq keeps a CURVE connection's keys. Debian's libzmq asks libsodium's
 *  guarded heap for them (sodium_allocarray / sodium_free: six small blocks per handshake, each
 *  freed once used),
 *  and each of those is its own mmap, mprotect of guard pages, mlock and madvise, undone by
 *  munmap at the end. In a process with threads each mprotect and munmap flushes every CPU's TLB,
 *  and on this VM kind that made up ~0.4 ms of kenneld's side of a CURVE handshake and most
 *  of its CPU under a flood of connects (bench/chandshake.c; docs/design.md).
 *
 *  This module defines both functions in the program that links it, so the dynamic linker
 *  gives them to libzmq in place of libsodium's: blocks up to SECUREMEM_SLOT bytes come from
 *  slabs that are mlocked and left out of core dumps (as libsodium's are), and are zeroed
 *  when freed; larger ones, and any block libsodium's own sodium_malloc made, go to
 *  libsodium. A slot freed twice, or a pointer into the middle of one, aborts (libsodium's
 *  canary check would). What is lost is libsodium's guard pages around each block: a
 *  libzmq overflow of one key would not fault. kenneld's long-term keys were never in the
 *  guarded heap. */
#ifndef KENNEL_SECUREMEM_H
#define KENNEL_SECUREMEM_H

#include <stddef.h>

#define SECUREMEM_SLOT 256 /* libzmq 4.3's blocks are 67-227 bytes, more with a peer's
                            * metadata (those go to libsodium) */

/*  Link this module into the program (the archive's member is otherwise never pulled in:
 *  only libzmq refers to the functions it defines). Call once, early; no-op after. */
void securemem_use(void);

/*  For tests: slots handed out now, slots handed out ever, and slab bytes mapped in all. */
size_t securemem_slots_used(void);
size_t securemem_slots_given(void);
size_t securemem_bytes_mapped(void);

/*  libsodium's API (sodium/utils.h), defined here for libzmq. */
void *sodium_allocarray(size_t count, size_t size);
void sodium_free(void *ptr);

#endif
