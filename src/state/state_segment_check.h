/* The checks a state segment passes before a takeover uses anything in it
 * (state_segment.h, docs/security.md "State segment"): its header against the layout
 * this build computes from the device's geometry, and every record a takeover replays
 * against its bounds. A segment is this user's own, mode 0600, but it outlives the
 * process that wrote it and a bug or a stray write can leave anything there: a check
 * that fails is a refusal naming the field, never an access out of bounds.
 *
 * Errors: -1 with a sentence in err (CONTRIBUTING.md, convention 1).
 */
#ifndef RAMPART_STATE_SEGMENT_CHECK_H
#define RAMPART_STATE_SEGMENT_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "parity_group.h"
#include "state_segment_layout.h"

/* The header of a segment of `bytes` bytes, before anything in it is used: its magic,
 * layout and geometry against this device's fingerprint fp, every region's offset and
 * the total against state_segment_regions_of, and every count, index and flag of the
 * tables it holds (chunks, servers, write records, parity buffers, the open group, the
 * rebuild) against its bound. The identity and the key's wrap are the caller's. 0, or
 * -1 with err naming the field. */
int state_segment_check_header(const struct state_segment_header *h, uint64_t bytes,
                               const struct state_segment_fingerprint *fp, char *err,
                               size_t errlen);

/* The records of a state whose header h passed: its page map and seals (h's regions,
 * mapped), and the group chunks mapped (nchunks of them): each group's state, capacity,
 * members, server indexes, slots, pages and parity buffer; each page map entry; each
 * write record's versions; each seal's version against the nonce counter. 0, or -1
 * with err naming the record and the field. */
int state_segment_check_records(const struct state_segment_header *h, const page_entry *map,
                                const struct page_seal *seals, struct group *const *chunks,
                                uint32_t nchunks, char *err, size_t errlen);

#endif
