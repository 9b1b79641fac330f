/* bench/engine's servers: real rampartd processes on 127.0.0.1, each on a port the
 * kernel picks, with a fresh cluster key; started, sampled and stopped by PID. */
#include "engine_bench.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"

static void sleep_ms(unsigned ms)
{
  struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
  remove(path);
  return 0;
}

/* The address from rampartd's "rampartd: listening on H:P" line, once it is there. */
static bool listen_address(const char *out_path, char addr[64])
{
  FILE *f = fopen(out_path, "r");
  if (!f)
    return false;
  char line[256];
  bool found = false;
  while (!found && fgets(line, sizeof line, f))
    found = sscanf(line, "rampartd: listening on %63s", addr) == 1;
  fclose(f);
  return found;
}

static pid_t spawn(const struct bench_cluster *c, unsigned i, const char *rampartd,
                   const char *memory)
{
  char out[320], log[320], psi[320];
  snprintf(out, sizeof out, "%s/rampartd-%u.out", c->dir, i + 1);
  snprintf(log, sizeof log, "%s/rampartd-%u.log", c->dir, i + 1);
  /* No memory pressure, whatever this shared machine feels: the servers lend. */
  snprintf(psi, sizeof psi, "%s/psi-%u", c->dir, i + 1);
  FILE *p = fopen(psi, "w");
  if (!p)
    return -1;
  fputs("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", p);
  fclose(p);
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  /* The servers go when this benchmark goes, however it ends. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int e = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int n = open("/dev/null", O_RDONLY);
  if (o < 0 || e < 0 || n < 0)
    _exit(127);
  dup2(n, 0);
  dup2(o, 1);
  dup2(e, 2);
  execl(rampartd, rampartd, "--listen", "127.0.0.1:0", "--memory", memory, "--key", c->key,
        "--foreground", "--pressure-file", psi, (char *)NULL);
  _exit(127);
}

int bench_cluster_start(struct bench_cluster *c, unsigned n, const char *rampartd,
                        const char *memory, char *err, size_t errlen)
{
  const char *rampartctl = c->rampartctl;
  memset(c, 0, sizeof *c);
  c->rampartctl = rampartctl;
  const char *base = getenv("TMPDIR");
  snprintf(c->dir, sizeof c->dir, "%s/rampart-engine-bench-XXXXXX",
           base && *base ? base : "/tmp");
  if (!mkdtemp(c->dir)) {
    snprintf(err, errlen, "cannot make a temporary directory (%s): set TMPDIR",
             strerror(errno));
    c->dir[0] = 0;
    return -1;
  }
  snprintf(c->key, sizeof c->key, "%s/key", c->dir);
  char why[256];
  if (rp_key_generate(c->key, why, sizeof why) < 0) {
    snprintf(err, errlen, "cannot write a cluster key: %s", why);
    bench_cluster_stop(c);
    return -1;
  }
  for (unsigned i = 0; i < n; i++) {
    c->pid[i] = spawn(c, i, rampartd, memory);
    if (c->pid[i] < 0) {
      snprintf(err, errlen, "cannot start %s: %s", rampartd, strerror(errno));
      bench_cluster_stop(c);
      return -1;
    }
    c->n = i + 1;
  }
  for (unsigned i = 0; i < n; i++) {
    char out[320];
    snprintf(out, sizeof out, "%s/rampartd-%u.out", c->dir, i + 1);
    for (unsigned t = 0; !listen_address(out, c->addr[i]); t++) {
      if (t >= 200 || waitpid(c->pid[i], NULL, WNOHANG) == c->pid[i]) {
        snprintf(err, errlen,
                 "rampartd %u (%s) did not start listening within 10 s: see its "
                 "log (run with a rampartd that works: $RAMPARTD)",
                 i + 1, rampartd);
        bench_cluster_stop(c);
        return -1;
      }
      sleep_ms(50);
    }
  }
  return 0;
}

void bench_cluster_stop(struct bench_cluster *c)
{
  for (unsigned i = 0; i < c->n; i++)
    if (c->pid[i] > 0)
      kill(c->pid[i], SIGTERM);
  for (unsigned i = 0; i < c->n; i++) {
    if (c->pid[i] <= 0)
      continue;
    bool gone = false;
    for (unsigned t = 0; t < 100 && !gone; t++) {
      gone = waitpid(c->pid[i], NULL, WNOHANG) == c->pid[i];
      if (!gone)
        sleep_ms(50);
    }
    if (!gone) {
      fprintf(stderr, "engine-bench: rampartd pid %d ignored SIGTERM for 5 s; killing it\n",
              (int)c->pid[i]);
      kill(c->pid[i], SIGKILL);
      waitpid(c->pid[i], NULL, 0);
    }
    c->pid[i] = 0;
  }
  c->n = 0;
  if (c->dir[0])
    nftw(c->dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
  c->dir[0] = 0;
}

void bench_cluster_servers(const struct bench_cluster *c, char *out, size_t outlen)
{
  size_t len = 0;
  out[0] = 0;
  for (unsigned i = 0; i < c->n && len < outlen; i++)
    len += (size_t)snprintf(out + len, outlen - len, "%s%s", i ? "," : "", c->addr[i]);
}

/* utime + stime of the whole process (exited threads' included), in µs. */
static double process_cpu_us(pid_t pid)
{
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  unsigned long long utime = 0, stime = 0;
  /* after ") ": state is field 3; utime and stime are fields 14 and 15 */
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                   &stime) != 2)
    return 0;
  return (double)(utime + stime) * 1e6 / (double)sysconf(_SC_CLK_TCK);
}

/* voluntary + nonvoluntary switches summed over the process's threads. */
static uint64_t process_switches(pid_t pid)
{
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d)
    return 0;
  uint64_t sum = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char status[400], line[256];
    snprintf(status, sizeof status, "%s/%s/status", path, e->d_name);
    FILE *f = fopen(status, "r");
    if (!f)
      continue;
    unsigned long long v;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1 ||
          sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
        sum += v;
    fclose(f);
  }
  closedir(d);
  return sum;
}

/* A server's ops_write + ops_read from `rampartctl stat --json`; false if not known. */
static bool server_ops_pages(const struct bench_cluster *c, unsigned i, uint64_t *pages)
{
  char cmd[800];
  snprintf(cmd, sizeof cmd, "'%s' stat %s --key '%s' --json 2>/dev/null", c->rampartctl,
           c->addr[i], c->key);
  FILE *p = popen(cmd, "r");
  if (!p)
    return false;
  static char text[16384];
  size_t n = fread(text, 1, sizeof text - 1, p);
  text[n] = 0;
  int status = pclose(p);
  const char *w = strstr(text, "\"ops_write\""), *r = strstr(text, "\"ops_read\"");
  unsigned long long vw, vr;
  if (status != 0 || !w || !r || sscanf(strchr(w, ':') + 1, " %llu", &vw) != 1 ||
      sscanf(strchr(r, ':') + 1, " %llu", &vr) != 1)
    return false;
  *pages = vw + vr;
  return true;
}

void bench_cluster_sample(const struct bench_cluster *c, bool with_ops,
                          struct bench_servers_sample *out)
{
  memset(out, 0, sizeof *out);
  out->ops_known = with_ops && c->rampartctl;
  for (unsigned i = 0; i < c->n; i++) {
    if (!with_ops) {
      out->cpu_us += process_cpu_us(c->pid[i]);
      out->switches += process_switches(c->pid[i]);
      continue;
    }
    uint64_t pages = 0;
    if (out->ops_known && server_ops_pages(c, i, &pages))
      out->ops_pages += pages;
    else
      out->ops_known = false;
  }
}
