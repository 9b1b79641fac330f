/* rampart-parity-bench: CPU per 4 KiB page of what parity=2 adds, beside the seal every
 * write already pays (README.md). Single thread, no I/O: each figure is the best of
 * --rounds rounds of --pages pages, in ns per page.
 *
 *   seal        page_seal, AES-256-GCM, as a write seals its page
 *   P add       the XOR of a member into the open group's P (parity=1's whole cost)
 *   Q add       a member into Q as the write path does: copy to the spare, then ISA-L's
 *               ec_encode_data_update
 *   Q add, scalar  the same with ISA-L's scalar code (a table lookup a byte at a time):
 *               what a GF(2^8) of our own without vector code would cost
 *   recover 1   one member of k from P and the rest (XOR)
 *   recover 2   two members of k from P, Q and the rest (parity_code_recover, each)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <isa-l/erasure_code.h>

#include "page_seal.h"
#include "parity_code.h"
#include "parity_group.h"
#include "rampart.h"

#define PAGE RAMPART_PAGE_SIZE

static double now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ISA-L's own scalar code, a table lookup a byte at a time: what a GF(2^8) of our own
 * without vector code would cost. */
static void scalar_q_add(uint8_t *q, unsigned member, const uint8_t *d)
{
  unsigned char c = parity_code_q_coefficient(member), tables[32];
  ec_init_tables(1, 1, &c, tables);
  unsigned char *dst[1] = { q };
  ec_encode_data_update_base(PAGE, 1, 1, 0, tables, (unsigned char *)d, dst);
}

enum work { SEAL, P_ADD, Q_ADD, Q_ADD_SCALAR, RECOVER_1, RECOVER_2 };

struct rig {
  struct page_sealer sealer;
  uint8_t *data; /* GROUP_MAX_DATA pages */
  uint8_t *p, *q, *spare, *out;
  unsigned k;
};

static void run_once(struct rig *r, enum work w, unsigned i)
{
  uint8_t *d = r->data + (size_t)(i % r->k) * PAGE;
  struct page_seal seal;
  switch (w) {
  case SEAL:
    page_seal(&r->sealer, i % 1024, d, r->out, &seal);
    break;
  case P_ADD:
    parity_xor_pages(r->spare, r->p, d);
    break;
  case Q_ADD:
    memcpy(r->spare, r->q, PAGE);
    parity_code_q_add(r->spare, i % r->k, d);
    break;
  case Q_ADD_SCALAR:
    memcpy(r->spare, r->q, PAGE);
    scalar_q_add(r->spare, i % r->k, d);
    break;
  case RECOVER_1:
    memcpy(r->out, r->p, PAGE);
    for (unsigned m = 1; m < r->k; m++)
      parity_xor_page(r->out, r->data + (size_t)m * PAGE);
    break;
  case RECOVER_2: {
    uint8_t id[GROUP_MAX_DATA];
    const uint8_t *piece[GROUP_MAX_DATA];
    unsigned n = 0;
    for (unsigned m = 2; m < r->k; m++) {
      id[n] = (uint8_t)m;
      piece[n++] = r->data + (size_t)m * PAGE;
    }
    id[n] = PARITY_PIECE_P;
    piece[n++] = r->p;
    id[n] = PARITY_PIECE_Q;
    piece[n++] = r->q;
    if (parity_code_recover(r->k, id, piece, i & 1u, r->out) < 0)
      abort();
    break;
  }
  }
}

static double best_ns(struct rig *r, enum work w, unsigned pages, unsigned rounds)
{
  double best = 1e30;
  for (unsigned round = 0; round < rounds; round++) {
    double t0 = now_ns();
    for (unsigned i = 0; i < pages; i++)
      run_once(r, w, i);
    double per = (now_ns() - t0) / pages;
    best = per < best ? per : best;
  }
  return best;
}

int main(int argc, char **argv)
{
  unsigned pages = 20000, rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--pages") == 0)
      pages = (unsigned)strtoul(argv[i + 1], NULL, 10);
    else if (strcmp(argv[i], "--rounds") == 0)
      rounds = (unsigned)strtoul(argv[i + 1], NULL, 10);
    else {
      fprintf(stderr, "usage: rampart-parity-bench [--pages N] [--rounds N]\n");
      return 2;
    }
  }
  struct rig r = { 0 };
  char err[256];
  if (page_sealer_init(&r.sealer, 1024, true, NULL, 0, err, sizeof err) < 0) {
    fprintf(stderr, "rampart-parity-bench: %s\n", err);
    return 1;
  }
  uint8_t *mem = aligned_alloc(64, (size_t)(GROUP_MAX_DATA + 4) * PAGE);
  if (!mem)
    return 1;
  for (size_t b = 0; b < (size_t)(GROUP_MAX_DATA + 4) * PAGE; b++)
    mem[b] = (uint8_t)(b * 2654435761u >> 13);
  r.data = mem;
  r.p = mem + (size_t)GROUP_MAX_DATA * PAGE;
  r.q = r.p + PAGE;
  r.spare = r.q + PAGE;
  r.out = r.spare + PAGE;
  static const char *const names[] = {
    "seal", "P add", "Q add", "Q add, scalar", "recover 1 (XOR)", "recover 2 (P+Q)"
  };
  static const unsigned widths[] = { 4, 8, 16 };
  printf("%-18s %10s %10s %10s   (ns per 4 KiB page, best of %u rounds of %u)\n", "work",
         "S=4", "S=8", "S=16", rounds, pages);
  for (unsigned w = SEAL; w <= RECOVER_2; w++) {
    double ns[3];
    for (unsigned j = 0; j < 3; j++) {
      r.k = widths[j];
      /* P and Q of the k members, for the recoveries to be real ones. */
      memset(r.p, 0, PAGE);
      memset(r.q, 0, PAGE);
      for (unsigned m = 0; m < r.k; m++) {
        parity_xor_page(r.p, r.data + (size_t)m * PAGE);
        parity_code_q_add(r.q, m, r.data + (size_t)m * PAGE);
      }
      ns[j] = best_ns(&r, (enum work)w, pages, rounds);
    }
    printf("%-18s %10.0f %10.0f %10.0f\n", names[w], ns[0], ns[1], ns[2]);
  }
  page_sealer_destroy(&r.sealer);
  free(mem);
  return 0;
}
