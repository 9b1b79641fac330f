/* See thread_start.h. */
#include "thread_start.h"

int rp_thread_start(pthread_t *thread, size_t stack_bytes, void *(*fn)(void *), void *arg)
{
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc != 0)
    return rc;
  rc = pthread_attr_setstacksize(&attr, stack_bytes);
  if (rc == 0)
    rc = pthread_create(thread, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  return rc;
}
