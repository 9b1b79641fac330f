/* The engine's settings (KEY=VALUE), one row each: the one source of the keys.
 *
 * Each row is X(KEY, SETTER, DEFAULT, HELP):
 *   KEY      the key as nbdkit and rampart-ublk pass it;
 *   SETTER   config.c's static function that parses and stores a value;
 *   DEFAULT  the value rampart_config_new() sets through SETTER, or NULL when the
 *            default is not a value the key takes (a temporary file, "the device size");
 *   HELP     its lines of `--help`, starting with KEY=, each ending in a newline.
 *
 * Generated from it: rampart_config_help (the ublk target's --help) and the nbdkit
 * plugin's config_help (RAMPART_SETTINGS_HELP); rampart_config_set's lookup and
 * rampart_config_new's defaults. Checked against it, so they cannot drift:
 * rampart.h's key list and the key table in docs/operations.md ("Settings"), and the
 * "(default VALUE)" that a row's HELP and its rampart.h entry state against DEFAULT, by
 * test/scripts/check_settings.py (ctest unit/test_settings_table), which parses this
 * file: keep one row per X( ... ) and the strings literal.
 *
 * Errors: none here; a SETTER returns 0, or -1 with a sentence in err.
 */
#ifndef RAMPART_CONFIG_SETTINGS_H
#define RAMPART_CONFIG_SETTINGS_H

#define RAMPART_SETTINGS(X) \
  X("size", set_size, NULL, "size=SIZE                 device size, e.g. 4G (required)\n") \
  X("servers", set_servers, NULL, "servers=HOST:PORT,...     memory servers (rampartd)\n") \
  X("cluster", set_cluster, NULL, \
    "cluster=FILE              file listing servers, one HOST:PORT per line\n" \
    "cluster=etcd://HOST:PORT[,HOST:PORT...]/NAME\n" \
    "                          servers from etcd (rampartd --etcd ... --cluster NAME):\n" \
    "                          the count= with most free memory, spread over failure\n" \
    "                          domains; followed while the device runs\n") \
  X("count", set_count, "32", \
    "count=N                   placement set size with cluster=etcd:// (default 32)\n") \
  X("cluster-cache", set_cluster_cache, NULL, \
    "cluster-cache=PATH        the last set etcd gave, for an attach while etcd is down\n" \
    "                          (default: STATE.servers with state=, else\n" \
    "                          /var/lib/rampart/cluster-NAME.servers)\n") \
  X("etcd-cacert", set_etcd_cacert, NULL, \
    "etcd-cacert=FILE          CA certificate for TLS to etcd (https)\n") \
  X("etcd-cert", set_etcd_cert, NULL, \
    "etcd-cert=FILE            client certificate for etcd (with etcd-key=)\n") \
  X("etcd-key", set_etcd_key, NULL, \
    "etcd-key=FILE             client certificate's key for etcd (with etcd-cert=)\n") \
  X("key", set_key, NULL, "key=FILE                  cluster key shared with the servers\n") \
  X("redundancy", set_redundancy, "auto", \
    "redundancy=none|mirror|parity-log|write-through  (default auto: parity-log with\n" \
    "                          3+ servers, mirror with 2, none with 1)\n") \
  X("group", set_group, NULL, \
    "group=S                   data pages per parity group, 1 to 16 (default: up to 4)\n") \
  X("parity", set_parity, "1", \
    "parity=1|2                parity pages per group with parity-log: 2 (P and Q) " \
    "survives\n" \
    "                          any two lost servers of a group (default 1)\n") \
  X("spill", set_spill, NULL, \
    "spill=PATH                local disk store, file or partition (default: temp file)\n") \
  X("spill-size", set_spill_size, NULL, \
    "spill-size=SIZE           capacity of the spill store (default: device size)\n") \
  X("memory", set_memory, NULL, \
    "memory=SIZE               local RAM for pages with no servers (default: all of " \
    "size)\n") \
  X("overflow", set_overflow, "10", \
    "overflow=PERCENT          extra server memory for old page versions (default 10)\n") \
  X("timeout", set_timeout, "2000", \
    "timeout=MS                a server silent this long is failing (default 2000)\n") \
  X("lease", set_lease, "10", \
    "lease=SECONDS             how long to wait for a dropped server to return (default " \
    "10)\n") \
  X("io-timeout", set_io_timeout, NULL, \
    "io-timeout=MS             longest a request waits for a reconnecting server before " \
    "it\n" \
    "                          fails as its policy says (default: the lease)\n") \
  X("poll-us", set_poll_us, "0", \
    "poll-us=US                a thread waiting for a server's reply spins this long " \
    "before\n" \
    "                          it sleeps, while a request is out: for a host with a core " \
    "to\n" \
    "                          spare (default 0: never)\n") \
  X("poll-pressure", set_poll_pressure, "40", \
    "poll-pressure=PCT         ... but not while runnable tasks waited for a CPU PCT % " \
    "or\n" \
    "                          more of the last 100 ms (/proc/pressure/cpu) (default 40;\n" \
    "                          100: spin whatever the pressure)\n") \
  X("prefetch", set_prefetch, "0", \
    "prefetch=PAGES            a locked cache of pages read ahead along the trend of the\n" \
    "                          reads (default 0: off; docs/page-in.md)\n") \
  X("prefetch-depth", set_prefetch_depth, "8", \
    "prefetch-depth=PAGES      pages read ahead of a read, at most prefetch= (default 8)\n") \
  X("tmpdir", set_tmpdir, NULL, \
    "tmpdir=DIR                where the temporary spill file goes\n") \
  X("stats-file", set_stats_file, NULL, \
    "stats-file=PATH           rewrite engine stats here every second (rampartctl " \
    "device)\n") \
  X("metrics-file", set_metrics_file, NULL, \
    "metrics-file=PATH         rewrite its counters here every second in the Prometheus\n" \
    "                          text format (node_exporter textfile collector: NAME.prom)\n") \
  X("control", set_control, NULL, \
    "control=PATH              unix socket for rampartctl device PATH add|drain|remove|\n" \
    "                          reload|servers: change the servers of the running device\n") \
  X("rebalance", set_rebalance, "256", \
    "rebalance=PAGES           pages a second rewritten to even out the servers\n" \
    "                          (default 256; 0: never)\n") \
  X("encrypt", set_encrypt, "on", \
    "encrypt=on|off            seal pages with AES-256-GCM before they leave (default on;\n" \
    "                          off: checksummed plaintext, for benchmarks)\n") \
  X("enckey", set_enckey, NULL, \
    "enckey=FILE               key material for the page key (default: random per " \
    "attach)\n") \
  X("state", set_state, NULL, \
    "state=PATH                keep the device's state where a restarted pager finds it\n" \
    "                          (docs/recovery.md): its pages survive the pager's crash\n") \
  X("submit", set_submit, "inline", \
    "submit=inline|handover    who starts a request: the frontend's own thread when the\n" \
    "                          engine's I/O thread is idle (default inline: half the\n" \
    "                          latency at queue depth 1, docs/engine.md), or always the\n" \
    "                          I/O thread\n")

/* Every row's help, in order: a string literal, for a static initializer. */
#define RAMPART_SETTING_HELP_TEXT(key, setter, default_value, help) help
#define RAMPART_SETTINGS_HELP RAMPART_SETTINGS(RAMPART_SETTING_HELP_TEXT)

#endif
