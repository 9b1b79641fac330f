/* The second parity of parity=2: a Reed-Solomon syndrome over GF(2^8), and recovering
 * up to two lost pages of a group from what is left.
 *
 * A group of k data members D_0..D_{k-1} carries P = D_0 ^ ... ^ D_{k-1} (parity_group.h)
 * and, under parity=2, Q = sum of 2^i * D_i over GF(2^8) with the polynomial 0x11d (the
 * RAID-6 code; ISA-L's field). Member i's coefficient does not depend on k, so the open
 * group adds each member to Q as it is placed, as it does to P, and Q never needs the
 * group's final size. Any k of the k + 2 pieces give back the rest. The arithmetic is
 * ISA-L's (ec_encode_data and its tables), which uses the CPU's vector units.
 *
 * Pieces are named by their place in the group: a data member by its index (below
 * GROUP_MAX_DATA), P and Q by PARITY_PIECE_P and PARITY_PIECE_Q.
 *
 * Errors: parity_code_recover returns 0, or -1 when the pieces cannot give the page back
 * (too few, or two naming the same piece); nothing else fails.
 */
#ifndef RAMPART_PARITY_CODE_H
#define RAMPART_PARITY_CODE_H

#include <stdint.h>

#include "parity_group.h"

#define PARITY_PIECE_P GROUP_MAX_DATA
#define PARITY_PIECE_Q (GROUP_MAX_DATA + 1u)

/* Member i's coefficient in Q: 2^i in GF(2^8). */
uint8_t parity_code_q_coefficient(unsigned member);

/* q ^= 2^member * data, over one page: `data` joins the Q of a group. */
void parity_code_q_add(uint8_t *q, unsigned member, const uint8_t *data);

/* Q of k members at once, into q (each data[i] one page). */
void parity_code_q_encode(unsigned k, const uint8_t *const *data, uint8_t *q);

/* Rebuilds data member `target` of a group of k members into `out`, from k pieces:
 * piece[i] is the page of the piece named id[i] (a member index, PARITY_PIECE_P or
 * PARITY_PIECE_Q). */
int parity_code_recover(unsigned k, const uint8_t *id, const uint8_t *const *piece,
                        unsigned target, uint8_t *out);

#endif
