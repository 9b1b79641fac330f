/* The stats-file and metrics-file writer threads (see stats_file.h). */
#include "stats_file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fd_io.h"
#include "file_create.h"
#include "log.h"
#include "thread_start.h"

/* Small, as every thread of a process under mlockall has its whole stack locked. */
#define WRITER_STACK_BYTES (128u * 1024u)

struct stats_file {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  bool stop;    /* under lock */
  bool pending; /* under lock: handed holds a new report */
  size_t handed_len;
  char *handed;  /* under lock; STATS_FILE_MAX_REPORT bytes */
  char *writing; /* the writer's own copy, with room to append */
  size_t writing_cap;
  bool process_memory; /* append the process's memory line */
  bool failed;         /* the last write failed (logged once) */
  char what[32];
  char path[4096];
  char tmp[4100];
};

/* Appends what the kernel says this process holds (VmRSS, VmLck, VmHWM from
 * /proc/self/status) to the report: the measured side of the "client memory" line,
 * which is computed. Read here, off the loop, with plain system calls. */
static size_t append_process_memory(struct stats_file *sf, size_t len)
{
  char status[4096];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return len;
  ssize_t n = read(fd, status, sizeof status - 1);
  close(fd);
  if (n <= 0)
    return len;
  status[n] = '\0';
  unsigned long long kib[3] = { 0, 0, 0 };
  static const char *const keys[3] = { "VmRSS:", "VmLck:", "VmHWM:" };
  for (int k = 0; k < 3; k++) {
    const char *at = strstr(status, keys[k]);
    if (at)
      kib[k] = strtoull(at + strlen(keys[k]), NULL, 10);
  }
  size_t room = sf->writing_cap - len;
  int w = snprintf(sf->writing + len, room,
                   "process         resident %.1f MiB, locked "
                   "%.1f MiB, peak resident %.1f MiB (the process the engine runs in)\n",
                   kib[0] / 1024.0, kib[1] / 1024.0, kib[2] / 1024.0);
  return w > 0 && (size_t)w < room ? len + (size_t)w : len;
}

static void write_report(struct stats_file *sf, size_t len)
{
  if (sf->process_memory)
    len = append_process_memory(sf, len);
  int fd = rp_file_create(sf->tmp, 0644);
  bool ok = fd >= 0 && rp_write_full(fd, sf->writing, len) == 0;
  int saved = errno;
  if (fd >= 0 && close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (ok && rename(sf->tmp, sf->path) != 0) {
    ok = false;
    saved = errno;
  }
  if (!ok && !sf->failed)
    rp_log(RP_LOG_WARN,
           "cannot write %s=%s: %s (readers see an old report until it can: "
           "check the directory exists and has room)",
           sf->what, sf->path, strerror(saved));
  else if (ok && sf->failed)
    rp_log(RP_LOG_INFO, "%s=%s is written again", sf->what, sf->path);
  sf->failed = !ok;
}

static void *writer_main(void *arg)
{
  struct stats_file *sf = arg;
  pthread_mutex_lock(&sf->lock);
  for (;;) {
    while (!sf->pending && !sf->stop)
      pthread_cond_wait(&sf->wake, &sf->lock);
    if (sf->stop)
      break;
    size_t len = sf->handed_len;
    memcpy(sf->writing, sf->handed, len);
    sf->pending = false;
    pthread_mutex_unlock(&sf->lock);
    write_report(sf, len);
    pthread_mutex_lock(&sf->lock);
  }
  pthread_mutex_unlock(&sf->lock);
  return NULL;
}

static void stats_file_free(struct stats_file *sf)
{
  pthread_cond_destroy(&sf->wake);
  pthread_mutex_destroy(&sf->lock);
  free(sf->handed);
  free(sf->writing);
  free(sf);
}

struct stats_file *stats_file_start(const char *path, const char *what, bool process_memory,
                                    char *err, size_t errlen)
{
  /* Refused now, where the operator hears of it: the writer would only log it. */
  if (rp_file_replaceable(path) < 0) {
    snprintf(err, errlen, "%s=%s: %s", what, path, rp_file_why(errno));
    return NULL;
  }
  struct stats_file *sf = calloc(1, sizeof *sf);
  if (!sf) {
    snprintf(err, errlen, "out of memory for the %s writer", what);
    return NULL;
  }
  snprintf(sf->path, sizeof sf->path, "%s", path);
  snprintf(sf->tmp, sizeof sf->tmp, "%s.tmp", path);
  snprintf(sf->what, sizeof sf->what, "%s", what);
  sf->process_memory = process_memory;
  sf->writing_cap = STATS_FILE_MAX_REPORT + 256; /* the appended line */
  sf->handed = malloc(STATS_FILE_MAX_REPORT);
  sf->writing = malloc(sf->writing_cap);
  pthread_mutex_init(&sf->lock, NULL);
  pthread_cond_init(&sf->wake, NULL);
  if (!sf->handed || !sf->writing) {
    snprintf(err, errlen, "out of memory for the %s writer", what);
    stats_file_free(sf);
    return NULL;
  }
  int rc = rp_thread_start(&sf->thread, "rampart-stats", WRITER_STACK_BYTES, writer_main, sf);
  if (rc != 0) {
    snprintf(err, errlen, "cannot start the %s writer thread: %s", what, strerror(rc));
    stats_file_free(sf);
    return NULL;
  }
  return sf;
}

void stats_file_publish(struct stats_file *sf, const char *report, size_t len)
{
  if (!sf || pthread_mutex_trylock(&sf->lock) != 0)
    return; /* the writer is taking the last report: this one is skipped */
  if (len > STATS_FILE_MAX_REPORT)
    len = STATS_FILE_MAX_REPORT;
  memcpy(sf->handed, report, len);
  sf->handed_len = len;
  sf->pending = true;
  pthread_cond_signal(&sf->wake);
  pthread_mutex_unlock(&sf->lock);
}

void stats_file_stop(struct stats_file *sf)
{
  if (!sf)
    return;
  pthread_mutex_lock(&sf->lock);
  sf->stop = true;
  pthread_cond_signal(&sf->wake);
  pthread_mutex_unlock(&sf->lock);
  pthread_join(sf->thread, NULL);
  unlink(sf->path);
  unlink(sf->tmp);
  stats_file_free(sf);
}
