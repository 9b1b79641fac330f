/* Memory for secrets, such as the cluster key.
 *
 * A key in ordinary heap memory can end up in a core dump, in swap, or in a page the
 * allocator hands to someone else later. Secrets get pages of their own instead:
 * excluded from core dumps (MADV_DONTDUMP), locked so the kernel never writes them to
 * swap (best effort: a page or two fits any RLIMIT_MEMLOCK), and wiped with
 * OPENSSL_cleanse before they are unmapped.
 *
 * A secret on the stack or in a struct is wiped with OPENSSL_cleanse directly (a plain
 * memset may be optimised away): every file holding one links libcrypto already.
 *
 * Errors: rp_secret_alloc returns NULL with errno set (CONTRIBUTING.md).
 */
#ifndef RAMPART_COMMON_SECRET_H
#define RAMPART_COMMON_SECRET_H

#include <stddef.h>

/* Zeroed memory for n bytes of secret, or NULL (errno set) when it cannot be mapped. */
void *rp_secret_alloc(size_t n);

/* Wipes and unmaps what rp_secret_alloc(n) returned. NULL is allowed. */
void rp_secret_free(void *p, size_t n);

#endif
