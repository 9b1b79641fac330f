/* The test-only hostile-server switch (see fault_injection.h). Compiled in only with
 * RAMPART_TEST_FAULTS (the rampartd-faults test binary); the rampartd that is
 * installed gets the stubs at the end, so no option or config line can turn a
 * production server into a liar. */
#include "fault_injection.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "log.h"
#include "page_store.h"

#ifdef RAMPART_TEST_FAULTS

bool rps_fault_compiled_in(void)
{
  return true;
}

static const char *const mode_names[] = {
  [RPS_FAULT_NONE] = "none",
  [RPS_FAULT_FLIP] = "flip",
  [RPS_FAULT_SWAP] = "swap",
  [RPS_FAULT_REPLAY] = "replay",
  [RPS_FAULT_REFUSE_WRITES] = "refuse-writes",
};

static uint64_t writes_seen; /* refuse-writes: WRITEs received */

/* Replay state, mapped on the first WRITE in replay mode. The copies are one anonymous
 * mapping of capacity pages: only slots that get a copy cost memory. */
static struct {
  bool map_failed;
  uint64_t capacity; /* pages */
  uint8_t *copies;   /* capacity * RP_PAGE_SIZE bytes; NULL until mapped */
  uint8_t *has_copy; /* bitmap: capacity bits */
  uint8_t last_write[RP_PAGE_SIZE];
  bool have_last_write;
} replay;

int rps_fault_parse(const char *name, enum rps_fault_mode *mode)
{
  for (int m = RPS_FAULT_FLIP; m <= RPS_FAULT_LAST; m++) {
    if (strcmp(name, mode_names[m]) == 0) {
      *mode = (enum rps_fault_mode)m;
      return 0;
    }
  }
  return -1;
}

const char *rps_fault_name(enum rps_fault_mode mode)
{
  return mode <= RPS_FAULT_LAST ? mode_names[mode] : "?";
}

void rps_fault_announce(enum rps_fault_mode mode)
{
  if (mode == RPS_FAULT_REFUSE_WRITES)
    rp_log(RP_LOG_WARN,
           "test-fault=%s: this server deliberately refuses one WRITE in %u; "
           "for tests only",
           rps_fault_name(mode), RPS_FAULT_REFUSE_EVERY);
  else if (mode != RPS_FAULT_NONE)
    rp_log(RP_LOG_WARN,
           "test-fault=%s: this server deliberately corrupts pages it "
           "returns; for tests only",
           rps_fault_name(mode));
}

static void *map_zeroed(size_t bytes)
{
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static bool map_replay(struct rps_store *store)
{
  if (replay.copies || replay.map_failed)
    return replay.copies != NULL;
  struct rps_store_stats ss;
  rps_store_get_stats(store, &ss);
  replay.capacity = ss.capacity_pages;
  replay.copies = map_zeroed(replay.capacity * RP_PAGE_SIZE);
  replay.has_copy = map_zeroed((replay.capacity + 7) / 8);
  if (!replay.copies || !replay.has_copy) {
    /* Logged once; reads then return the real pages, which a test will notice. */
    rp_log(RP_LOG_ERROR, "test-fault=replay: cannot map %llu pages of replay copies: %s",
           (unsigned long long)replay.capacity, strerror(errno));
    rps_fault_release();
    replay.map_failed = true;
  }
  return replay.copies != NULL;
}

bool rps_fault_refuses_write(enum rps_fault_mode mode, char *msg, size_t msglen)
{
  if (mode != RPS_FAULT_REFUSE_WRITES)
    return false;
  if (++writes_seen % RPS_FAULT_REFUSE_EVERY != 0)
    return false;
  snprintf(msg, msglen,
           "test-fault=refuse-writes: WRITE %llu refused as if this host could "
           "not map a page",
           (unsigned long long)writes_seen);
  return true;
}

void rps_fault_on_write(enum rps_fault_mode mode, struct rps_store *store, uint64_t slot,
                        const uint8_t *page)
{
  if (mode != RPS_FAULT_REPLAY || !map_replay(store) || slot >= replay.capacity)
    return;
  uint8_t bit = (uint8_t)(1u << (slot % 8));
  if (replay.have_last_write) {
    memcpy(replay.copies + slot * RP_PAGE_SIZE, replay.last_write, RP_PAGE_SIZE);
    replay.has_copy[slot / 8] |= bit;
  } else {
    replay.has_copy[slot / 8] &= (uint8_t)~bit; /* the server's first write: none before */
  }
  memcpy(replay.last_write, page, RP_PAGE_SIZE);
  replay.have_last_write = true;
}

void rps_fault_read_reply(enum rps_fault_mode mode, struct rps_store *store,
                          const struct rps_account *acct, uint64_t slot, uint8_t *payload)
{
  switch (mode) {
  case RPS_FAULT_NONE:
  case RPS_FAULT_REFUSE_WRITES:
    return;
  case RPS_FAULT_FLIP:
    payload[slot % RP_PAGE_SIZE] ^= 0x01;
    return;
  case RPS_FAULT_SWAP: {
    const uint8_t *neighbour;
    char msg[200];
    if (rps_store_read(store, acct, slot ^ 1, &neighbour, msg, sizeof msg) == RP_OK)
      memcpy(payload, neighbour, RP_PAGE_SIZE);
    return;
  }
  case RPS_FAULT_REPLAY:
    if (replay.copies && slot < replay.capacity &&
        (replay.has_copy[slot / 8] & (1u << (slot % 8))))
      memcpy(payload, replay.copies + slot * RP_PAGE_SIZE, RP_PAGE_SIZE);
    return;
  }
}

void rps_fault_release(void)
{
  if (replay.copies)
    munmap(replay.copies, replay.capacity * RP_PAGE_SIZE);
  if (replay.has_copy)
    munmap(replay.has_copy, (replay.capacity + 7) / 8);
  replay.copies = replay.has_copy = NULL;
  replay.have_last_write = false;
}

#else /* a production rampartd: every hook does nothing */

bool rps_fault_compiled_in(void)
{
  return false;
}

int rps_fault_parse(const char *name, enum rps_fault_mode *mode)
{
  return -1;
}

const char *rps_fault_name(enum rps_fault_mode mode)
{
  return mode == RPS_FAULT_NONE ? "none" : "?";
}

void rps_fault_announce(enum rps_fault_mode mode)
{
}

bool rps_fault_refuses_write(enum rps_fault_mode mode, char *msg, size_t msglen)
{
  return false;
}

void rps_fault_on_write(enum rps_fault_mode mode, struct rps_store *store, uint64_t slot,
                        const uint8_t *page)
{
}

void rps_fault_read_reply(enum rps_fault_mode mode, struct rps_store *store,
                          const struct rps_account *acct, uint64_t slot, uint8_t *payload)
{
}

void rps_fault_release(void)
{
}

#endif
