/* Test helpers: real rampartd processes on loopback, temporary directories and key
 * files, and connections to them through librampart.
 *
 * A server is started from the binary named by the RAMPARTD environment variable with
 * `--listen 127.0.0.1:0 --foreground` plus the test's arguments; its stdout goes to a
 * file in the test's temporary directory, and the helper waits for the line
 * `rampartd: listening on HOST:PORT` to learn the ephemeral port. Every process is
 * stopped by its PID, never by name.
 */
#ifndef RAMPART_TEST_SERVER_PROCESS_H
#define RAMPART_TEST_SERVER_PROCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "auth.h"
#include "client.h"

struct rp_test_server {
  pid_t pid; /* 0 when not running */
  char host[64];
  char port[16];
  char addr[96]; /* "HOST:PORT" */
  char stdout_path[512];
  char stderr_path[512];
  /* Set when the process was found dead without the test having stopped or killed it
   * (rp_test_server_alive reaped it): a crash that rp_test_server_stop_clean reports. */
  bool died;
  int died_status;
};

/* A fresh directory under $TMPDIR (or /tmp), removed with everything in it by
 * rp_test_tmpdir_remove. Returns 0 or -1. */
/* CLOCK_MONOTONIC in milliseconds, and a sleep of ms milliseconds: tests' deadlines. */
uint64_t rp_test_now_ms(void);
void rp_test_sleep_ms(unsigned ms);

int rp_test_tmpdir(char *out, size_t outlen);
void rp_test_tmpdir_remove(const char *dir);

/* Writes a new random key to DIR/NAME (via rp_key_generate) and loads it into *key
 * (if not NULL). path gets the file name. 0 or -1. */
int rp_test_write_key(const char *dir, const char *name, char *path, size_t pathlen,
                      struct rp_key *key);

/* True when a line of the file at path holds text (a log line a test waits for); false
 * also when the file cannot be read. */
bool rp_test_file_has(const char *path, const char *text);

/* Prints the file at path on stdout, each line after prefix (a daemon's log when a test
 * fails); nothing when it cannot be read. */
void rp_test_print_file(const char *path, const char *prefix);

/* A line of /proc/PID/status in KiB (field "VmRSS", "VmLck", ...), -1 when the
 * process or the line is not there. */
long rp_test_process_status_kib(pid_t pid, const char *field);

/* Writes text to path (replacing it atomically via rename). 0 or -1. */
int rp_test_write_file(const char *path, const char *text);

/* Memory pressure files for rampartd --pressure-file: calm (what a test server reads
 * unless the test chose), and high enough to make a server advise. */
#define RP_TEST_PSI_CALM \
  "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n" \
  "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
#define RP_TEST_PSI_HIGH \
  "some avg10=80.00 avg60=50.00 avg300=20.00 total=99999\n" \
  "full avg10=40.00 avg60=20.00 avg300=10.00 total=9999\n"

/* The rampartd binary: $RAMPARTD. NULL (with a message on stderr) when unset. */
const char *rp_test_rampartd_path(void);
/* The test-only rampartd with --test-fault: $RAMPARTD_FAULTS. NULL (with a message)
 * when unset. rp_test_server_start and rp_test_run_rampartd use it by themselves when
 * their arguments include --test-fault. */
const char *rp_test_rampartd_faults_path(void);

/* Starts rampartd with `--listen 127.0.0.1:0 --foreground` followed by extra_args
 * (NULL-terminated, may be NULL); its output files live in dir. Waits up to 10 s for
 * the listening line. 0, or -1 (with the server's stderr echoed) when it did not start. */
int rp_test_server_start(struct rp_test_server *s, const char *dir,
                         const char *const *extra_args);

/* Like start, but with the whole argument list given (no --listen added). */
int rp_test_server_start_argv(struct rp_test_server *s, const char *dir,
                              const char *const *args);

/* SIGTERM, then waits up to 10 s (SIGKILL after that). Returns the wait status
 * (use WIFEXITED etc.), or -1 if the server was not running. */
int rp_test_server_stop(struct rp_test_server *s);
/* Stops s and checks that it lived as a healthy server does: still running when the
 * test asked it to stop (or killed by the test itself), then exit status 0 on SIGTERM.
 * A crash, a sanitizer report (ASan aborts, LeakSanitizer exits 23) or a hang is
 * printed with the server's stderr, where the sanitizer's report lands. Returns 0 when
 * all is well, -1 otherwise. Redundancy hides a crashed server from the test's reads;
 * this is what still sees it. */
int rp_test_server_stop_clean(struct rp_test_server *s);
/* "exit 0", "exit 23", "signal 11 (Segmentation fault)" for a wait status. */
const char *rp_test_describe_status(int status, char *buf, size_t len);
/* SIGKILL and reap: a crash. Returns the wait status or -1. */
int rp_test_server_kill(struct rp_test_server *s);
/* SIGSTOP / SIGCONT: a straggler. 0 or -1. */
int rp_test_server_pause(struct rp_test_server *s);
int rp_test_server_resume(struct rp_test_server *s);
/* True while the process has not exited (reaps it if it has). */
bool rp_test_server_alive(struct rp_test_server *s);

/* Runs rampartd with exactly args (NULL-terminated) to completion within timeout_ms,
 * capturing stdout and stderr together into out. Returns the wait status, or -1 (the
 * process is killed if it outlives the timeout). */
int rp_test_run_rampartd(const char *const *args, char *out, size_t outlen,
                         uint32_t timeout_ms);

/* Runs any program (argv[0] is the path) the same way. */
int rp_test_run_program(const char *const *argv, char *out, size_t outlen,
                        uint32_t timeout_ms);

/* A daemon's command line it must refuse: its arguments (NULL-terminated) and what its
 * output must say. */
struct rp_test_refusal {
  const char *argv[7];
  const char *says;
};
/* Runs program with each case's arguments; fails the running cmocka test, naming the
 * case and what the program said, unless each exits 2 saying what the case expects. */
void rp_test_expect_refusals(const char *program, const struct rp_test_refusal *cases,
                             unsigned n);

/* Opens a librampart connection to s (key may be NULL); asserts nothing: returns NULL
 * with err filled on failure. */
struct rp_conn *rp_test_connect(const struct rp_test_server *s, const struct rp_key *key,
                                const uint8_t *resume_token, struct rp_session_info *info,
                                struct rp_error *err);

/* A server's own counters (STAT on a connection of its own, ended with GOODBYE): true
 * when it answered; otherwise false, the reason printed on stderr. */
bool rp_test_server_stat(const struct rp_test_server *s, const struct rp_key *key,
                         struct rp_server_stat *ss);

/* A TCP socket connected to s (blocking), or -1. */
int rp_test_raw_connect(const struct rp_test_server *s);

/* Fills a page with bytes derived from (seed, slot); the same inputs give the same page. */
void rp_test_fill_page(uint8_t *page, uint64_t seed, uint64_t slot);

#endif
