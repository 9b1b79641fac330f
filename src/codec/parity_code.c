/* Q and recovery for parity=2, on ISA-L's GF(2^8) (see parity_code.h). */
#include "parity_code.h"

#include <string.h>

#include <isa-l/erasure_code.h>

#include "wire.h"

uint8_t parity_code_q_coefficient(unsigned member)
{
  uint8_t c = 1;
  for (unsigned i = 0; i < member; i++)
    c = gf_mul(c, 2);
  return c;
}

/* ISA-L's expanded tables for one row of coefficients over k sources: 32 bytes each. */
static void row_tables(unsigned k, const uint8_t *row, uint8_t *tables)
{
  ec_init_tables((int)k, 1, (unsigned char *)row, tables);
}

void parity_code_q_add(uint8_t *q, unsigned member, const uint8_t *data)
{
  uint8_t c = parity_code_q_coefficient(member), tables[32];
  row_tables(1, &c, tables);
  unsigned char *dst[1] = { q };
  ec_encode_data_update(RP_PAGE_SIZE, 1, 1, 0, tables, (unsigned char *)data, dst);
}

void parity_code_q_encode(unsigned k, const uint8_t *const *data, uint8_t *q)
{
  uint8_t row[GROUP_MAX_DATA], tables[32 * GROUP_MAX_DATA];
  for (unsigned i = 0; i < k; i++)
    row[i] = parity_code_q_coefficient(i);
  row_tables(k, row, tables);
  unsigned char *dst[1] = { q };
  ec_encode_data(RP_PAGE_SIZE, (int)k, 1, tables, (unsigned char **)data, dst);
}

/* Row `id` of the group's generator: a member's unit row, P's ones, Q's powers of 2. */
static void generator_row(unsigned k, uint8_t id, uint8_t *row)
{
  for (unsigned j = 0; j < k; j++)
    row[j] = id == PARITY_PIECE_P   ? 1
             : id == PARITY_PIECE_Q ? parity_code_q_coefficient(j)
                                    : (uint8_t)(id == j);
}

int parity_code_recover(unsigned k, const uint8_t *id, const uint8_t *const *piece,
                        unsigned target, uint8_t *out)
{
  if (k == 0 || k > GROUP_MAX_DATA || target >= k)
    return -1;
  /* The pieces are the generator's rows `id` times the data; the data is the inverse
   * of those rows times the pieces, and the target is one row of that. */
  uint8_t m[GROUP_MAX_DATA * GROUP_MAX_DATA], inv[GROUP_MAX_DATA * GROUP_MAX_DATA];
  for (unsigned i = 0; i < k; i++) {
    if (id[i] >= k && id[i] != PARITY_PIECE_P && id[i] != PARITY_PIECE_Q)
      return -1;
    generator_row(k, id[i], m + i * k);
  }
  if (gf_invert_matrix(m, inv, (int)k) != 0)
    return -1;
  uint8_t tables[32 * GROUP_MAX_DATA];
  row_tables(k, inv + target * k, tables);
  unsigned char *dst[1] = { out };
  ec_encode_data(RP_PAGE_SIZE, (int)k, 1, tables, (unsigned char **)piece, dst);
  return 0;
}
