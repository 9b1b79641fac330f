/* The second parity's arithmetic (parity_code.c, on ISA-L) against a reference computed
 * here, independently: GF(2^8) with the polynomial 0x11d by log and antilog tables built
 * one shift at a time, Q = sum of 2^i * D_i byte by byte, and the RAID-6 paper's worked
 * recoveries (H. P. Anvin, "The mathematics of RAID-6"): one data member from Q alone,
 * two from P and Q. Then every loss of one or two pieces of every group width is
 * recovered by parity_code_recover, and three are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "parity_code.h"
#include "rampart.h"

#define PAGE RAMPART_PAGE_SIZE
#define PIECES (GROUP_MAX_DATA + 2)

static uint8_t gf_exp_table[512], gf_log_table[256];

/* The reference field: x^8 + x^4 + x^3 + x^2 + 1, generator 2, built by shifting. */
static void reference_field(void)
{
  unsigned x = 1;
  for (unsigned i = 0; i < 255; i++) {
    gf_exp_table[i] = (uint8_t)x;
    gf_log_table[x] = (uint8_t)i;
    x <<= 1;
    if (x & 0x100)
      x ^= 0x11d;
  }
  for (unsigned i = 255; i < 512; i++)
    gf_exp_table[i] = gf_exp_table[i - 255];
}

static uint8_t ref_mul(uint8_t a, uint8_t b)
{
  return a && b ? gf_exp_table[gf_log_table[a] + gf_log_table[b]] : 0;
}

static uint8_t ref_inv(uint8_t a)
{
  return gf_exp_table[255 - gf_log_table[a]];
}

static _Alignas(64) uint8_t data[GROUP_MAX_DATA][PAGE];
static _Alignas(64) uint8_t p_page[PAGE], q_page[PAGE], ref_q[PAGE], out[PAGE];

static void fill(unsigned k, unsigned seed)
{
  srand(seed);
  for (unsigned i = 0; i < k; i++)
    for (size_t b = 0; b < PAGE; b++)
      data[i][b] = (uint8_t)rand();
}

/* P and Q of the first k members, by the reference. */
static void reference_parities(unsigned k)
{
  memset(p_page, 0, PAGE);
  memset(ref_q, 0, PAGE);
  for (unsigned i = 0; i < k; i++)
    for (size_t b = 0; b < PAGE; b++) {
      p_page[b] ^= data[i][b];
      ref_q[b] ^= ref_mul(gf_exp_table[i], data[i][b]);
    }
}

static int setup(void **state)
{
  (void)state;
  reference_field();
  return 0;
}

static void test_q_coefficients_are_the_powers_of_two(void **state)
{
  (void)state;
  for (unsigned i = 0; i < GROUP_MAX_DATA; i++)
    assert_int_equal(parity_code_q_coefficient(i), gf_exp_table[i]);
  /* 2^8 wraps through the polynomial: 0x100 ^ 0x11d. */
  assert_int_equal(parity_code_q_coefficient(8), 0x1d);
}

static void test_q_matches_the_reference_added_one_member_at_a_time(void **state)
{
  (void)state;
  for (unsigned k = 1; k <= GROUP_MAX_DATA; k++) {
    fill(k, 100 + k);
    reference_parities(k);
    memset(q_page, 0, PAGE);
    for (unsigned i = 0; i < k; i++)
      parity_code_q_add(q_page, i, data[i]);
    assert_memory_equal(q_page, ref_q, PAGE);
    const uint8_t *src[GROUP_MAX_DATA];
    for (unsigned i = 0; i < k; i++)
      src[i] = data[i];
    memset(q_page, 0xa5, PAGE); /* encode overwrites, it does not accumulate */
    parity_code_q_encode(k, src, q_page);
    assert_memory_equal(q_page, ref_q, PAGE);
  }
}

/* The paper's two recoveries, by the reference field alone: D_x from Q and the other
 * members; D_x and D_y from P, Q and the rest, with
 *   A = g^(y-x) / (g^(y-x) + 1),  B = g^(-x) / (g^(y-x) + 1),
 *   D_x = A (P + Pxy) + B (Q + Qxy),  D_y = (P + Pxy) + D_x. */
static void test_the_worked_recoveries_agree_with_parity_code(void **state)
{
  (void)state;
  const unsigned k = 6, x = 1, y = 4;
  fill(k, 7);
  reference_parities(k);
  static _Alignas(64) uint8_t pxy[PAGE], qxy[PAGE], dx[PAGE], dy[PAGE];
  memset(pxy, 0, PAGE);
  memset(qxy, 0, PAGE);
  for (unsigned i = 0; i < k; i++)
    if (i != x && i != y)
      for (size_t b = 0; b < PAGE; b++) {
        pxy[b] ^= data[i][b];
        qxy[b] ^= ref_mul(gf_exp_table[i], data[i][b]);
      }
  uint8_t gyx = gf_exp_table[y - x];
  uint8_t a = ref_mul(gyx, ref_inv(gyx ^ 1)),
          bb = ref_mul(ref_inv(gf_exp_table[x]), ref_inv(gyx ^ 1));
  for (size_t b = 0; b < PAGE; b++) {
    dx[b] = ref_mul(a, p_page[b] ^ pxy[b]) ^ ref_mul(bb, ref_q[b] ^ qxy[b]);
    dy[b] = p_page[b] ^ pxy[b] ^ dx[b];
  }
  assert_memory_equal(dx, data[x], PAGE); /* the reference is right */
  assert_memory_equal(dy, data[y], PAGE);

  uint8_t id[GROUP_MAX_DATA];
  const uint8_t *piece[GROUP_MAX_DATA];
  unsigned n = 0;
  for (unsigned i = 0; i < k; i++)
    if (i != x && i != y) {
      id[n] = (uint8_t)i;
      piece[n++] = data[i];
    }
  id[n] = PARITY_PIECE_P;
  piece[n++] = p_page;
  id[n] = PARITY_PIECE_Q;
  piece[n++] = ref_q;
  assert_int_equal(parity_code_recover(k, id, piece, x, out), 0);
  assert_memory_equal(out, dx, PAGE);
  assert_int_equal(parity_code_recover(k, id, piece, y, out), 0);
  assert_memory_equal(out, dy, PAGE);

  /* One member from Q alone (P lost too): D_x = (Q + Qx) / g^x. */
  static _Alignas(64) uint8_t qx[PAGE];
  memset(qx, 0, PAGE);
  n = 0;
  for (unsigned i = 0; i < k; i++)
    if (i != x) {
      id[n] = (uint8_t)i;
      piece[n++] = data[i];
      for (size_t b = 0; b < PAGE; b++)
        qx[b] ^= ref_mul(gf_exp_table[i], data[i][b]);
    }
  for (size_t b = 0; b < PAGE; b++)
    dx[b] = ref_mul(ref_q[b] ^ qx[b], ref_inv(gf_exp_table[x]));
  assert_memory_equal(dx, data[x], PAGE);
  id[n] = PARITY_PIECE_Q;
  piece[n++] = ref_q;
  assert_int_equal(parity_code_recover(k, id, piece, x, out), 0);
  assert_memory_equal(out, data[x], PAGE);
}

/* Piece j of k + 2: member j, then P, then Q. */
static void piece_of(unsigned k, unsigned j, uint8_t *id, const uint8_t **page)
{
  if (j < k) {
    *id = (uint8_t)j;
    *page = data[j];
  } else {
    *id = (uint8_t)(j == k ? PARITY_PIECE_P : PARITY_PIECE_Q);
    *page = j == k ? p_page : ref_q;
  }
}

static void test_any_two_lost_pieces_of_any_width_come_back(void **state)
{
  (void)state;
  unsigned recovered = 0;
  for (unsigned k = 1; k <= GROUP_MAX_DATA; k++) {
    fill(k, 300 + k);
    reference_parities(k);
    for (unsigned l1 = 0; l1 < k + 2; l1++)
      for (unsigned l2 = l1; l2 < k + 2; l2++) {
        uint8_t id[PIECES];
        const uint8_t *piece[PIECES];
        unsigned n = 0;
        for (unsigned j = 0; j < k + 2 && n < k; j++)
          if (j != l1 && j != l2)
            piece_of(k, j, &id[n], &piece[n]), n++;
        assert_int_equal(n, k);
        for (unsigned t = 0; t < k; t++) {
          memset(out, 0, PAGE);
          assert_int_equal(parity_code_recover(k, id, piece, t, out), 0);
          assert_memory_equal(out, data[t], PAGE);
          recovered++;
        }
      }
  }
  print_message("%u recoveries, each byte for byte\n", recovered);
}

static void test_too_few_or_repeated_pieces_are_refused(void **state)
{
  (void)state;
  const unsigned k = 4;
  fill(k, 9);
  reference_parities(k);
  /* Members 0 and 1 and P twice: the rows repeat, nothing determines members 2 and 3. */
  uint8_t id[4] = { 0, 1, PARITY_PIECE_P, PARITY_PIECE_P };
  const uint8_t *piece[4] = { data[0], data[1], p_page, p_page };
  assert_int_equal(parity_code_recover(k, id, piece, 2, out), -1);
  uint8_t bad[4] = { 0, 1, 2, 7 }; /* member 7 of a group of 4 */
  assert_int_equal(parity_code_recover(k, bad, piece, 3, out), -1);
  assert_int_equal(parity_code_recover(k, id, piece, 4, out), -1); /* no such member */
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_q_coefficients_are_the_powers_of_two),
    cmocka_unit_test(test_q_matches_the_reference_added_one_member_at_a_time),
    cmocka_unit_test(test_the_worked_recoveries_agree_with_parity_code),
    cmocka_unit_test(test_any_two_lost_pieces_of_any_width_come_back),
    cmocka_unit_test(test_too_few_or_repeated_pieces_are_refused),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
