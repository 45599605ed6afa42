/*  securemem: slabs of fixed slots for libzmq's CURVE keys; see securemem.h for why.
 *  A slab is mapped once and kept: the memory in use is bounded by the connections kenneld
 *  has in handshake at once (each takes six slots, and gives them back as it ends), and a
 *  slot freed is reused at once. */
#include "securemem.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <sys/mman.h>

#include <sodium.h>

#define SLAB_BYTES (64u << 10)
#define SLOTS_PER_SLAB (SLAB_BYTES / SECUREMEM_SLOT)
#define MAX_SLABS 256 /* 16 MiB, 65,536 slots; past it, libsodium's own heap */

typedef void *(allocarray_fn)(size_t, size_t);
typedef void(free_fn)(void *);

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *s_slabs[MAX_SLABS];
static unsigned char s_in_use[MAX_SLABS][SLOTS_PER_SLAB / 8]; /* a bit per slot handed out */
static size_t s_nslabs;
static void *s_free_list; /* a free slot's first bytes point at the next free slot */
static size_t s_used, s_given;
static allocarray_fn *s_real_alloc;
static free_fn *s_real_free;
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

static void s_resolve(void)
{
    s_real_alloc = (allocarray_fn *)dlsym(RTLD_NEXT, "sodium_allocarray");
    s_real_free = (free_fn *)dlsym(RTLD_NEXT, "sodium_free");
}

void securemem_use(void)
{
    pthread_once(&s_once, s_resolve);
}

/*  A new slab's slots onto the free list; with s_lock held. 0, or -1 (out of slabs or
 *  memory). */
static int s_grow(void)
{
    if (s_nslabs == MAX_SLABS)
        return -1;
    unsigned char *slab = mmap(NULL, SLAB_BYTES, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (slab == MAP_FAILED)
        return -1;
    /* As libsodium does for its blocks, and as it does, best effort: kept out of swap and
     * out of core dumps. */
    (void)mlock(slab, SLAB_BYTES);
    (void)madvise(slab, SLAB_BYTES, MADV_DONTDUMP);
    for (size_t i = SLOTS_PER_SLAB; i-- > 0;) {
        void *slot = slab + i * SECUREMEM_SLOT;
        memcpy(slot, &s_free_list, sizeof s_free_list);
        s_free_list = slot;
    }
    s_slabs[s_nslabs++] = slab;
    return 0;
}

/*  The slot ptr is, as slab * SLOTS_PER_SLAB + index; -1 when no slab holds it. A pointer
 *  inside a slab that is not a slot's start is a caller's bug: abort, as libsodium's canary
 *  check does, rather than corrupt the free list. */
static long s_slot_of(const void *ptr)
{
    const unsigned char *p = ptr;
    for (size_t i = 0; i < s_nslabs; i++)
        if (p >= s_slabs[i] && p < s_slabs[i] + SLAB_BYTES) {
            size_t off = (size_t)(p - s_slabs[i]);
            if (off % SECUREMEM_SLOT)
                abort();
            return (long)(i * SLOTS_PER_SLAB + off / SECUREMEM_SLOT);
        }
    return -1;
}

static void s_mark(long slot, int used)
{
    unsigned char *byte = &s_in_use[slot / SLOTS_PER_SLAB][(slot % SLOTS_PER_SLAB) / 8];
    unsigned char bit = (unsigned char)(1u << (slot % 8));
    if (!!(*byte & bit) == used)
        abort(); /* handed out twice, or freed twice */
    *byte = used ? (unsigned char)(*byte | bit) : (unsigned char)(*byte & ~bit);
}

void *sodium_allocarray(size_t count, size_t size)
{
    securemem_use();
    if (size && count > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    size_t bytes = count * size;
    if (bytes <= SECUREMEM_SLOT) {
        pthread_mutex_lock(&s_lock);
        void *slot = NULL;
        if (s_free_list || s_grow() == 0) {
            slot = s_free_list;
            memcpy(&s_free_list, slot, sizeof s_free_list);
            memset(slot, 0, sizeof s_free_list);
            s_mark(s_slot_of(slot), 1);
            s_used++;
            s_given++;
        }
        pthread_mutex_unlock(&s_lock);
        if (slot)
            return slot;
    }
    if (!s_real_alloc) {
        errno = ENOMEM;
        return NULL;
    }
    return s_real_alloc(count, size);
}

void sodium_free(void *ptr)
{
    if (!ptr)
        return;
    securemem_use();
    pthread_mutex_lock(&s_lock);
    long slot = s_slot_of(ptr);
    int ours = slot >= 0;
    if (ours) {
        s_mark(slot, 0);
        sodium_memzero(ptr, SECUREMEM_SLOT);
        memcpy(ptr, &s_free_list, sizeof s_free_list);
        s_free_list = ptr;
        s_used--;
    }
    pthread_mutex_unlock(&s_lock);
    if (!ours && s_real_free)
        s_real_free(ptr);
}

size_t securemem_slots_used(void)
{
    pthread_mutex_lock(&s_lock);
    size_t n = s_used;
    pthread_mutex_unlock(&s_lock);
    return n;
}

size_t securemem_slots_given(void)
{
    pthread_mutex_lock(&s_lock);
    size_t n = s_given;
    pthread_mutex_unlock(&s_lock);
    return n;
}

size_t securemem_bytes_mapped(void)
{
    pthread_mutex_lock(&s_lock);
    size_t n = s_nslabs * (size_t)SLAB_BYTES;
    pthread_mutex_unlock(&s_lock);
    return n;
}
