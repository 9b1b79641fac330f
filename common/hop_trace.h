/* Hop stamps: where one request's time goes, across threads and processes on one host.
 *
 * Off unless the environment names a file (RAMPART_HOP_TRACE=PATH, which the benchmarks
 * set): then every process that calls rp_hop_trace_start maps that one file, shared, and
 * each stamp is a CLOCK_MONOTONIC time and a hop appended to it. The frontend, the engine,
 * the client connection and rampartd all stamp into the same file with the same clock,
 * so bench/pagein lines up one page-in's hops from every process. Off, a stamp is one
 * load of a null pointer and a branch: nothing on the hot path pays for it.
 *
 * The file fills once (RP_HOP_TRACE_STAMPS) and then takes no more: a benchmark makes it
 * fresh for each measured run. Stamps are claimed with one atomic add, so any thread of
 * any process may stamp.
 *
 * Errors: rp_hop_trace_start: -1 with a sentence in err (CONTRIBUTING.md,
 * convention 1); an unset variable is 0, tracing off.
 */
#ifndef RAMPART_COMMON_HOP_TRACE_H
#define RAMPART_COMMON_HOP_TRACE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define RP_HOP_TRACE_ENV "RAMPART_HOP_TRACE"
#define RP_HOP_TRACE_MAGIC 0x50484f50u /* "POHP" */
#define RP_HOP_TRACE_STAMPS (2u << 20)

/* The hops of one request, in the order it passes them. */
enum rp_hop {
  RP_HOP_FRONTEND_IN, /* the frontend has the request (NBD header read, ublk/bench submit) */
  RP_HOP_ENGINE_SUBMIT, /* rampart_submit / rampart_submit_list entered */
  RP_HOP_WIRE_OUT,      /* the client library calls sendmsg with the frame */
  RP_HOP_SERVER_IN,     /* rampartd's read() returned the frame */
  RP_HOP_SERVER_OUT,    /* rampartd calls send() with the reply */
  RP_HOP_ENGINE_REPLY,  /* the client library matched the reply to its request */
  RP_HOP_ENGINE_DONE, /* the engine completed the frontend's request (page checked, opened) */
  RP_HOP_FRONTEND_OUT, /* the frontend handed the answer back (NBD reply sent) */
  RP_HOP_COUNT
};

struct rp_hop_stamp {
  uint64_t ns;  /* 0: claimed, not yet written */
  uint32_t hop; /* enum rp_hop */
  uint32_t pid;
};

struct rp_hop_trace_file {
  uint32_t magic, capacity;
  _Atomic uint64_t next; /* stamps claimed; those past capacity were dropped */
  struct rp_hop_stamp stamp[];
};

extern struct rp_hop_trace_file *rp_hop_trace;

void rp_hop_trace_record(enum rp_hop hop);

static inline void rp_hop(enum rp_hop hop)
{
  if (__builtin_expect(rp_hop_trace != NULL, 0))
    rp_hop_trace_record(hop);
}

/* Maps the file RAMPART_HOP_TRACE names, creating it at its full size if it is new or
 * empty. Once per process; a second call does nothing. */
int rp_hop_trace_start(char *err, size_t errlen);

/* The file's size for `capacity` stamps. */
size_t rp_hop_trace_bytes(uint32_t capacity);

#endif
