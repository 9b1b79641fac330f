/* A server's index in the engine's server table (server_set.c): what groups, page ops,
 * FREEs, the placement order and the pager's state store to name a server.
 *
 * Sixteen bits, not eight: a lost server that comes back empty, and every replacement
 * a device takes after a loss, gets a new entry, and entries are never reused, so a
 * long-lived device with a placement set of 64 would run out of 255 entries after
 * about 190 replacements. The table itself is bounded by ENGINE_MAX_INCARNATIONS
 * (engine_core.h); this type only has to hold every index it allows, and NONE.
 *
 * Errors: none: a type and a constant.
 */
#ifndef RAMPART_SERVER_INDEX_H
#define RAMPART_SERVER_INDEX_H

#include <stdint.h>

typedef uint16_t server_index;

/* No server: a group's parity slot that is not stored anywhere (yet, or any more). */
#define SERVER_INDEX_NONE ((server_index)UINT16_MAX)

#endif
