/* See thread_start.h. */
#include "thread_start.h"

int rp_thread_start(pthread_t *thread, const char *name, size_t stack_bytes,
                    void *(*fn)(void *), void *arg)
{
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc != 0)
    return rc;
  if (stack_bytes > 0)
    rc = pthread_attr_setstacksize(&attr, stack_bytes);
  if (rc == 0)
    rc = pthread_create(thread, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  if (rc == 0 && name)
    (void)pthread_setname_np(*thread, name); /* only a label: a failure changes nothing */
  return rc;
}
