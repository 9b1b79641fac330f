/* A ring of log lines and the thread that writes them (deferred_log.h). */
#include "deferred_log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LOG_SLOTS 32
#define LOG_LINE 512
/* Small: under mlockall a thread's whole stack is locked as it is mapped. */
#define WRITER_STACK (64 * 1024)

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  char lines[LOG_SLOTS][LOG_LINE];
  unsigned head, tail; /* head: next slot to fill; tail: next to write */
  unsigned dropped;
  bool running, stopping;
  pthread_t writer;
  const char *prefix;
} ring = { .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER };

static void write_line(const char *line)
{
  size_t n = strlen(line);
  ssize_t ignored = write(STDERR_FILENO, line, n);
  (void)ignored;
}

static void *writer_main(void *arg)
{
  (void)arg;
  char line[LOG_LINE + 64];
  pthread_mutex_lock(&ring.lock);
  for (;;) {
    while (ring.tail == ring.head && !ring.stopping)
      pthread_cond_wait(&ring.wake, &ring.lock);
    if (ring.tail == ring.head)
      break;
    unsigned dropped = ring.dropped;
    ring.dropped = 0;
    memcpy(line, ring.lines[ring.tail % LOG_SLOTS], LOG_LINE);
    ring.tail++;
    pthread_mutex_unlock(&ring.lock);
    if (dropped) {
      char note[96];
      snprintf(note, sizeof note, "%s: (%u lines dropped: the log fell behind)\n",
               ring.prefix, dropped);
      write_line(note);
    }
    write_line(line);
    pthread_mutex_lock(&ring.lock);
  }
  pthread_mutex_unlock(&ring.lock);
  return NULL;
}

int deferred_log_start(const char *prefix)
{
  ring.prefix = prefix;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, WRITER_STACK);
  int r = pthread_create(&ring.writer, &attr, writer_main, NULL);
  pthread_attr_destroy(&attr);
  ring.running = r == 0;
  return r == 0 ? 0 : -1;
}

void deferred_log(const char *fmt, ...)
{
  char line[LOG_LINE];
  int n = snprintf(line, sizeof line, "%s: ", ring.prefix ? ring.prefix : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  strcat(line, "\n");
  if (!ring.running) {
    write_line(line);
    return;
  }
  pthread_mutex_lock(&ring.lock);
  if (ring.head - ring.tail < LOG_SLOTS) {
    memcpy(ring.lines[ring.head % LOG_SLOTS], line, sizeof line);
    ring.head++;
  } else {
    ring.dropped++;
  }
  pthread_cond_signal(&ring.wake);
  pthread_mutex_unlock(&ring.lock);
}

void deferred_log_stop(void)
{
  if (!ring.running)
    return;
  pthread_mutex_lock(&ring.lock);
  ring.stopping = true;
  pthread_cond_signal(&ring.wake);
  pthread_mutex_unlock(&ring.lock);
  pthread_join(ring.writer, NULL);
  ring.running = false;
}
