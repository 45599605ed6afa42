/*  worker: a job queue, one thread, and an eventfd the loop watches for finished jobs. */
#include "worker.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"

typedef struct job {
    worker_run_fn *run;
    worker_done_fn *done;
    void *arg;
    struct job *next;
} job_t;

/*  A FIFO of jobs. */
typedef struct {
    job_t *head, *tail;
} queue_t;

struct worker {
    loop_t *loop;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* the thread: a job was queued, or stop */
    queue_t todo;      /* waiting for the thread */
    queue_t done;      /* run; their done callbacks wait for the loop */
    int stopping;      /* the thread exits once todo is empty */
    int efd;           /* counts finished jobs: readable while done has any */
};

static void s_push(queue_t *q, job_t *j)
{
    j->next = NULL;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
}

static job_t *s_pop(queue_t *q)
{
    job_t *j = q->head;
    if (j) {
        q->head = j->next;
        if (!q->head)
            q->tail = NULL;
    }
    return j;
}

static void *s_thread(void *arg)
{
    worker_t *self = arg;
    pthread_mutex_lock(&self->lock);
    for (;;) {
        job_t *j = s_pop(&self->todo);
        if (!j) {
            if (self->stopping)
                break;
            pthread_cond_wait(&self->wake, &self->lock);
            continue;
        }
        pthread_mutex_unlock(&self->lock);
        j->run(j->arg);
        pthread_mutex_lock(&self->lock);
        s_push(&self->done, j);
        uint64_t one = 1;
        /* Cannot fail short of 2^64 - 1 unread jobs. */
        if (write(self->efd, &one, sizeof one) < 0)
            PLOG_E("worker: eventfd");
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

/*  Call the done callbacks of finished jobs, oldest first: as many as the eventfd counted
 *  (all: every one), so that callbacks whose new jobs finish meanwhile cannot hold the turn. */
static void s_finish(worker_t *self, int all)
{
    uint64_t n = 0;
    if (read(self->efd, &n, sizeof n) < 0 && errno != EAGAIN)
        PLOG_E("worker: eventfd");
    for (uint64_t i = 0; all || i < n; i++) {
        pthread_mutex_lock(&self->lock);
        job_t *j = s_pop(&self->done);
        pthread_mutex_unlock(&self->lock);
        if (!j)
            break;
        j->done(j->arg);
        free(j);
    }
}

static int s_on_event(loop_t *loop, int fd, int revents, void *arg)
{
    (void)loop;
    (void)fd;
    (void)revents;
    s_finish(arg, 0);
    return 0;
}

worker_t *worker_new(loop_t *loop)
{
    worker_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    self->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->efd < 0) {
        free(self);
        return NULL;
    }
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    /* Signals are kenneld's signalfd's: the thread is born with all of them blocked. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&self->thread, NULL, s_thread, self);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0 || loop_fd(loop, self->efd, LOOP_IN, s_on_event, self) < 0) {
        int saved = rc ? rc : errno;
        if (rc == 0) {
            pthread_mutex_lock(&self->lock);
            self->stopping = 1;
            pthread_cond_signal(&self->wake);
            pthread_mutex_unlock(&self->lock);
            pthread_join(self->thread, NULL);
        }
        close(self->efd);
        pthread_cond_destroy(&self->wake);
        pthread_mutex_destroy(&self->lock);
        free(self);
        errno = saved;
        return NULL;
    }
    return self;
}

int worker_submit(worker_t *self, worker_run_fn *run, worker_done_fn *done, void *arg)
{
    job_t *j = malloc(sizeof *j);
    if (!j)
        return -1;
    j->run = run;
    j->done = done;
    j->arg = arg;
    pthread_mutex_lock(&self->lock);
    int stopping = self->stopping;
    if (!stopping) {
        s_push(&self->todo, j);
        pthread_cond_signal(&self->wake);
    }
    pthread_mutex_unlock(&self->lock);
    if (stopping) {
        free(j);
        errno = ECANCELED;
        return -1;
    }
    return 0;
}

void worker_destroy(worker_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    worker_t *self = *self_p;
    pthread_mutex_lock(&self->lock);
    self->stopping = 1;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    pthread_join(self->thread, NULL);
    s_finish(self, 1);
    loop_fd_end(self->loop, self->efd);
    close(self->efd);
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}
