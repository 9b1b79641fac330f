/* Starting a helper thread with a stack of a chosen size. A pager locks its memory
 * (mlockall), and every page of a thread's stack then stays resident for the thread's
 * life: helpers that do little get small stacks rather than RLIMIT_STACK's 8 MiB.
 *
 * Errors: pthread's: 0 or the error number, positive (CONTRIBUTING.md names this
 * exception).
 */
#ifndef RAMPART_COMMON_THREAD_START_H
#define RAMPART_COMMON_THREAD_START_H

#include <pthread.h>
#include <stddef.h>

/* pthread_create with a stack of stack_bytes (0: the default), named `name` (at most 15
 * characters: what top -H, ps -L and /proc/PID/task/TID/comm show an operator, and what
 * bench/device's per-thread table groups by). 0, or the error number. */
int rp_thread_start(pthread_t *thread, const char *name, size_t stack_bytes,
                    void *(*fn)(void *), void *arg);

#endif
