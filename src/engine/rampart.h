/* librampart: the pager engine's public API, the only header a frontend includes.
 *
 * rampart-nbd-server, the nbdkit plugin, the ublk target and the tests all drive the
 * same engine through this API: configure with key=value strings (as nbdkit passes
 * them), open, then submit page-aligned I/O. The engine owns one I/O thread running a
 * libev loop with every server connection and the spill store on it. A submission from
 * any thread is started on that thread when the I/O thread is idle (submit=inline, the
 * default), or handed over through a lock-free queue and an ev_async wake-up.
 *
 * Two ways to do I/O, same semantics:
 *   - asynchronous: rampart_submit() with a caller-owned struct rampart_io; its
 *     completion callback runs on the engine's I/O thread (ublk: complete the tag there),
 *     or on the caller's own thread while it waits in rampart_reap().
 *   - blocking: rampart_pread/pwrite/trim/zero/flush, which submit and wait (nbdkit's
 *     thread model parallel calls these from its worker threads).
 *
 * Errors are negative errno values: -EIO for any remote or disk failure (a page that
 * cannot be read correctly is never returned as wrong data), -EINVAL for misaligned or
 * out-of-range requests, -ENOSPC when neither servers nor the spill store have room.
 *
 * Errors: two conventions (CONTRIBUTING.md): configuration and rampart_open return
 * -1 (or NULL) with a sentence in err, for the operator; I/O returns 0 or negative
 * errno, as above, for the kernel.
 */
#ifndef RAMPART_H
#define RAMPART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <sys/types.h>

#include "rampart_types.h"

struct rampart_engine;

/* Configuration, filled through rampart_config_set() from key=value strings. The keys'
 * one source is the table in config_settings.h; this list is checked against it
 * (test/scripts/check_settings.py), so a key added there must be described here too:
 *   size=SIZE             device size (required), a multiple of 4 KiB
 *   servers=H:P,H:P,...   memory servers; or
 *   cluster=FILE          one HOST:PORT a line, '#' comments
 *   cluster=etcd://HOST:PORT[,HOST:PORT...]/NAME  the servers rampartd --etcd announces
 *                         under NAME: count= of them, followed while the device runs
 *   count=N               placement set size with cluster=etcd:// (default 32)
 *   cluster-cache=PATH    the last set etcd gave, for an attach while etcd is down
 *   etcd-cacert=FILE      CA certificate for TLS to etcd
 *   etcd-cert=FILE        client certificate for etcd (with etcd-key=)
 *   etcd-key=FILE         its key
 *   key=FILE              cluster key (required when servers are not on loopback)
 *   redundancy=none|mirror|parity-log|write-through   (default: auto)
 *   group=S               data pages per parity group (default: min(4, servers-1))
 *   parity=1|2            parity pages per group with parity-log: 2 survives any two
 *                         lost servers of a group (default 1)
 *   spill=PATH            local disk store (default: a temporary file)
 *   spill-size=SIZE       its capacity (default: the device size)
 *   tmpdir=DIR            where the temporary spill file goes (default: $TMPDIR or
 *                         /var/tmp)
 *   memory=SIZE           standalone mode: local RAM for pages before spilling (default 0
 *                         with servers; with none, the whole device)
 *   overflow=PERCENT      extra remote memory for old versions, kept by cleaning (default 10)
 *   timeout=MS            a server that does not answer in this long is failing (default 2000)
 *   lease=SECONDS         how long a reconnecting server's session is expected to live:
 *                         past it the server is declared lost and its pages rebuilt
 *                         (default 10)
 *   io-timeout=MS         longest a request waits for a reconnecting server (a read that
 *                         cannot be rebuilt without it, a write with nowhere else to go)
 *                         before it fails as its policy says: rebuilt, spilled, or EIO
 *                         (default: the lease)
 *   poll-us=US            a thread waiting for a server's reply (rampart_reap) spins this
 *                         long before it sleeps, only while a request is out: for a host
 *                         with a core to spare (default 0: never spin)
 *   poll-pressure=PCT     ... but not while runnable tasks waited for a CPU PCT % or more
 *                         of the last tick's 100 ms (/proc/pressure/cpu): the spin would
 *                         take a CPU one of them needs (default 40; 100: spin whatever the
 *                         pressure)
 *   prefetch=PAGES        a locked cache of that many pages, read ahead along the
 *                         majority trend of the reads; a read it holds needs no round
 *                         trip (default 0: off; docs/page-in.md)
 *   prefetch-depth=PAGES  pages read ahead of a read along the trend, at most prefetch=
 *                         (default 8)
 *   stats-file=PATH       the engine rewrites its stats report here every second
 *   metrics-file=PATH     ... and its counters in the Prometheus text format (for
 *                         node_exporter's textfile collector: a NAME.prom file)
 *   control=PATH          a unix socket (mode 0600) taking add, drain, remove, reload and
 *                         servers from `rampartctl device PATH ...` (docs/elastic.md)
 *   rebalance=PAGES       pages a second the mover may rewrite to even out how full the
 *                         servers are, e.g. after one was added (default 256; 0: never)
 *   encrypt=on|off        seal pages with AES-256-GCM (default on; off for benchmarks)
 *   enckey=FILE           key material for the page key (default: random per attach)
 *   state=PATH            keep the map, seals, key and sessions in a locked shared-memory
 *                         segment PATH names, so a pager restarted after a crash takes
 *                         the device back with every page (docs/recovery.md)
 *   submit=inline|handover  who starts a request: the calling thread while the I/O
 *                         thread sleeps (default inline), or always the I/O thread
 *                         (handover; docs/engine.md)
 */
struct rampart_config;

struct rampart_config *rampart_config_new(void);
void rampart_config_free(struct rampart_config *config);
/* Sets one key; -1 with a sentence in err (unknown key, size that is not a number...). */
int rampart_config_set(struct rampart_config *config, const char *key, const char *value,
                       char *err, size_t errlen);
/* A frontend daemon's command line (rampart-nbd-server's, rampart-ublk's), read into a
 * new configuration (frontend_args.c). Each argument goes to `option` first, which takes
 * the frontend's own; of what it leaves, --help and -h print `usage` and then
 * rampart_config_help, --state-layout prints rampart_state_layout(), KEY=VALUE is a
 * setting (rampart_config_set), and anything else is refused with the usage.
 * Once every argument is read, `check` (when given) and rampart_config_check look at the
 * whole. Unlike the rest of the configuration this says what is wrong itself, on stderr,
 * each line starting "WHO: ". Returns the configuration (rampart_config_free), or NULL
 * with *exit_status: 0 after --help or --state-layout, 2 after a refusal, 1 when out of
 * memory. */
/* The switches every frontend takes beside the engine's settings, in the same KEY=VALUE
 * spelling: mlock=BOOL (lock the daemon's memory; default true, a swap device must) and
 * standby=BOOL (with state=: wait beside the daemon serving that state and take it
 * over when it dies; default false). */
struct rampart_frontend_switches {
  bool lock_memory;
  bool standby;
};
#define RAMPART_FRONTEND_SWITCHES_DEFAULT \
  { \
    .lock_memory = true, .standby = false \
  }
/* key=value when key is one of the switches: 1 with it set, 0 when key is not one, -1
 * with a sentence in err when value is not true/false, on/off, yes/no or 1/0. */
int rampart_frontend_switch(struct rampart_frontend_switches *switches, const char *key,
                            const char *value, char *err, size_t errlen);
/* A frontend's own option whose value is a whole number from 1 to most (--depth N,
 * --threads N, --stall-timeout S): 2 (it took the value) with *out set, or -1 after
 * saying on stderr "WHO: OPTION 'VALUE': give UNIT from 1 to MOST". unit says what the
 * number counts, e.g. "a number" or "whole seconds". */
int rampart_frontend_count(const char *who, const char *option, const char *value,
                           unsigned most, const char *unit, unsigned *out);
/* The switches against the whole configuration (standby=true needs state=): 0, or -1
 * with a sentence in err. */
int rampart_frontend_switches_check(const struct rampart_frontend_switches *switches,
                                    const struct rampart_config *config, char *err,
                                    size_t errlen);
struct rampart_frontend_args {
  const char *who;   /* the program's name, e.g. "rampart-ublk" */
  const char *usage; /* its own options: printed before the settings' help */
  /* arg is argv[i], value argv[i + 1] or NULL. Returns how many it took (1, or 2 with
   * the value), 0 when arg is not the frontend's, or -1 after saying why on stderr. */
  int (*option)(void *ctx, const char *arg, const char *value);
  /* 0, or -1 after saying why on stderr. May be NULL. */
  int (*check)(void *ctx, const struct rampart_config *config);
  void *ctx;
  /* mlock= and standby= are read into these (rampart_frontend_switch). */
  struct rampart_frontend_switches *switches;
};
struct rampart_config *rampart_config_from_arguments(const struct rampart_frontend_args *f,
                                                     int argc, char **argv, int *exit_status);
/* Checks the whole configuration (size given, servers reachable is NOT checked here). */
int rampart_config_check(const struct rampart_config *config, char *err, size_t errlen);
/* state=, or NULL when none was given. */
const char *rampart_config_state_path(const struct rampart_config *config);
/* The files a takeover of the state reads (state=, key=, enckey=, cluster=, those that
 * were given), which a standby pins beforehand; pointers into config. Returns how many. */
unsigned rampart_config_takeover_files(const struct rampart_config *config,
                                       const char *files[4]);
/* One line per key (more for some), as --help prints them: config_settings.h's help. */
extern const char rampart_config_help[];

/* Connects to every server, reserves capacity, opens the spill store, starts the I/O
 * thread. A server that cannot be reached at open is a start-up error (the operator
 * named it), unless allow_degraded was set. NULL with err on failure. */
struct rampart_engine *rampart_open(const struct rampart_config *config, char *err,
                                    size_t errlen);
/* Drains in-flight I/O, says GOODBYE to every server (freeing their pages), removes a
 * temporary spill file, stops the thread. */
void rampart_close(struct rampart_engine *engine);

uint64_t rampart_size(const struct rampart_engine *engine);
/* The engine took over a state (state=) that a pager which died left: its pages are in
 * the servers' sessions, which rampart_close would end. A frontend that cannot serve
 * such an engine exits without closing it, for the next attempt to take it over. */
bool rampart_took_over(const struct rampart_engine *engine);
/* Does now what a later rampart_open would otherwise do first by reading files (the
 * crypto library's configuration): for a standby (rampart-ublk standby=true) whose
 * takeover happens while files may be swapped out to the device it takes over. */
void rampart_warm_up(void);
/* The layout of the state (state=) this build writes and reads: a pager of a build whose
 * layout differs cannot take it over (rampart-swap upgrade checks it beforehand). */
const char *rampart_state_layout(void);

/* ---- A standby pager (docs/recovery.md) ----------------------------------------------
 * When the pager serving a swap device dies, the kernel holds the device's I/O, and in a
 * machine short of memory every task that allocates waits on it: nothing can be started
 * then. So the replacement is started beforehand, beside the serving pager with the same
 * settings, and these are its steps: pin the files its takeover reads, warm up, find the
 * pager it stands by for, and sleep on it. Then rampart_open takes the state over. */

/* Keeps the file's pages in memory for good (mapped, locked under mlockall): a key, the
 * state's anchor; on a machine whose files live in tmpfs they could otherwise be swapped
 * out to the very device being taken over. Pin the state's anchor only once its pager
 * has opened it: the pager writes it anew at first open. */
void rampart_standby_pin_file(const char *path);
/* A standby's whole start-up for config's state= (nbdkit rampart and rampart-nbd-server
 * with standby=true): warms up, finds the serving pager, pins the files its takeover
 * reads (rampart_config_takeover_files), says "WHO: standing by ..." on stderr and
 * tells the supervisor (RAMPART_NOTICE_STANDING_BY), sleeps until that pager dies, then
 * opens the engine over the state it left and refuses an engine that took nothing over
 * (an empty device in place of the one that died), then says "WHO: took PATH over" and
 * tells the supervisor (RAMPART_NOTICE_TOOK_OVER). The engine, or NULL with err: no
 * state= was given, no pager serves it, it stopped cleanly (its state went with it), a
 * stop signal came first, or the takeover failed. */
struct rampart_engine *rampart_open_standby(const char *who,
                                            const struct rampart_config *config, char *err,
                                            size_t errlen);
/* rampart-ublk standby=true: sleeps on the pidfd of the process `serving` (the
 * ublk device names its daemon). 0: it ended. 1: a stop signal came first (one this
 * thread blocks is taken). -1 with err: it cannot be watched. */
int rampart_standby_wait(pid_t serving, size_t reserve_bytes, char *err, size_t errlen);

/* ---- Telling the supervisor (supervisor_notify.c) -----------------------------------
 * A daemon's readiness, and a standby's takeover, for whoever started it (rampart-swap,
 * a systemd unit of Type=notify): the sd_notify protocol, a datagram to the socket
 * $NOTIFY_SOCKET names (a path, or @ and an abstract name). The log says the same in
 * words for people; a supervisor reads this, never the log. */
enum rampart_notice {
  RAMPART_NOTICE_SERVING,     /* READY=1: clients and the kernel are served */
  RAMPART_NOTICE_STANDING_BY, /* READY=1 and RAMPART_STANDBY=1: armed, waiting */
  RAMPART_NOTICE_TOOK_OVER,   /* RAMPART_TOOK_OVER=1: a standby serves the device now */
  RAMPART_NOTICE_STOPPING,    /* STOPPING=1 */
};
/* Sends notice, with `what` (the device, the state) in its STATUS= line. 0 when sent or
 * when NOTIFY_SOCKET is not set; -1 (said on stderr) when it cannot be sent. */
int rampart_notify(enum rampart_notice notice, const char *what);

/* I/O: struct rampart_io (rampart_types.h), a caller-owned request. */
void rampart_submit(struct rampart_engine *engine, struct rampart_io *io);
/* Several requests at once, linked through next (NULL-terminated): one lock and one
 * send per server for the whole list, where rampart_submit would take them per request.
 * For a frontend that is handed requests in batches (a ublk queue's completions). */
void rampart_submit_list(struct rampart_engine *engine, struct rampart_io *first);
/* Waits for replies on the calling thread, for a frontend whose thread has nothing else
 * to wait for while its requests are in flight. The thread reads the servers' replies
 * itself, and the done callbacks of what completes run on it, before this returns;
 * without it they run on the engine's I/O thread, which must then wake the frontend.
 * Returns once some request completed (done ran, here or on the I/O thread) or after at
 * most 100 ms: the caller looks at its own completions and calls again. The sockets stay
 * with the thread between calls, and go back to the I/O thread 100-200 ms after its
 * last call. */
void rampart_reap(struct rampart_engine *engine);
/* rampart_reap that also returns once own_fd is readable: for a frontend thread that
 * waits on something of its own besides the engine (a ublk queue's io_uring, whose fd
 * is readable when completions are ready; an NBD connection's socket). The caller reads
 * own_fd; -1 for none. True when it returned with own_fd seen readable, so a caller
 * that reads it without blocking need not try when it was not. */
bool rampart_reap_or_fd(struct rampart_engine *engine, int own_fd);

/* Blocking forms, for frontends with their own worker threads. 0 or -errno. Unlike
 * rampart_submit these accept any byte offset and length: partial pages are read,
 * modified and written back (trim ignores partial pages, as discard may). */
int rampart_pread(struct rampart_engine *engine, void *buf, uint32_t length, uint64_t offset);
int rampart_pwrite(struct rampart_engine *engine, const void *buf, uint32_t length,
                   uint64_t offset, uint32_t flags);
int rampart_trim(struct rampart_engine *engine, uint32_t length, uint64_t offset);
int rampart_zero(struct rampart_engine *engine, uint32_t length, uint64_t offset);
int rampart_flush(struct rampart_engine *engine);

/* struct rampart_stats: rampart_types.h. */
void rampart_get_stats(struct rampart_engine *engine, struct rampart_stats *stats);

/* Prepares the calling process to serve swap: mlockall (if lock_memory), PR_SET_IO_FLUSHER,
 * a low OOM score. Call after any fork. Best effort: -1 if any step failed (logged). */
int rampart_process_harden(bool lock_memory);

/* Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and fills stop_signals with
 * them, for sigwait or a signalfd. Call before any thread starts (the engine's too), so
 * every thread inherits the mask and the stop reaches the one that waits for it. */
void rampart_block_stop_signals(sigset_t *stop_signals);

/* Routes the engine's log lines to a frontend's logger (nbdkit_error/nbdkit_debug).
 * level: 0 error, 1 warning, 2 info, 3 debug. */
void rampart_set_log_sink(void (*sink)(int level, const char *line));

/* Writes a human-readable report of stats (what rampartctl and the plugin print). */
void rampart_format_stats(const struct rampart_stats *stats, char *buf, size_t buflen);

/* Changing the servers of a running device (src/engine/server_membership.c, docs/elastic.md).
 * Blocking: call from any thread but the engine's own (the control socket's, a test's).
 * Each returns 0 and says in msg what it did (also when there was nothing to do, so
 * repeating a command is safe), or -errno and says in msg why not and what to do.
 *   add     connects to address, reserves its share and places new groups there
 *   drain   places nothing more there and moves every page that depends on it to the
 *           other servers (each read verified as it moves); refused when they lack
 *           the room or when fewer than the policy needs would be left. remove: then
 *           ends its session and forgets it
 *   reload  reads the cluster= file again: adds the servers new there, removes the
 *           ones no longer listed
 * Progress is in the stats (pages_dependent of a draining server). */
int rampart_server_add(struct rampart_engine *engine, const char *address, char *msg,
                       size_t msglen);
int rampart_server_drain(struct rampart_engine *engine, const char *address, bool remove,
                         char *msg, size_t msglen);
int rampart_cluster_reload(struct rampart_engine *engine, char *msg, size_t msglen);

/* A server state's name as reports and metrics print it ("up", "lost", ...). */
const char *rampart_server_health_name(enum rampart_server_health state);

/* Writes stats in the Prometheus text exposition format (rampart_pager_* metrics, one
 * HELP and TYPE line each). Returns the length the whole text needs: when that is
 * buflen or more, buf holds a truncated text that must not be published. */
size_t rampart_format_metrics(const struct rampart_stats *stats, char *buf, size_t buflen);

#endif
